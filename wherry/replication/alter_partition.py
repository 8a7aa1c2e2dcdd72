"""Sending ISR changes to the controller (Kafka 3.9's DefaultAlterPartitionManager).

`AlterPartitionManager` is the I/O-free core: partitions `submit` their proposed ISR change
(at most one queued per partition); `next_request` batches everything queued into one
AlterPartition request (API 56) when none is in flight; `handle_response` splits the answer
per partition, and on a top-level error (NOT_CONTROLLER, STALE_BROKER_EPOCH, a lost
connection...) puts the items back and retries after a backoff. `run` drives it with an
injected async `send(body) -> response`; `ControllerSender` is such a `send` through an
`outbound.RequestClient` to whichever broker is the controller.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.outbound import OutboundConnection, RequestClient
from wherry.outbound.security import PLAINTEXT, ClientSecurity
from wherry.replication.isr import CommittedLeaderAndIsr, IsrProposal
from wherry.runtime.tasks import wait_event

log = logging.getLogger(__name__)

ALTER_PARTITION_KEY = 56
ALTER_PARTITION_VERSION = 3  # v3: ISR members with broker epochs (KIP-903)

AlterPartitionResult = CommittedLeaderAndIsr | ErrorCode
Send = Callable[[Mapping[str, Any]], Awaitable[Any]]


@dataclass(eq=False, slots=True)
class AlterPartitionItem:
    tp: TopicPartition
    topic_id: uuid.UUID
    proposal: IsrProposal
    callback: Callable[[AlterPartitionResult], None]
    attempts: int = 0


@dataclass(slots=True)
class AlterPartitionManager:
    broker_id: int
    broker_epoch: Callable[[], int]
    retry_backoff_ms: int = 50
    retry_backoff_max_ms: int = 1_000
    unsent: dict[TopicPartition, AlterPartitionItem] = field(default_factory=dict)
    inflight: list[AlterPartitionItem] | None = None
    failures: int = 0
    not_before_ms: int = 0
    requests_sent: int = 0
    _wakeup: asyncio.Event | None = None

    # --- the core -----------------------------------------------------------------------
    def submit(self, item: AlterPartitionItem) -> bool:
        """Queue a partition's proposal; False (not queued) if one is queued already."""
        if item.tp in self.unsent:
            return False
        self.unsent[item.tp] = item
        if self._wakeup is not None:
            self._wakeup.set()
        return True

    def next_request(self, now_ms: int) -> tuple[dict[str, Any], list[AlterPartitionItem]] | None:
        """The next request to send, or None (one in flight, nothing queued, or backing off)."""
        if self.inflight is not None or not self.unsent or now_ms < self.not_before_ms:
            return None
        items = list(self.unsent.values())
        self.unsent.clear()
        self.inflight = items
        self.requests_sent += 1
        for it in items:
            it.attempts += 1
        return build_request(self.broker_id, self.broker_epoch(), items), items

    def handle_response(
        self, items: Sequence[AlterPartitionItem], response: Any, now_ms: int
    ) -> list[tuple[AlterPartitionItem, AlterPartitionResult]]:
        """Per-partition results to deliver; `response` is the decoded answer or the
        exception the send raised. Top-level errors re-queue the items (a newer proposal for
        the same partition, queued meanwhile, wins) and back off."""
        self.inflight = None
        top = (
            ErrorCode.unknown_server_error
            if isinstance(response, BaseException)
            else ErrorCode(int(getattr(response, "error_code", 0)))
        )
        if top is not ErrorCode.none:
            self.failures += 1
            backoff = min(
                self.retry_backoff_max_ms,
                self.retry_backoff_ms << min(self.failures - 1, 20),
            )
            self.not_before_ms = now_ms + backoff
            (log.warning if self.failures == 1 else log.debug)(
                "[AlterPartitionManager broker=%d] request for %d partitions failed with %s; "
                "retrying in %d ms",
                self.broker_id,
                len(items),
                response if isinstance(response, BaseException) else top.name,
                backoff,
            )
            for it in items:
                self.unsent.setdefault(it.tp, it)
            return []
        self.failures = 0
        self.not_before_ms = 0
        by_key = parse_response(response)
        out: list[tuple[AlterPartitionItem, AlterPartitionResult]] = []
        for it in items:
            res = by_key.get((it.topic_id, it.tp.partition), ErrorCode.unknown_server_error)
            out.append((it, res))
        return out

    # --- the driver -----------------------------------------------------------------------
    async def run(self, send: Send, now_ms: Callable[[], int]) -> None:
        """Send queued changes until cancelled; deliver results to the items' callbacks."""
        self._wakeup = wakeup = asyncio.Event()
        try:
            while True:
                wakeup.clear()
                now = now_ms()
                nxt = self.next_request(now)
                if nxt is None:
                    timeout = None
                    if self.unsent and self.inflight is None:
                        timeout = max(0, self.not_before_ms - now) / 1000
                    await wait_event(wakeup, timeout)
                    continue
                body, items = nxt
                try:
                    resp: Any = await send(body)
                except asyncio.CancelledError:
                    self.inflight = None
                    raise
                except Exception as e:  # a lost connection, no controller known...
                    resp = e
                for it, res in self.handle_response(items, resp, now_ms()):
                    try:
                        it.callback(res)
                    except Exception:
                        log.exception(
                            "[AlterPartitionManager broker=%d] callback for %s failed",
                            self.broker_id,
                            it.tp,
                        )
        finally:
            self._wakeup = None


def build_request(
    broker_id: int, broker_epoch: int, items: Sequence[AlterPartitionItem]
) -> dict[str, Any]:
    """A version-neutral AlterPartition request body (v2 reads `new_isr`, v3
    `new_isr_with_epochs`; the codec drops what a version lacks)."""
    topics: dict[uuid.UUID, list[dict[str, Any]]] = {}
    for it in items:
        p = it.proposal
        topics.setdefault(it.topic_id, []).append(
            {
                "partition_index": it.tp.partition,
                "leader_epoch": p.leader_epoch,
                "new_isr": list(p.isr),
                "new_isr_with_epochs": [
                    {"broker_id": b, "broker_epoch": e}
                    for b, e in zip(p.isr, p.broker_epochs, strict=True)
                ],
                "leader_recovery_state": p.leader_recovery_state,
                "partition_epoch": p.partition_epoch,
            }
        )
    return {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "topics": [{"topic_id": tid, "partitions": parts} for tid, parts in topics.items()],
    }


def parse_response(
    response: Any,
) -> dict[tuple[uuid.UUID, int], AlterPartitionResult]:
    out: dict[tuple[uuid.UUID, int], AlterPartitionResult] = {}
    for t in getattr(response, "topics", ()):
        for p in t.partitions:
            err = ErrorCode(int(p.error_code))
            key = (t.topic_id, int(p.partition_index))
            if err is not ErrorCode.none:
                out[key] = err
            else:
                out[key] = CommittedLeaderAndIsr(
                    int(p.leader_id),
                    int(p.leader_epoch),
                    tuple(sorted(int(b) for b in p.isr)),
                    int(p.partition_epoch),
                    int(p.leader_recovery_state),
                )
    return out


class NoControllerError(ConnectionError):
    pass


class ControllerSender:
    """`send` for `AlterPartitionManager.run` over the network: one connection to the current
    controller (re-opened when the controller moves or the connection fails).

    `controller_address()` returns (broker id, host, port) of the controller, or None when it
    is not known (the metadata cache's controller id and that broker's endpoint)."""

    def __init__(
        self,
        broker_id: int,
        controller_address: Callable[[], tuple[int, str, int] | None],
        *,
        version: int = ALTER_PARTITION_VERSION,
        connect_timeout_s: float = 10.0,
        request_timeout_s: float = 30.0,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.broker_id = broker_id
        self.controller_address = controller_address
        self.version = version
        self.security = security
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self._client: RequestClient | None = None
        self._target: tuple[int, str, int] | None = None

    async def __call__(self, body: Mapping[str, Any]) -> Any:
        target = self.controller_address()
        if target is None:
            raise NoControllerError("no controller known")
        if self._client is None or self._target != target:
            await self.close()
            controller_id, host, port = target
            self._client = RequestClient(
                OutboundConnection(
                    host,
                    port,
                    connect_timeout_s=self.connect_timeout_s,
                    request_timeout_s=self.request_timeout_s,
                    security=self.security,
                ).connect,
                client_id=f"broker-{self.broker_id}-alter-partition",
                peer=f"controller {controller_id} at {host}:{port}",
            )
            self._target = target
        return await self._client.call(ALTER_PARTITION_KEY, self.version, body)

    async def close(self) -> None:
        client, self._client, self._target = self._client, None, None
        if client is not None:
            client.close()
