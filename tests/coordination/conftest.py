from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from coord_helpers import EmbeddedBackend, StoreBackend

BACKENDS = ["embedded"]


@pytest.fixture(params=BACKENDS)
def store_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    """A fresh, empty store per test, for every `MetadataStore` implementation."""
    backend: StoreBackend
    match request.param:
        case "embedded":
            backend = EmbeddedBackend(tmp_path)
        case other:
            raise AssertionError(other)
    yield backend
    asyncio.run(backend.aclose())
