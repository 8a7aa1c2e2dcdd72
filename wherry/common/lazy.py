"""Package attributes imported on first access (PEP 562's module `__getattr__`), so that
importing one submodule of a package does not import all the others (the broker's start
path loads only what it needs: docs/architecture.md, "Start")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib import import_module
from typing import Any


def lazy_attributes(
    package: str,
    namespace: dict[str, Any],
    table: Mapping[str, Iterable[str]],
    *,
    renamed: Mapping[str, tuple[str, str]] | None = None,
) -> Callable[[str], object]:
    """A module `__getattr__` for `package`: `table` maps a submodule to the names it gives
    the package, `renamed` a name to the (submodule, attribute) it stands for; the first
    access imports the submodule and keeps the value in `namespace` (the package's
    `globals()`), so later accesses are plain lookups."""
    where = {name: (module, name) for module, names in table.items() for name in names}
    where.update(renamed or {})

    def __getattr__(name: str) -> object:
        try:
            module, attr = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(import_module(module), attr)
        namespace[name] = value
        return value

    return __getattr__
