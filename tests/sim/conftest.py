"""The simulation tests' common setting."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """Fault runs log thousands of expected warnings (unreachable leaders, fenced epochs)."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)
