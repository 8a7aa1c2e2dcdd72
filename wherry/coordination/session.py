"""What the `MetadataStore` implementations share: a session's id, state and listeners, the
checks every call makes, and how callbacks are run.

`StoreSession` is the base of `EmbeddedSession` and `ZooKeeperStore`; it keeps no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from wherry.common.closeable import AsyncCloseable
from wherry.coordination.store import (
    ConnectionLossError,
    MetadataStore,
    SessionClosedError,
    SessionExpiredError,
    SessionState,
    SessionStateListener,
)

__all__ = ["StoreSession", "as_bytes", "invoke_callback"]

logger = logging.getLogger(__name__)


def as_bytes(data: bytes | bytearray | memoryview) -> bytes:
    """Znode data as `bytes`; anything else is a `TypeError`."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"znode data must be bytes, not {type(data).__name__}")


def invoke_callback(fn: Callable[[Any], None], arg: object) -> None:
    """Call a watch callback or state listener; what it raises is logged, not propagated."""
    try:
        fn(arg)
    except Exception:
        logger.exception("coordination callback %r failed on %r", fn, arg)


class StoreSession(AsyncCloseable, MetadataStore):
    """A session's id, state and state listeners (``async with`` closes it); `create` as the
    interface writes it, on the store's `multi`."""

    _session_id: int
    _state: SessionState
    _listeners: dict[SessionStateListener, None]

    @property
    def session_id(self) -> int:
        """Non-zero id of this session (the ``ephemeral_owner`` of its ephemeral nodes)."""
        return self._session_id

    @property
    def state(self) -> SessionState:
        return self._state

    def add_state_listener(self, listener: SessionStateListener) -> None:
        self._listeners[listener] = None

    def remove_state_listener(self, listener: SessionStateListener) -> None:
        self._listeners.pop(listener, None)

    def _check_usable(self) -> None:
        """Raise unless the session is connected (closed, expired, suspended)."""
        match self._state:
            case SessionState.CLOSED:
                raise SessionClosedError(f"session {self._session_id:#x} is closed")
            case SessionState.EXPIRED:
                raise SessionExpiredError(f"session {self._session_id:#x} has expired")
            case SessionState.SUSPENDED:
                raise ConnectionLossError(f"session {self._session_id:#x} is disconnected")
