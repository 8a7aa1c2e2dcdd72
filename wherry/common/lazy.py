"""Package attributes imported on first access (PEP 562's module `__getattr__`), so that
importing one submodule of a package does not import all the others (the broker's start
path loads only what it needs: docs/architecture.md, "Start")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any


def lazy_attributes(
    package: str, namespace: dict[str, Any], table: Mapping[str, tuple[str, str]]
) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: `table` maps a name to (submodule, attribute);
    the first access imports the submodule and keeps the value in `namespace` (the package's
    `globals()`), so later accesses are plain lookups."""

    def __getattr__(name: str) -> object:
        try:
            module, attr = table[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(import_module(module), attr)
        namespace[name] = value
        return value

    return __getattr__
