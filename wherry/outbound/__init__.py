"""Connections a broker opens to other brokers, and the client that sends requests over them:
replica fetchers to leaders, AlterPartition to the controller, the controller to brokers.

Below `server/` (which holds only the listening side): it depends on `protocol/` and, for
SASL between brokers (`security.py`, `sasl_handshake.py`), `security/`'s client mechanisms.
"""

from wherry.outbound.client import RequestClient, RequestError
from wherry.outbound.connection import Connect, FrameTransport, OutboundConnection

__all__ = [
    "Connect",
    "FrameTransport",
    "OutboundConnection",
    "RequestClient",
    "RequestError",
]
