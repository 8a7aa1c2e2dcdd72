"""ConsumerGroupHeartbeat (key 68): the KIP-848 consumer group protocol, not built yet.

Kafka's KafkaApis answers this API with UNSUPPORTED_VERSION when its new group coordinator
is not enabled; wherry does the same, and advertises v0-1 only so that a client that asks
for the new protocol (`group.protocol=consumer`) gets that answer at once: librdkafka
raises a fatal error within milliseconds ("ConsumerGroupHeartbeat fatal error: Broker: API
version not supported"), the Java consumer fails with "The cluster doesn't support the new
consumer group protocol. Set group.protocol=classic ...". Without the API in ApiVersions
librdkafka keeps looking for a coordinator forever and says so only in its debug log.
No authorization check comes first, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices

log = logging.getLogger(__name__)

MESSAGE = (
    "The new consumer group protocol (KIP-848, group.protocol=consumer) is not supported by "
    "wherry yet: use group.protocol=classic"
)


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    log.info("group %s: %s", getattr(req.body, "group_id", "?"), MESSAGE)
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.unsupported_version,
        "error_message": MESSAGE,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval": 0,
        "assignment": None,
    }
