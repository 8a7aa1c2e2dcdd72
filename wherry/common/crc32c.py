"""CRC-32C (Castagnoli), Kafka's record-batch checksum, from the `crc32c` package's C
extension.

The package's `__init__` reads its own version with `importlib.metadata`, which imports email,
zipfile, csv and argparse: ~40 ms and ~2 MiB of every broker's start, to no use here. So the
extension module is loaded on its own (registered under its own name, so that a later import
of the package uses the same one); the package import is the fallback."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["crc32c"]

_EXTENSION = "crc32c._crc32c"


def _extension() -> Any:
    """The loaded `crc32c._crc32c`, without running the package's `__init__`; None where it
    cannot be found so."""
    if "crc32c" in sys.modules or _EXTENSION in sys.modules:
        return sys.modules.get(_EXTENSION)
    package = importlib.util.find_spec("crc32c")  # finds the package, runs none of it
    if package is None or not package.submodule_search_locations:
        return None
    loaders = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
    for location in package.submodule_search_locations:
        spec = importlib.machinery.FileFinder(location, loaders).find_spec(_EXTENSION)
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            sys.modules[_EXTENSION] = module
            return module
    return None


def _load() -> Callable[..., int]:
    try:
        module = _extension()
    except (ImportError, OSError):  # pragma: no cover - a package laid out otherwise
        module = None
    if module is not None:
        fn: Callable[..., int] = module.crc32c
        return fn
    from crc32c import crc32c as package_fn  # pragma: no cover - as above

    return package_fn  # pragma: no cover


crc32c: Callable[..., int] = _load()
"""`crc32c(data, value=0)`: the CRC-32C of `data` (a bytes-like object), continuing from
`value`."""
