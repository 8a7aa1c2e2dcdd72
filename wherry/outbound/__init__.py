"""Connections a broker opens to other brokers, and the client that sends requests over them:
replica fetchers to leaders, AlterPartition to the controller, the controller to brokers.

Below `server/` (which holds only the listening side): it depends on `protocol/` and, for
SASL between brokers (`security.py`, `sasl_handshake.py`), `security/`'s client mechanisms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wherry.common.lazy import lazy_attributes

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

# submodule → the names it gives this package, imported on first access (PEP 562):
# importing one submodule of this package does not import all the others.
_LAZY: dict[str, tuple[str, ...]] = {
    "wherry.outbound.client": ("RequestClient", "RequestError"),
    "wherry.outbound.connection": ("Connect", "FrameTransport", "OutboundConnection"),
}


__getattr__ = lazy_attributes(__name__, globals(), _LAZY)
