"""The controller's channel to brokers over the network (Kafka's ControllerChannelManager and
RequestSendThread).

One queue and one sender task per broker: a broker is added when it registers and removed
when it dies (or the controller resigns), and its queue goes with it. Each sender sends its
queue in order, one request in flight: a request that fails (cannot connect, connection lost,
timeout, unreadable or mismatched answer) is sent again on a fresh connection after a backoff
(doubling from `retry_backoff_ms` up to `retry_backoff_max_ms`), until the broker answers or is
removed. Every wait is bounded by the connect and request timeouts, and removal or `close()`
stops a sender at once, wherever it is.

The `ControllerChannel` methods only queue (as Kafka's controller, which never waits for a
broker: a dead broker must not stall the controller's event loop) and return None; answers go
to the callbacks and to the future `enqueue` returns. Requests carry the controller epoch the
controller put in them; they are encoded with `DEFAULT_INTERBROKER_VERSIONS` unless told
otherwise. Each sender talks through an `outbound.RequestClient` (correlation ids, encoding,
decoding), whose connections come from a `Connector`: TCP (`outbound.OutboundConnection`) by
default, whatever `BrokerConnection` a test or simulation plugs in otherwise, so the queue and
retry logic here is the same whatever the transport.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from wherry.controller.channel import BrokerAddress, ControllerChannel, ResponseCallback
from wherry.controller.request_batch import BrokerRequest
from wherry.outbound import FrameTransport, OutboundConnection, RequestClient
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.protocol.interbroker import (
    LEADER_AND_ISR_KEY,
    STOP_REPLICA_KEY,
    UPDATE_METADATA_KEY,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)
from wherry.protocol.interbroker_codec import (
    DEFAULT_INTERBROKER_VERSIONS,
    InterbrokerEncodeError,
    InterbrokerRequestBody,
    InterbrokerResponseBody,
)
from wherry.runtime.state_change_log import state_change_logger
from wherry.runtime.tasks import cancel_and_wait

log = logging.getLogger(__name__)

__all__ = [
    "BrokerAddress",
    "BrokerConnection",
    "ChannelConfig",
    "Connector",
    "NetworkChannelManager",
    "ResponseCallback",
    "api_key_of",
    "retry_backoff_ms",
    "send_batch",
    "tcp_connector",
]


BrokerConnection = FrameTransport
"""What a sender needs from a connection (`outbound.OutboundConnection` is one)."""

Connector = Callable[[int, BrokerAddress], Awaitable[BrokerConnection]]
"""Opens a connection to (broker id, address); raises OSError/TimeoutError when it cannot."""


@dataclass(frozen=True, slots=True)
class ChannelConfig:
    connect_timeout_ms: int = 30_000  # Kafka's controller.socket.timeout.ms
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100  # Kafka's RequestSendThread sleeps 100 ms between attempts
    retry_backoff_max_ms: int = 1_000
    security: ClientSecurity = PLAINTEXT  # the inter-broker listener's


def retry_backoff_ms(config: ChannelConfig, failures: int) -> int:
    """The pause after the `failures`-th failed attempt at one request (1, 2, ...)."""
    if failures <= 0:
        return 0
    return min(config.retry_backoff_max_ms, config.retry_backoff_ms << min(failures - 1, 30))


def tcp_connector(config: ChannelConfig) -> Connector:
    async def connect(broker_id: int, address: BrokerAddress) -> BrokerConnection:
        return await OutboundConnection(
            address.host,
            address.port,
            connect_timeout_s=config.connect_timeout_ms / 1000,
            request_timeout_s=config.request_timeout_ms / 1000,
            security=config.security,
        ).connect()

    return connect


_API_NAMES = {
    LEADER_AND_ISR_KEY: "LeaderAndIsr",
    STOP_REPLICA_KEY: "StopReplica",
    UPDATE_METADATA_KEY: "UpdateMetadata",
}


def api_key_of(body: InterbrokerRequestBody) -> int:
    if isinstance(body, LeaderAndIsrRequest):
        return LEADER_AND_ISR_KEY
    if isinstance(body, StopReplicaRequest):
        return STOP_REPLICA_KEY
    return UPDATE_METADATA_KEY


@dataclass(slots=True)
class _Item:
    api_key: int
    body: InterbrokerRequestBody
    future: asyncio.Future[InterbrokerResponseBody | None]
    callback: ResponseCallback | None = None
    attempts: int = field(default=0)


class _Sender:
    """One broker's queue and the task sending it (Kafka's RequestSendThread)."""

    def __init__(self, manager: NetworkChannelManager, broker_id: int, address: BrokerAddress):
        self.manager = manager
        self.broker_id = broker_id
        self.address = address
        self.queue: collections.deque[_Item] = collections.deque()
        self.wakeup = asyncio.Event()
        self.client_id = f"controller-{manager.controller_id}-to-broker-{broker_id}"
        self.client = RequestClient(
            lambda: manager._connector(broker_id, address),
            client_id=self.client_id,
            peer=f"broker {broker_id} at {address.host}:{address.port}",
        )
        self.task = asyncio.get_running_loop().create_task(self._run(), name=self.client_id)

    def put(self, item: _Item) -> None:
        self.queue.append(item)
        self.wakeup.set()

    async def stop(self) -> None:
        await cancel_and_wait(self.task)

    async def _run(self) -> None:
        try:
            while True:
                while not self.queue:
                    self.wakeup.clear()
                    await self.wakeup.wait()
                item = self.queue[0]  # stays queued (and counted) until answered
                response = await self._send_until_answered(item)
                self.queue.popleft()
                self.manager._deliver(self.broker_id, item, response)
        finally:
            self.client.close()
            dropped, self.queue = self.queue, collections.deque()
            for item in dropped:
                if not item.future.done():
                    item.future.set_result(None)

    async def _send_until_answered(self, item: _Item) -> InterbrokerResponseBody | None:
        m = self.manager
        version = m.versions[item.api_key]
        failures = 0
        while True:
            item.attempts += 1
            try:
                response: InterbrokerResponseBody = await self.client.call(
                    item.api_key, version, item.body
                )
                return response
            except InterbrokerEncodeError:
                log.exception(
                    "%s cannot encode %s v%d for broker %d; dropping it",
                    m._prefix,
                    _API_NAMES[item.api_key],
                    version,
                    self.broker_id,
                )
                return None
            except Exception as e:  # Kafka's RequestSendThread catches everything, too
                failures += 1
                pause_ms = retry_backoff_ms(m.config, failures)
                (log.warning if failures == 1 or failures % 50 == 0 else log.debug)(
                    "%s failed to send %s (attempt %d) to broker %d at %s:%d: %r; "
                    "reconnecting in %d ms",
                    m._prefix,
                    _API_NAMES[item.api_key],
                    failures,
                    self.broker_id,
                    self.address.host,
                    self.address.port,
                    e,
                    pause_ms,
                )
                await asyncio.sleep(pause_ms / 1000)


class NetworkChannelManager:
    """`ControllerChannel` over the network; see the module docstring."""

    def __init__(
        self,
        controller_id: int,
        *,
        config: ChannelConfig | None = None,
        connector: Connector | None = None,
        versions: Mapping[int, int] | None = None,
        on_response: ResponseCallback | None = None,
    ) -> None:
        self.controller_id = controller_id
        self.config = config or ChannelConfig()
        self._connector = connector or tcp_connector(self.config)
        self.versions = dict(DEFAULT_INTERBROKER_VERSIONS)
        self.versions.update(versions or {})
        self.on_response = on_response
        self._listeners: list[ResponseCallback] = []
        self._senders: dict[int, _Sender] = {}
        self._closed = False
        self._prefix = f"[ControllerChannelManager id={controller_id}]"

    # --- brokers ---------------------------------------------------------------------------
    @property
    def brokers(self) -> dict[int, BrokerAddress]:
        return {b: s.address for b, s in self._senders.items()}

    def queue_size(self, broker_id: int) -> int:
        """Requests queued for a broker, the one in flight included."""
        s = self._senders.get(broker_id)
        return 0 if s is None else len(s.queue)

    def add_broker(self, broker_id: int, address: BrokerAddress) -> None:
        """Start a queue for a broker; nothing happens if it is already there."""
        if self._closed or broker_id in self._senders:
            return
        self._senders[broker_id] = _Sender(self, broker_id, address)
        log.info("%s added broker %d at %s:%d", self._prefix, broker_id, address.host, address.port)

    async def remove_broker(self, broker_id: int) -> None:
        """Stop a broker's sender and drop its queue (their futures get None)."""
        s = self._senders.pop(broker_id, None)
        if s is None:
            return
        if s.queue:
            log.info(
                "%s removed broker %d, dropping %d queued requests",
                self._prefix,
                broker_id,
                len(s.queue),
            )
        await s.stop()

    async def sync_brokers(self, live: Mapping[int, BrokerAddress]) -> None:
        """Make the queues match the live brokers: remove the dead, replace a broker whose
        address or epoch changed (a new incarnation), add the new."""
        for b, s in list(self._senders.items()):
            if live.get(b) != s.address:
                await self.remove_broker(b)
        for b in sorted(live):
            self.add_broker(b, live[b])

    # --- sending ---------------------------------------------------------------------------
    def enqueue(
        self,
        broker_id: int,
        body: InterbrokerRequestBody,
        callback: ResponseCallback | None = None,
    ) -> asyncio.Future[InterbrokerResponseBody | None]:
        """Queue a request; the future gets the answer, or None when the broker is removed
        (or unknown) first."""
        future: asyncio.Future[InterbrokerResponseBody | None] = (
            asyncio.get_running_loop().create_future()
        )
        s = self._senders.get(broker_id)
        if s is None:
            log.warning(
                "%s not sending %s to broker %d, since it is offline",
                self._prefix,
                _API_NAMES[api_key_of(body)],
                broker_id,
            )
            future.set_result(None)
            return future
        s.put(_Item(api_key_of(body), body, future, callback))
        return future

    def _deliver(
        self, broker_id: int, item: _Item, response: InterbrokerResponseBody | None
    ) -> None:
        if not item.future.done():
            item.future.set_result(response)
        if response is None:
            return
        for cb in (item.callback, self.on_response, *self._listeners):
            if cb is None:
                continue
            try:
                cb(broker_id, item.body, response)
            except Exception:
                log.exception("%s response callback failed", self._prefix)

    def add_response_listener(self, listener: ResponseCallback) -> None:
        """Hear every answer (`channel.ResponseListenable`; the controller registers here)."""
        if listener not in self._listeners:
            self._listeners.append(listener)

    def remove_response_listener(self, listener: ResponseCallback) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # ControllerChannel: queue and return at once (None = not answered here).
    async def leader_and_isr(
        self, broker_id: int, req: LeaderAndIsrRequest
    ) -> LeaderAndIsrResponse | None:
        self.enqueue(broker_id, req)
        return None

    async def update_metadata(self, broker_id: int, req: UpdateMetadataRequest) -> int | None:
        self.enqueue(broker_id, req)
        return None

    async def stop_replica(
        self, broker_id: int, req: StopReplicaRequest
    ) -> StopReplicaResponse | None:
        self.enqueue(broker_id, req)
        return None

    async def close(self) -> None:
        """Stop every sender; queued requests are dropped."""
        self._closed = True
        for b in list(self._senders):
            await self.remove_broker(b)


SentRequest = tuple[BrokerRequest, LeaderAndIsrResponse | StopReplicaResponse | int | None]
"""A request handed to a channel and the answer the channel gave at once (None: none yet)."""


async def send_batch(
    channel: ControllerChannel, requests: Iterable[BrokerRequest]
) -> list[SentRequest]:
    """Hand a built `RequestBatch` to any channel, in order, logging what goes where; returns
    each request with the channel's immediate answer (an in-process broker's; None from a
    queueing channel, which reports answers to its listeners)."""
    out: list[SentRequest] = []
    for r in requests:
        body = r.body
        if isinstance(body, LeaderAndIsrRequest):
            leaders = sum(1 for s in body.partition_states if s.leader == r.broker_id)
            state_change_logger.info(
                "[Controller id=%d epoch=%d] Sending LeaderAndIsr request to broker %d with "
                "%d become-leader and %d become-follower partitions",
                body.controller_id,
                body.controller_epoch,
                r.broker_id,
                leaders,
                len(body.partition_states) - leaders,
            )
            out.append((r, await channel.leader_and_isr(r.broker_id, body)))
        elif isinstance(body, UpdateMetadataRequest):
            state_change_logger.info(
                "[Controller id=%d epoch=%d] Sending UpdateMetadata request to broker %d for "
                "%d partitions",
                body.controller_id,
                body.controller_epoch,
                r.broker_id,
                len(body.partition_states),
            )
            out.append((r, await channel.update_metadata(r.broker_id, body)))
        else:
            state_change_logger.info(
                "[Controller id=%d epoch=%d] Sending StopReplica request to broker %d for %d "
                "partitions",
                body.controller_id,
                body.controller_epoch,
                r.broker_id,
                len(body.partitions),
            )
            out.append((r, await channel.stop_replica(r.broker_id, body)))
    return out
