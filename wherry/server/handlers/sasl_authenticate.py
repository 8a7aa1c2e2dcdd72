"""SaslAuthenticate (key 36) where no SASL exchange is expected: on a PLAINTEXT or SSL listener,
or after a SASL connection authenticated (the broker hands requests of an unauthenticated SASL
connection to its `SaslAuthenticator` instead). ILLEGAL_SASL_STATE, as Kafka's KafkaApis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from wherry.server.sasl_authenticator import non_sasl_response

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    return non_sasl_response(req)
