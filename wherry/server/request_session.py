"""Who sent the request being handled: a context variable the broker sets per request (its own
module, so that a start does not import the authorization rules `authz.py` holds)."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

from wherry.security.principal import Session, anonymous_session

# The session of the request being handled; the broker sets it for each request.
_NO_SESSION = anonymous_session()  # outside any request (frozen, so shared safely)
REQUEST_SESSION: ContextVar[Session] = ContextVar("request_session", default=_NO_SESSION)


def current_session() -> Session:
    return REQUEST_SESSION.get()


def _not_muted(delay_ms: float) -> None:
    return None


# Stops reading the request's connection for N ms (a client quota's throttle); set with the
# session for each request.
REQUEST_MUTE: ContextVar[Callable[[float], None]] = ContextVar("request_mute", default=_not_muted)
