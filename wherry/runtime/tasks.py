"""Stopping background tasks."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended. The `asyncio.CancelledError` it ends with
    is swallowed; any other exception it raises propagates."""
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
