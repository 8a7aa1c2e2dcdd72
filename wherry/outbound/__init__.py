"""Connections a broker opens to other brokers, and the client that sends requests over them:
replica fetchers to leaders, AlterPartition to the controller, the controller to brokers.

Below `server/` (which holds only the listening side): it depends on `protocol/` and, for
SASL between brokers (`security.py`, `sasl_handshake.py`), `security/`'s client mechanisms.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wherry.outbound.client import RequestClient, RequestError
    from wherry.outbound.connection import Connect, FrameTransport, OutboundConnection

__all__ = [
    "Connect",
    "FrameTransport",
    "OutboundConnection",
    "RequestClient",
    "RequestError",
]

# name → (submodule, attribute), imported on first access (PEP 562): importing one
# submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, str]] = {
    "Connect": ("wherry.outbound.connection", "Connect"),
    "FrameTransport": ("wherry.outbound.connection", "FrameTransport"),
    "OutboundConnection": ("wherry.outbound.connection", "OutboundConnection"),
    "RequestClient": ("wherry.outbound.client", "RequestClient"),
    "RequestError": ("wherry.outbound.client", "RequestError"),
}


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module), attr)
    globals()[name] = value
    return value
