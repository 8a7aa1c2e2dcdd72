"""A simulated broker process: the real LogManager (files in its own directory) and the real
`ReplicaNode` that `wherry server` runs (replica manager, purgatories and their ticker,
fetchers, AlterPartition manager, ISR expiry, HW checkpoints, the controller requests' rules),
with the network replaced by `SimNetwork` calls and time by the simulated loop's clock.

`crash()` ends the process at once: its tasks are cancelled and its file descriptors closed
without flushing or writing anything (the page cache survives, so the files keep every byte
written); for a power loss the world then cuts what was never fsynced (`disk.py`).

`controlled_shutdown()` then `stop()` is a clean stop, as `wherry server` would do it with
Kafka's `controlled.shutdown.enable`: ask the controller (ControlledShutdown) until it answers
with no partitions still led, at most `controlled.shutdown.max.retries` times with
`controlled.shutdown.retry.backoff.ms` between attempts (Kafka's KafkaServer.controlledShutdown;
it stops anyway when they all fail); then stop the replica node and close the logs with their
checkpoints and the clean-shutdown marker (as `Broker.stop`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.manager import LogManager
from wherry.protocol.interbroker import BrokerEndpoint, UpdateMetadataRequest
from wherry.protocol.interbroker_codec import InterbrokerRequestBody, InterbrokerResponseBody
from wherry.replication.controlled_shutdown import ControlledShutdown, ControlledShutdownSettings
from wherry.replication.controller_requests import ControllerFence
from wherry.replication.fetch_reads import FetchPartition, FetchResult
from wherry.replication.fetcher import (
    EpochAnswer,
    FetchedPartition,
    FetcherConfig,
    FetchLimits,
    FetchPosition,
    LeaderEndpoint,
    LogOffsets,
)
from wherry.replication.metadata_cache import MetadataCache
from wherry.replication.node import ReplicaNode, ReplicaNodeConfig
from wherry.replication.partition import PartitionError
from wherry.replication.replica_manager import ReplicaManager
from wherry.runtime.clock import FunctionClock
from wherry.sim.controller import ControllerMessage, UpdateLiveBrokers
from wherry.sim.network import CONTROLLER_ID, SimNetwork

log = logging.getLogger(__name__)


class NodeService(Protocol):
    def abandon(self) -> None: ...

    async def stop(self) -> None: ...


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig:
    log_config: LogConfig
    fetcher: FetcherConfig
    replica_lag_time_max_ms: int
    request_timeout_ms: int
    hw_checkpoint_interval_ms: int = 200
    recovery_checkpoint_interval_ms: int = 300
    controlled_shutdown_max_retries: int = 3  # Kafka's default
    controlled_shutdown_retry_backoff_ms: int = 200  # Kafka's is 5000; simulated runs are short


class SimBroker:
    def __init__(
        self,
        broker_id: int,
        data_dir: Path,
        incarnation: int,
        broker_epoch: int,
        network: SimNetwork,
        config: NodeConfig,
        now_ms: Callable[[], int],
        send_to_controller: Callable[[int, Mapping[str, Any]], Any],
        node_for: Callable[[int], SimBroker | None],
    ) -> None:
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.incarnation = incarnation
        self.network = network
        self.config = config
        self.now_ms = now_ms
        self._broker_epoch = broker_epoch
        self._send_to_controller = send_to_controller
        self._node_for = node_for
        self._tasks: list[asyncio.Task[Any]] = []
        self.up = False
        self.replica: ReplicaNode
        # What else runs in the process on the replica node (the transaction coordinator):
        # abandoned at a crash, stopped first at a clean stop.
        self.services: list[NodeService] = []

    @property
    def fence(self) -> ControllerFence:
        return self.replica.fence

    @property
    def broker_epoch(self) -> int:
        return self.replica.fence.broker_epoch

    @property
    def cache(self) -> MetadataCache:
        """The real controller's UpdateMetadata lands here (live brokers, controller id)."""
        return self.replica.cache

    @property
    def replica_manager(self) -> ReplicaManager:
        return self.replica.replica_manager

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        self.log_manager = LogManager([self.data_dir], cfg.log_config, self.now_ms)
        self.log_manager.startup()
        self.replica = ReplicaNode(
            self.broker_id,
            self.log_manager,
            config=ReplicaNodeConfig(
                replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
                high_watermark_checkpoint_interval_ms=cfg.hw_checkpoint_interval_ms,
                fetcher=cfg.fetcher,
                blocking_in_executor=False,  # deterministic: no threads
            ),
            clock=FunctionClock(self.now_ms),
            topic_config=lambda _topic: cfg.log_config,
            leader_endpoint=lambda a: SimLeaderEndpoint(self, a.broker_id),
            send_alter_partition=self._send_alter_partition,
            fence=ControllerFence(broker_epoch=self._broker_epoch),
        )
        self.replica.start()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._checkpoint_recovery_points())]
        self.up = True

    def crash(self) -> list[Path]:
        """Kill the process: nothing more runs, nothing is flushed or checkpointed. Returns
        the segment files, for a power loss to cut (`disk.DurableFiles`)."""
        self.up = False
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        for s in self.services:
            s.abandon()
        self.replica.abandon()
        files: list[Path] = []
        for plog in self.log_manager.all_logs():
            if plog.closed:
                continue
            for seg in plog.segments:
                files.append(seg.log_path)
                # Release the descriptor only: a killed process writes no index, no snapshot.
                seg._release_fd()
        self.log_manager.abandon()
        return files

    async def controlled_shutdown(
        self,
        request: Callable[[SimBroker], Awaitable[tuple[ErrorCode, list[TopicPartition]]]],
    ) -> bool:
        """Ask the controller to move everything away from this broker, with the attempts and
        retries `wherry server` makes (`replication/controlled_shutdown.py`); `request` is one
        ControlledShutdown over the simulated network. True when the controller answered with
        nothing left."""
        cfg = self.config

        async def ask() -> tuple[ErrorCode, list[TopicPartition]] | None:
            try:
                return await request(self)
            except (ConnectionError, TimeoutError) as e:
                log.info("broker %d: controlled shutdown request lost: %s", self.broker_id, e)
                return None

        settings = ControlledShutdownSettings(
            max_retries=cfg.controlled_shutdown_max_retries,
            retry_backoff_ms=cfg.controlled_shutdown_retry_backoff_ms,
        )
        led = self.replica.replica_manager.partitions
        return await ControlledShutdown(
            self.broker_id,
            settings,
            ask=ask,
            led_partitions=lambda: [
                tp for tp, p in led.items() if p.is_leader and len(p.assignment) > 1
            ],
        ).run()

    async def stop(self) -> None:
        """A clean stop (after `controlled_shutdown`): the replica node stops (fetchers,
        purgatories, HW checkpoint), then the logs are flushed and closed with every checkpoint
        and the clean-shutdown marker."""
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        for s in self.services:
            await s.stop()
        await self.replica.stop()
        self.log_manager.shutdown()
        self.up = False

    async def _checkpoint_recovery_points(self) -> None:
        while True:
            await asyncio.sleep(self.config.recovery_checkpoint_interval_ms / 1000)
            self.log_manager.checkpoint_recovery_points()

    async def _send_alter_partition(self, body: Mapping[str, Any]) -> Any:
        return await self._send_to_controller(self.broker_id, body)

    # --- controller requests -------------------------------------------------------------------
    async def handle_controller_message(self, msg: ControllerMessage) -> int:
        """A message from the model controller (`--controller model`)."""
        if isinstance(msg, UpdateLiveBrokers):
            return await self.replica.handle_update_metadata(
                UpdateMetadataRequest(
                    CONTROLLER_ID,
                    msg.controller_epoch,
                    msg.broker_epoch,
                    (),
                    tuple(BrokerEndpoint(b, "sim", b) for b in sorted(msg.live)),
                )
            )
        return (await self.replica.handle_leader_and_isr(msg)).error_code

    async def handle_interbroker(self, body: InterbrokerRequestBody) -> InterbrokerResponseBody:
        """A request from the real controller (decoded off the simulated wire)."""
        return await self.replica.handle_interbroker(body)

    # --- what other processes call ------------------------------------------------------------
    async def serve_fetch(
        self,
        replica_id: int,
        replica_epoch: int,
        partitions: list[FetchPartition],
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
    ) -> FetchResult:
        return await self.replica.fetch(
            partitions,
            replica_id=replica_id,
            replica_epoch=replica_epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
        )

    async def serve_produce(
        self, tp: TopicPartition, batch: bytes, *, timeout_ms: int
    ) -> tuple[ErrorCode, int]:
        """acks=all produce of one batch: (error, base offset)."""
        result = await self.replica.append({tp: batch}, required_acks=-1, timeout_ms=timeout_ms)
        st = result[tp]
        return ErrorCode(st.error_code), st.base_offset


class SimLeaderEndpoint(LeaderEndpoint):
    """`LeaderEndpoint` over the simulated network: the leader's own fetch path and its
    OffsetForLeaderEpoch answer (the replica manager's, which the broker's handler uses)."""

    def __init__(self, follower: SimBroker, leader_id: int) -> None:
        self.follower = follower
        self.leader_id = leader_id

    def _leader(self) -> SimBroker:
        node = self.follower._node_for(self.leader_id)
        if node is None or not node.up:
            raise ConnectionError(f"broker {self.leader_id} is down")
        return node

    async def _call(self, fn: Callable[[SimBroker], Any]) -> Any:
        async def handler() -> Any:
            return await fn(self._leader())

        return await self.follower.network.call(
            self.follower.broker_id,
            self.leader_id,
            handler,
            timeout_ms=self.follower.config.request_timeout_ms,
        )

    async def fetch(
        self,
        partitions: Mapping[TopicPartition, FetchPosition],
        limits: FetchLimits,
    ) -> dict[TopicPartition, FetchedPartition]:
        wanted = [
            FetchPartition(
                tp,
                p.fetch_offset,
                limits.partition_max_bytes,
                p.current_leader_epoch,
                p.log_start_offset,
            )
            for tp, p in partitions.items()
        ]
        me = self.follower

        async def go(leader: SimBroker) -> FetchResult:
            return await leader.serve_fetch(
                me.broker_id,
                me.broker_epoch,
                wanted,
                max_wait_ms=limits.max_wait_ms,
                min_bytes=limits.min_bytes,
                max_bytes=limits.max_bytes,
            )

        result: FetchResult = await self._call(go)
        return {
            tp: FetchedPartition(
                ErrorCode(r.error_code), r.high_watermark, r.log_start_offset, bytes(r.records)
            )
            for tp, r in result.items()
        }

    async def end_offsets_for_epochs(
        self, partitions: Mapping[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, EpochAnswer]:
        me = self.follower.broker_id

        async def go(leader: SimBroker) -> dict[TopicPartition, EpochAnswer]:
            out: dict[TopicPartition, EpochAnswer] = {}
            for tp, (current, epoch) in partitions.items():
                err, e, end = leader.replica_manager.last_offset_for_leader_epoch(
                    tp,
                    current_leader_epoch=current,
                    leader_epoch=epoch,
                    replica_id=me,
                    known_partition=True,
                )
                out[tp] = EpochAnswer(err, e, end)
            return out

        answers: dict[TopicPartition, EpochAnswer] = await self._call(go)
        return answers

    async def log_offsets(self, tp: TopicPartition, current_leader_epoch: int) -> LogOffsets:
        async def go(leader: SimBroker) -> LogOffsets:
            part = leader.replica_manager.get_partition(tp)
            if part is None:
                return LogOffsets(ErrorCode.not_leader_or_follower)
            try:
                part.require_leader(current_leader_epoch)
            except PartitionError as e:
                return LogOffsets(e.error_code)
            return LogOffsets(ErrorCode.none, part.log.log_start_offset, part.log.log_end_offset)

        offsets: LogOffsets = await self._call(go)
        return offsets

    async def close(self) -> None:
        pass


__all__ = ["CONTROLLER_ID", "NodeConfig", "SimBroker", "SimLeaderEndpoint"]
