"""A simulated broker process: the real LogManager (files in its own directory),
ReplicaManager, purgatories, ReplicaFetcherManager and AlterPartitionManager, wired the way
`server/broker.py` wires them, with the network replaced by `SimNetwork` calls.

`crash()` ends the process at once: its tasks are cancelled and its file descriptors closed
without flushing or writing anything (the page cache survives, so the files keep every byte
written); for a power loss the world then cuts what was never fsynced (`disk.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.log import Log
from wherry.log.manager import LogManager
from wherry.protocol.interbroker import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaPartition,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wherry.protocol.interbroker_codec import InterbrokerRequestBody, InterbrokerResponseBody
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.purgatory.timing_wheel import Timer
from wherry.replication.alter_partition import AlterPartitionManager
from wherry.replication.fetcher import (
    EpochAnswer,
    FetchedPartition,
    FetcherConfig,
    FetchPosition,
    LeaderAddress,
    LeaderEndpoint,
    LogOffsets,
    ReplicaFetcherManager,
)
from wherry.replication.partition import PartitionError
from wherry.replication.replica_manager import FetchPartition, FetchResult, ReplicaManager
from wherry.server.controller_requests import (
    ControllerFence,
    PartitionAction,
    leader_and_isr_error_response,
    leader_and_isr_verdict,
    request_topic_id,
    stop_replica_error,
    stop_replica_error_response,
)
from wherry.server.handlers.offset_for_leader_epoch import epoch_end_offset
from wherry.server.metadata_cache import MetadataCache, StaleControllerEpoch
from wherry.sim.controller import ControllerMessage, UpdateLiveBrokers
from wherry.sim.network import CONTROLLER_ID, SimNetwork

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class NodeConfig:
    log_config: LogConfig
    fetcher: FetcherConfig
    replica_lag_time_max_ms: int
    request_timeout_ms: int
    hw_checkpoint_interval_ms: int = 200
    recovery_checkpoint_interval_ms: int = 300


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
        self.fence = ControllerFence(broker_epoch=broker_epoch)
        self.known_live: frozenset[int] = frozenset()
        # The real controller's UpdateMetadata lands here (live brokers, controller id).
        self.cache = MetadataCache(broker_id)
        self._send_to_controller = send_to_controller
        self._node_for = node_for
        self._tasks: list[asyncio.Task[Any]] = []
        self.up = False
        self._purgatory_wakeup = asyncio.Event()

    @property
    def broker_epoch(self) -> int:
        return self.fence.broker_epoch

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.config
        self.log_manager = LogManager([self.data_dir], cfg.log_config, self.now_ms)
        self.log_manager.startup()
        now = self.now_ms()
        self.produce_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory(
            "Produce", Timer(start_ms=now)
        )
        self.fetch_purgatory: DelayedOperationPurgatory = DelayedOperationPurgatory(
            "Fetch", Timer(start_ms=now)
        )
        self.alter_partition_manager = AlterPartitionManager(
            self.broker_id, lambda: self.fence.broker_epoch
        )
        self.replica_manager = ReplicaManager(
            self.broker_id,
            self.log_manager,
            lambda _topic: cfg.log_config,
            self.produce_purgatory,
            self.fetch_purgatory,
            self.now_ms,
            replica_lag_time_max_ms=cfg.replica_lag_time_max_ms,
            alter_partition_manager=self.alter_partition_manager,
            is_broker_alive=lambda b: b in self.known_live,
            broker_epoch=lambda: self.fence.broker_epoch,
        )
        self.replica_fetchers = ReplicaFetcherManager(
            self.broker_id,
            log_for=self._follower_log,
            endpoint_factory=lambda a: SimLeaderEndpoint(self, a.broker_id),
            monotonic_ms=self.now_ms,
            config=cfg.fetcher,
        )
        self.replica_manager.on_leadership_change = self._update_fetchers
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._purgatory_ticker()),
            loop.create_task(
                self.alter_partition_manager.run(self._send_alter_partition, self.now_ms)
            ),
            loop.create_task(
                self._every(
                    max(1, cfg.replica_lag_time_max_ms // 2), self.replica_manager.maybe_shrink_isr
                )
            ),
            loop.create_task(
                self._every(
                    cfg.hw_checkpoint_interval_ms, self.replica_manager.checkpoint_high_watermarks
                )
            ),
            loop.create_task(
                self._every(
                    cfg.recovery_checkpoint_interval_ms,
                    self.log_manager.checkpoint_recovery_points,
                )
            ),
        ]
        self.up = True

    def crash(self) -> list[Path]:
        """Kill the process: nothing more runs, nothing is flushed or checkpointed. Returns
        the segment files, for a power loss to cut (`disk.DurableFiles`)."""
        self.up = False
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        for _, fetcher in self.replica_fetchers.fetchers.values():
            task = fetcher._task  # the fetcher loop, stopped without its shutdown path
            if task is not None:
                task.cancel()
        self.replica_fetchers.fetchers.clear()
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

    async def _every(self, period_ms: int, fn: Callable[[], Any]) -> None:
        while True:
            await asyncio.sleep(period_ms / 1000)
            fn()

    async def _purgatory_ticker(self) -> None:
        purgatories = (self.produce_purgatory, self.fetch_purgatory)
        while True:
            now = self.now_ms()
            for p in purgatories:
                p.advance_clock(now)
            waits = [n - now for p in purgatories if (n := p.next_expiration_ms()) is not None]
            timeout = max(0.001, min(waits) / 1000) if waits else 1.0
            self._purgatory_wakeup.clear()
            try:
                async with asyncio.timeout(min(timeout, 1.0)):
                    await self._purgatory_wakeup.wait()
            except TimeoutError:
                pass

    def wake_purgatories(self) -> None:
        self._purgatory_wakeup.set()

    async def _send_alter_partition(self, body: Mapping[str, Any]) -> Any:
        return await self._send_to_controller(self.broker_id, body)

    # --- followers (as Broker._update_fetchers) ------------------------------------------------
    def _follower_log(self, tp: TopicPartition) -> Log | None:
        part = self.replica_manager.get_partition(tp)
        if part is None or part.is_leader or part.log.closed:
            return None
        return part.log

    def _update_fetchers(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        if not self.up:
            return
        remove = [tp for tp, _ in became_leader]
        add: dict[TopicPartition, tuple[LeaderAddress, int]] = {}
        for tp in lost:
            part = self.replica_manager.get_partition(tp)
            if part is None or part.is_leader or part.leader_id < 0:
                remove.append(tp)
                continue
            add[tp] = (LeaderAddress(part.leader_id, "sim", part.leader_id), part.leader_epoch)
        self.replica_fetchers.remove_partitions(remove)
        if add:
            self.replica_fetchers.add_partitions(add)

    # --- controller requests (as Broker.handle_leader_and_isr) ---------------------------------
    async def handle_controller_message(self, msg: ControllerMessage) -> int:
        if isinstance(msg, UpdateLiveBrokers):
            err = self.fence.admit(msg.controller_epoch, msg.broker_epoch)
            if err is ErrorCode.none:
                self.known_live = msg.live
            return int(err)
        return self.handle_leader_and_isr(msg)

    def handle_leader_and_isr(self, req: LeaderAndIsrRequest) -> int:
        return self.leader_and_isr(req).error_code

    def leader_and_isr(self, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        """As `Broker.handle_leader_and_isr`: fence, judge each partition, apply."""
        err = self.fence.admit(req.controller_epoch, req.broker_epoch)
        if err is not ErrorCode.none:
            return leader_and_isr_error_response(req, err)
        errors: dict[tuple[str, int], int] = {}
        to_apply: list[LeaderAndIsrPartitionState] = []
        for st in req.partition_states:
            part = self.replica_manager.get_partition(
                TopicPartition(st.topic_name, st.partition_index)
            )
            tid = request_topic_id(req, st.topic_name)
            verdict = leader_and_isr_verdict(
                self.broker_id,
                st,
                None if part is None else part.leader_epoch,
                tid,
                None if part is None else part.topic_id,
            )
            errors[(st.topic_name, st.partition_index)] = int(verdict.error)
            if verdict.action is PartitionAction.APPLY:
                to_apply.append(st)
            elif verdict.action is PartitionAction.ADOPT_TOPIC_ID and part is not None:
                part.topic_id = tid
        resp = self.replica_manager.become_leader_or_follower(
            dataclasses.replace(req, partition_states=tuple(to_apply)), self.now_ms()
        )
        self.wake_purgatories()
        if resp.error_code:
            return leader_and_isr_error_response(req, ErrorCode(resp.error_code))
        for e in resp.partition_errors:
            errors[(e.topic_name, e.partition_index)] = e.error_code
        return LeaderAndIsrResponse(
            int(ErrorCode.none),
            tuple(LeaderAndIsrPartitionError(t, p, code) for (t, p), code in errors.items()),
        )

    def update_metadata(self, req: UpdateMetadataRequest) -> UpdateMetadataResponse:
        """As `Broker.handle_update_metadata`: the live set decides ISR eligibility (R5)."""
        err = self.fence.admit(req.controller_epoch, req.broker_epoch)
        if err is not ErrorCode.none:
            return UpdateMetadataResponse(int(err))
        try:
            self.cache.update(req)
        except StaleControllerEpoch:
            return UpdateMetadataResponse(int(ErrorCode.stale_controller_epoch))
        self.known_live = frozenset(b.broker_id for b in req.live_brokers)
        return UpdateMetadataResponse(int(ErrorCode.none))

    def stop_replica(self, req: StopReplicaRequest) -> StopReplicaResponse:
        """As `Broker.handle_stop_replica` (run inline: no executor under the simulation)."""
        err = self.fence.admit(req.controller_epoch, req.broker_epoch)
        if err is not ErrorCode.none:
            return stop_replica_error_response(err)
        errors: dict[tuple[str, int], int] = {}
        to_stop: list[StopReplicaPartition] = []
        for sp in req.partitions:
            part = self.replica_manager.get_partition(
                TopicPartition(sp.topic_name, sp.partition_index)
            )
            code = stop_replica_error(sp, None if part is None else part.leader_epoch)
            errors[(sp.topic_name, sp.partition_index)] = int(code)
            if code == ErrorCode.none:
                to_stop.append(sp)
        resp = self.replica_manager.stop_replicas(
            dataclasses.replace(req, partitions=tuple(to_stop))
        )
        if resp.error_code:
            return stop_replica_error_response(ErrorCode(resp.error_code))
        for e in resp.partition_errors:
            errors[(e.topic_name, e.partition_index)] = e.error_code
        return StopReplicaResponse(
            int(ErrorCode.none),
            tuple(LeaderAndIsrPartitionError(t, p, code) for (t, p), code in errors.items()),
        )

    def handle_interbroker(self, body: InterbrokerRequestBody) -> InterbrokerResponseBody:
        """A request from the real controller (decoded off the simulated wire)."""
        if isinstance(body, LeaderAndIsrRequest):
            return self.leader_and_isr(body)
        if isinstance(body, UpdateMetadataRequest):
            return self.update_metadata(body)
        return self.stop_replica(body)

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
        fut: asyncio.Future[FetchResult] = asyncio.get_running_loop().create_future()

        def respond(r: FetchResult) -> None:
            if not fut.done():
                fut.set_result(r)

        self.replica_manager.fetch_messages(
            replica_id=replica_id,
            replica_epoch=replica_epoch,
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            partitions=partitions,
            respond=respond,
        )
        if not fut.done():
            self.wake_purgatories()
        return await fut

    async def serve_produce(
        self, tp: TopicPartition, batch: bytes, *, timeout_ms: int
    ) -> tuple[ErrorCode, int]:
        """acks=all produce of one batch: (error, base offset)."""
        fut: asyncio.Future[tuple[ErrorCode, int]] = asyncio.get_running_loop().create_future()

        def respond(result: Mapping[TopicPartition, Any]) -> None:
            st = result[tp]
            if not fut.done():
                fut.set_result((ErrorCode(st.error_code), st.base_offset))

        self.replica_manager.append_records(
            timeout_ms=timeout_ms,
            required_acks=-1,
            entries={tp: batch},
            respond=respond,
            now_ms=self.now_ms(),
        )
        if not fut.done():
            self.wake_purgatories()
        return await fut


class SimLeaderEndpoint(LeaderEndpoint):
    """`LeaderEndpoint` over the simulated network: the leader's own fetch path and its
    OffsetForLeaderEpoch answer (`epoch_end_offset`, the handler's pure core)."""

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
        *,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        partition_max_bytes: int,
    ) -> dict[TopicPartition, FetchedPartition]:
        wanted = [
            FetchPartition(
                tp, p.fetch_offset, partition_max_bytes, p.current_leader_epoch, p.log_start_offset
            )
            for tp, p in partitions.items()
        ]
        me = self.follower

        async def go(leader: SimBroker) -> FetchResult:
            return await leader.serve_fetch(
                me.broker_id,
                me.broker_epoch,
                wanted,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
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
                err, e, end = epoch_end_offset(
                    leader.replica_manager.get_partition(tp),
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
