"""The broker side of controlled shutdown (Kafka's KafkaServer.controlledShutdown).

When a broker stops with `controlled.shutdown.enable` (the default), before it closes its
listener and replicas it asks the controller to move its leaderships away: ControlledShutdown
(broker id, broker epoch) to the controller its metadata cache names, over an
`outbound.RequestClient`, or straight to its own controller instance when that one is the
active controller. The controller elects new leaders for the partitions it leads, takes it out
of the ISRs and answers with the partitions it still leads. Meanwhile the broker keeps serving:
clients are redirected by the new metadata and followers fetch what they still miss.

The attempts and their retries are `replication/controlled_shutdown.py`'s (the simulated
brokers run them too); this module asks the controller (`ControllerAsker`). After
a success the broker waits (bounded by `controller.socket.timeout.ms`) until its own metadata
shows it leads no replicated partition any more, so the moves have reached the brokers before
its listener closes. When the attempts run out it logs a WARNING naming the partitions it
still leads and stops anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.outbound.client import RequestClient, RequestError
from wherry.outbound.connection import OutboundConnection
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.protocol.controlled_shutdown_codec import DEFAULT_CONTROLLED_SHUTDOWN_VERSION
from wherry.protocol.interbroker import (
    CONTROLLED_SHUTDOWN_KEY,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
)
from wherry.replication.controlled_shutdown import (
    ControlledShutdown,
    ControlledShutdownSettings,
    Outcome,
)
from wherry.replication.controller_requests import ControllerFence
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.node import ReplicaNode
from wherry.server.config import BrokerConfig

__all__ = ["ControllerAsker", "ShuttingDownBroker", "run", "settings_of"]

log = logging.getLogger(__name__)


class ShuttingDownBroker(Protocol):
    """What controlled shutdown uses of the broker (`server/broker.py`'s `Broker`)."""

    broker_id: int
    config: BrokerConfig
    node: ReplicaNode
    client_security: ClientSecurity

    @property
    def fence(self) -> ControllerFence: ...

    @property
    def cache(self) -> MetadataCache: ...

    async def wait_for_metadata(self, predicate: Callable[[], bool], timeout_ms: int) -> bool: ...


def settings_of(config: BrokerConfig) -> ControlledShutdownSettings:
    return ControlledShutdownSettings(
        enable=config.controlled_shutdown_enable,
        max_retries=config.controlled_shutdown_max_retries,
        retry_backoff_ms=config.controlled_shutdown_retry_backoff_ms,
        request_timeout_ms=config.controller_socket_timeout_ms,
    )


class ControllerAsker:
    """One ControlledShutdown request of a `wherry server` broker: to its own controller
    instance when that is the active one, else over an `outbound.RequestClient` to the
    controller its metadata cache names."""

    def __init__(
        self,
        broker_id: int,
        settings: ControlledShutdownSettings,
        *,
        broker_epoch: Callable[[], int],
        controller_address: Callable[[], tuple[int, str, int] | None],
        local_controller: Callable[[], Any | None],
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.security = security
        self.broker_id = broker_id
        self.settings = settings
        self._broker_epoch = broker_epoch
        self._controller_address = controller_address
        self._local_controller = local_controller
        self._prefix = f"[Broker id={broker_id}]"

    async def __call__(self) -> Outcome | None:
        """One request: the controller's (error, remaining partitions), or None when no
        controller is known or it could not be reached."""
        epoch = self._broker_epoch()
        local = self._local_controller()
        if local is not None:
            error, remaining = await local.controlled_shutdown(self.broker_id, epoch)
            return ErrorCode(int(error)), list(remaining)
        target = self._controller_address()
        if target is None:
            log.info("%s controlled shutdown: no controller known", self._prefix)
            return None
        controller_id, host, port = target
        timeout_s = self.settings.request_timeout_ms / 1000
        client = RequestClient(
            OutboundConnection(
                host,
                port,
                connect_timeout_s=timeout_s,
                request_timeout_s=timeout_s,
                security=self.security,
            ).connect,
            client_id=f"broker-{self.broker_id}-controlled-shutdown",
            peer=f"controller {controller_id} at {host}:{port}",
        )
        try:
            answer = await client.call(
                CONTROLLED_SHUTDOWN_KEY,
                DEFAULT_CONTROLLED_SHUTDOWN_VERSION,
                ControlledShutdownRequest(self.broker_id, epoch),
            )
        except RequestError as e:
            log.warning(
                "%s error during controlled shutdown, possibly because leader movement took "
                "longer than controller.socket.timeout.ms: %s",
                self._prefix,
                e,
            )
            return None
        finally:
            client.close()
        assert isinstance(answer, ControlledShutdownResponse)
        return ErrorCode(answer.error_code), [
            TopicPartition(p.topic_name, p.partition_index) for p in answer.remaining_partitions
        ]


def _replicated_leaderships(broker: ShuttingDownBroker) -> list[TopicPartition]:
    """Partitions this broker's metadata shows it leading with other replicas to take over."""
    return [
        TopicPartition(p.topic_name, p.partition_index)
        for p in broker.cache.all_partitions()
        if p.leader == broker.broker_id and len(p.replicas) > 1
    ]


async def run(broker: ShuttingDownBroker) -> bool:
    """Controlled shutdown of a started broker that is stopping, if enabled (see the module
    docstring); True when the controller moved every leadership."""
    settings = settings_of(broker.config)
    if not settings.enable:
        return False

    def local_controller() -> Any | None:
        controller = getattr(broker, "controller", None)
        return controller if controller is not None and controller.active else None

    def led() -> list[TopicPartition]:
        parts = broker.node.replica_manager.partitions
        return [tp for tp, part in parts.items() if part.is_leader and len(part.assignment) > 1]

    ask = ControllerAsker(
        broker.broker_id,
        settings,
        broker_epoch=lambda: broker.fence.broker_epoch,
        controller_address=broker.node.controller_address,
        local_controller=local_controller,
        security=broker.client_security,
    )
    shutdown = ControlledShutdown(broker.broker_id, settings, ask=ask, led_partitions=led)
    try:
        if not await shutdown.run():
            return False
        # The controller has moved the leaderships; keep serving until this broker's metadata
        # shows the moves too (the new leaders have been told by then).
        await broker.wait_for_metadata(
            lambda: not _replicated_leaderships(broker), settings.request_timeout_ms
        )
    except Exception:  # never keep a broker from stopping
        log.exception("[Broker id=%d] controlled shutdown failed", broker.broker_id)
        return False
    return True
