"""The replica node: what one broker does with the controller's requests and its replicas.

Kafka splits this between `KafkaApis` (the controller requests' admission), `ReplicaManager`
(become leader / follower, stop replicas, ISR expiry, HW checkpoints) and the fetcher
managers. Here one class owns it, and both the real broker (`server/broker.py`) and the
simulator (`sim/node.py`) run it; each hands it its own transport and clock:

* `leader_endpoint(address)` makes the `LeaderEndpoint` a follower fetches through (the Kafka
  wire protocol in a broker; the simulated network in the simulator);
* `send_alter_partition(body)` carries AlterPartition to the controller;
* `clock` gives wall-clock and monotonic milliseconds;
* `leader_quota` / `follower_quota` (optional) are the broker's KIP-73 replication quotas,
  handed on to the replica manager (serving followers) and the fetchers;
* `ReplicaNodeConfig.blocking_in_executor` says whether file work (deleting a stopped
  partition's log, writing the HW checkpoint, and the handlers' own through `run_blocking`)
  goes to the loop's executor (a broker) or runs inline (the simulator, which must stay
  deterministic).

Every state change happens on the event loop: the controller's requests are judged and
applied there, and parked produce and fetch requests complete there (a purgatory refuses
calls from other threads). Only file deletion leaves the loop.

Admission is judged here once, by `controller_requests`: the broker and
controller epochs of the whole request (`ControllerFence`, the only holder of the newest
controller epoch), then each partition's leader epoch, topic id and replica list; the replica
manager applies what passed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.log.config import LogConfig
from wherry.log.errors import StorageError
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
from wherry.purgatory.purgatory import DelayedOperationPurgatory
from wherry.purgatory.timing_wheel import Timer
from wherry.replication.alter_partition import AlterPartitionManager, Send
from wherry.replication.controller_requests import (
    EPOCH_DURING_DELETE,
    ControllerFence,
    PartitionAction,
    leader_and_isr_error_response,
    leader_and_isr_verdict,
    request_topic_id,
    stop_replica_error,
    stop_replica_error_response,
    stray_partitions,
)
from wherry.replication.fetch_reads import FetchPartition, FetchResult
from wherry.replication.fetch_session import FetchSession, FetchSessionCache
from wherry.replication.fetcher import (
    EndpointFactory,
    FetcherConfig,
    LeaderAddress,
    ReplicaFetcherManager,
)
from wherry.replication.metadata_cache import MetadataCache, StaleControllerEpoch
from wherry.replication.partition import DEFAULT_REPLICA_LAG_TIME_MAX_MS, Partition
from wherry.replication.quota import ReplicationQuotaManager
from wherry.replication.replica_manager import ProduceResult, ReplicaManager
from wherry.replication.replica_selector import ClientMetadata
from wherry.runtime.clock import Clock
from wherry.runtime.parking import answer_future, answer_of
from wherry.runtime.scheduler import Scheduler
from wherry.runtime.state_change_log import batched_lines, state_change_line
from wherry.runtime.ticker import PurgatoryTicker

log = logging.getLogger(__name__)
state_change_log = logging.getLogger("wherry.state_change")

__all__ = ["ReplicaNode", "ReplicaNodeConfig"]

T = TypeVar("T")

LeadershipListener = Callable[[list[tuple[TopicPartition, int]], list[TopicPartition]], None]
DeletionListener = Callable[[list[TopicPartition]], None]
InterbrokerRequest = LeaderAndIsrRequest | StopReplicaRequest | UpdateMetadataRequest
InterbrokerResponse = LeaderAndIsrResponse | StopReplicaResponse | UpdateMetadataResponse


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaNodeConfig:
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    high_watermark_checkpoint_interval_ms: int = 5_000
    fetcher: FetcherConfig = dataclasses.field(default_factory=FetcherConfig)
    # File work in the loop's default executor (a broker) or inline (the simulator).
    blocking_in_executor: bool = True


class ReplicaNode:
    def __init__(
        self,
        broker_id: int,
        log_manager: LogManager,
        *,
        config: ReplicaNodeConfig,
        clock: Clock,
        topic_config: Callable[[str], LogConfig],
        leader_endpoint: EndpointFactory,
        send_alter_partition: Send,
        load_topic_configs: Callable[[Collection[str]], Awaitable[None]] | None = None,
        fence: ControllerFence | None = None,
        cache: MetadataCache | None = None,
        leader_quota: ReplicationQuotaManager | None = None,
        follower_quota: ReplicationQuotaManager | None = None,
        fetch_sessions: FetchSessionCache | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.config = config
        self.clock = clock
        self.log_manager = log_manager
        self._topic_config = topic_config
        self._send_alter_partition = send_alter_partition
        self._load_topic_configs = load_topic_configs
        self._prefix = f"[Broker id={broker_id}]"
        # Broker epoch (set at registration) and newest controller epoch seen.
        self.fence = fence if fence is not None else ControllerFence()
        # What the controller's UpdateMetadata said: live brokers, partitions, the controller.
        self.cache = cache if cache is not None else MetadataCache(broker_id)
        self.ticker = PurgatoryTicker()
        self.produce_purgatory: DelayedOperationPurgatory[Any] = self._purgatory("Produce")
        self.fetch_purgatory: DelayedOperationPurgatory[Any] = self._purgatory("Fetch")
        # ISR changes go to the controller as AlterPartition, batched.
        self.alter_partition_manager = AlterPartitionManager(
            broker_id, lambda: self.fence.broker_epoch
        )
        self.leadership_listeners: list[LeadershipListener] = []
        self.replica_manager = ReplicaManager(
            broker_id,
            log_manager,
            topic_config,
            self.produce_purgatory,
            self.fetch_purgatory,
            clock.monotonic_ms,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            alter_partition_manager=self.alter_partition_manager,
            is_broker_alive=lambda b: b in self.cache.brokers,  # per follower fetch: O(1)
            broker_epoch=lambda: self.fence.broker_epoch,
            leader_quota=leader_quota,
            # KIP-227 fetch sessions, kept for Fetch requests that come over the wire.
            fetch_sessions=fetch_sessions,
            on_leadership_change=self._on_leadership_change,
        )
        self.fetchers = ReplicaFetcherManager(
            broker_id,
            log_for=self._follower_log,
            endpoint_factory=leader_endpoint,
            monotonic_ms=clock.monotonic_ms,
            config=config.fetcher,
            quota=follower_quota,
            # Consumers reading this follower (KIP-392) wait for its HW to move.
            on_high_watermark=self.replica_manager.follower_high_watermark_moved,
        )
        self.deletion_listeners: list[DeletionListener] = []
        # Leader endpoints from the controller's LeaderAndIsr (live_leaders), newest first.
        self._leader_endpoints: dict[int, LeaderAddress] = {}
        # followers told of a leader whose endpoint was not known then: partition -> leader
        self._unreachable: dict[TopicPartition, int] = {}
        self.scheduler = Scheduler(clock)
        self._tasks: list[asyncio.Task[None]] = []
        self.running = False
        # KIP-112: a log dir gone offline is reported (the broker tells the controller); when
        # every dir has failed the broker must stop (the message says so).
        self.on_log_dir_failure: Callable[[Path], None] | None = None
        self.on_all_log_dirs_failed: Callable[[str], None] | None = None
        self._failed_dirs: set[Path] = set()

    def _purgatory(self, name: str) -> DelayedOperationPurgatory[Any]:
        purgatory: DelayedOperationPurgatory[Any] = DelayedOperationPurgatory(
            name, Timer(start_ms=self.clock.monotonic_ms())
        )
        purgatory.on_earlier_deadline = self.ticker.earlier_deadline
        self.ticker.add(purgatory, self.clock.monotonic_ms)
        return purgatory

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        """Start the background work on the running loop: the purgatory ticker, the
        AlterPartition sender, `isr-expiration` and `highwatermark-checkpoint`."""
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self.ticker.run(), name=f"purgatory-ticker-{self.broker_id}"),
            loop.create_task(
                self.alter_partition_manager.run(
                    self._send_alter_partition, self.clock.monotonic_ms
                ),
                name=f"alter-partition-{self.broker_id}",
            ),
        ]
        failures = self.log_manager.dir_failure
        failures.add_listener(lambda d: loop.call_soon_threadsafe(self.handle_log_dir_failure, d))
        for d in failures.offline_dirs():  # failed before the start (loading, say)
            loop.call_soon(self.handle_log_dir_failure, d)
        cfg = self.config
        self.scheduler.schedule(
            "isr-expiration",
            self.replica_manager.maybe_shrink_isr,
            period_ms=max(1, cfg.replica_lag_time_max_ms // 2),
        )
        self.scheduler.schedule(
            "highwatermark-checkpoint",
            self.replica_manager.checkpoint_high_watermarks,
            period_ms=cfg.high_watermark_checkpoint_interval_ms,
            executor=cfg.blocking_in_executor,
        )
        self.running = True

    async def stop(self) -> None:
        """Stop fetching and proposing, complete what is parked, checkpoint the HWs."""
        if not self.running:
            return
        self.running = False
        await self.fetchers.shutdown()
        await self.scheduler.shutdown()
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.produce_purgatory.shutdown()
        self.fetch_purgatory.shutdown()
        await self.run_blocking(self.replica_manager.checkpoint_high_watermarks)

    def abandon(self) -> None:
        """A killed process: every task ends at once, nothing is completed or written."""
        self.running = False
        for t in self._tasks:
            t.cancel()
        self._tasks = []
        self.scheduler.cancel_all()
        for _, fetcher in self.fetchers.fetchers.values():
            task = fetcher._task  # the fetcher loop, stopped without its shutdown path
            if task is not None:
                task.cancel()
        self.fetchers.fetchers.clear()

    def handle_log_dir_failure(self, dir: Path) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure, on the loop: the dir's partitions stop
        being served and fetched (KAFKA_STORAGE_ERROR from now on), its logs are closed, the
        controller is told (`on_log_dir_failure`), which moves their leadership; with no dir
        left the broker must stop (`on_all_log_dirs_failed`)."""
        if not self.running or dir in self._failed_dirs:
            return
        self._failed_dirs.add(dir)
        gone = self.replica_manager.mark_offline(dir)
        self.fetchers.remove_partitions(gone)
        self.log_manager.handle_log_dir_failure(dir)
        log.warning(
            "%s Stopped serving replicas in dir %s: %s",
            self._prefix,
            dir,
            ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(gone)) or "none",
        )
        if not self.log_manager.live_log_dirs:
            dirs = ", ".join(str(d) for d in self.log_manager.log_dirs)
            if self.on_all_log_dirs_failed is not None:
                self.on_all_log_dirs_failed(
                    f"Shutdown broker because all log dirs in {dirs} have failed"
                )
        elif self.on_log_dir_failure is not None:
            self.on_log_dir_failure(dir)

    async def run_blocking(self, fn: Callable[[], T]) -> T:
        """`fn()`'s blocking file work: on the loop's executor, or inline when the node's
        `blocking_in_executor` is off (the simulator: deterministic, no threads)."""
        if self.config.blocking_in_executor:
            return await asyncio.get_running_loop().run_in_executor(None, fn)
        return fn()

    # --- controller requests -------------------------------------------------------------
    async def handle_interbroker(self, body: InterbrokerRequest) -> InterbrokerResponse:
        if isinstance(body, LeaderAndIsrRequest):
            return await self.handle_leader_and_isr(body)
        if isinstance(body, UpdateMetadataRequest):
            return UpdateMetadataResponse(await self.handle_update_metadata(body))
        return await self.handle_stop_replica(body)

    def _admit(
        self, name: str, controller_id: int, controller_epoch: int, broker_epoch: int
    ) -> ErrorCode:
        err = self.fence.admit(controller_epoch, broker_epoch)
        if err == ErrorCode.stale_broker_epoch:
            state_change_log.info(
                "%s Ignoring %s request from controller %d with broker epoch %d smaller than "
                "the current broker epoch %d",
                self._prefix,
                name,
                controller_id,
                broker_epoch,
                self.fence.broker_epoch,
            )
        elif err == ErrorCode.stale_controller_epoch:
            state_change_log.warning(
                "%s Ignoring %s request from controller %d since its controller epoch %d is "
                "old. Latest known controller epoch is %d",
                self._prefix,
                name,
                controller_id,
                controller_epoch,
                self.fence.controller_epoch,
            )
        return err

    async def handle_leader_and_isr(self, req: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
        err = self._admit("LeaderAndIsr", req.controller_id, req.controller_epoch, req.broker_epoch)
        if err:
            return leader_and_isr_error_response(req, err)
        if req.is_full:
            await self._stop_strays(req)
        if self._load_topic_configs is not None:
            # Topic configs first: no await between judging the partitions and applying them.
            await self._load_topic_configs({s.topic_name for s in req.partition_states})
        if new_logs := self._logs_to_create(req):
            # New partitions' logs are file work (their directories, first segments, the log
            # dirs' fsyncs: 1-4 ms each, a new topic of 50 partitions held the loop 170-220
            # ms): created first, off the loop; applying the states then finds them.
            failed = await self.run_blocking(lambda: self._create_logs(new_logs))
            for tp, error in failed.items():  # as `become_leader_or_follower` does
                log.error("%s %s is offline: %s", self._prefix, tp, error)
                self.replica_manager.offline_partitions.add(tp)
        errors: dict[tuple[str, int], int] = {}
        to_apply: list[LeaderAndIsrPartitionState] = []
        with batched_lines():  # a new controller's resend: one line per unchanged partition
            self._judge_leader_and_isr(req, errors, to_apply)
        for ep in req.live_leaders:
            self._leader_endpoints[ep.broker_id] = LeaderAddress(ep.broker_id, ep.host, ep.port)
        self._fetch_from_reachable_leaders()
        if to_apply:
            offline = self.replica_manager.become_leader_or_follower(
                dataclasses.replace(req, partition_states=tuple(to_apply)), self.clock.now_ms()
            )
            for tp in offline:
                errors[(tp.topic, tp.partition)] = int(ErrorCode.kafka_storage_error)
        return LeaderAndIsrResponse(
            int(ErrorCode.none),
            tuple(LeaderAndIsrPartitionError(t, p, code) for (t, p), code in errors.items()),
        )

    def _logs_to_create(
        self, req: LeaderAndIsrRequest
    ) -> list[tuple[TopicPartition, LogConfig, bool]]:
        """The partitions of `req` this broker will start hosting (neither hosted nor offline
        here, and their verdict is to apply) that have no log yet: each with its topic's
        config and whether the controller says the replica is new."""
        rm = self.replica_manager
        new: list[tuple[TopicPartition, LogConfig, bool]] = []
        for st in req.partition_states:
            tp = TopicPartition(st.topic_name, st.partition_index)
            if (
                rm.get_partition(tp) is None
                and tp not in rm.offline_partitions
                and self.log_manager.get_log(tp) is None
                and leader_and_isr_verdict(
                    self.broker_id, st, None, request_topic_id(req, st.topic_name), None
                ).action
                is PartitionAction.APPLY
            ):
                new.append((tp, self._topic_config(tp.topic), st.is_new))
        return new

    def _create_logs(
        self, logs: list[tuple[TopicPartition, LogConfig, bool]]
    ) -> dict[TopicPartition, StorageError]:
        """Create the logs `_logs_to_create` named: directories, first segments and one fsync
        of each log dir (file work: the log manager is thread-safe). Returns the partitions
        whose log could not be created, with why (a failed log dir)."""
        failed: dict[TopicPartition, StorageError] = {}
        with self.log_manager.batched_dir_syncs():
            for tp, config, is_new in logs:
                try:
                    self.log_manager.get_or_create_log(tp, config, is_new=is_new)
                except StorageError as e:
                    failed[tp] = e
        return failed

    def _judge_leader_and_isr(
        self,
        req: LeaderAndIsrRequest,
        errors: dict[tuple[str, int], int],
        to_apply: list[LeaderAndIsrPartitionState],
    ) -> None:
        """Each partition's verdict (`controller_requests.leader_and_isr_verdict`): its error
        code into `errors`, the states to apply into `to_apply`."""
        offline = self.replica_manager.offline_partitions
        for st in req.partition_states:
            key = (st.topic_name, st.partition_index)
            if TopicPartition(*key) in offline:  # its log dir failed: the controller learns
                errors[key] = int(ErrorCode.kafka_storage_error)  # it is offline here
                self._log_ignored_leader_and_isr(req, st, ErrorCode.kafka_storage_error, None)
                continue
            part = self.replica_manager.get_partition(TopicPartition(*key))
            tid = request_topic_id(req, st.topic_name)
            verdict = leader_and_isr_verdict(
                self.broker_id,
                st,
                None if part is None else part.leader_epoch,
                tid,
                None if part is None else part.topic_id,
            )
            errors[key] = int(verdict.error)
            if verdict.action is PartitionAction.APPLY:
                to_apply.append(st)
            elif verdict.action is PartitionAction.ADOPT_TOPIC_ID and part is not None:
                part.topic_id = tid
            elif verdict.error != ErrorCode.none:
                self._log_ignored_leader_and_isr(req, st, verdict.error, part)

    def _log_ignored_leader_and_isr(
        self,
        req: LeaderAndIsrRequest,
        st: LeaderAndIsrPartitionState,
        error: ErrorCode,
        part: Partition | None,
    ) -> None:
        current = -1 if part is None else part.leader_epoch
        level = logging.WARNING
        if error == ErrorCode.kafka_storage_error:
            reason = "the replica is in an offline log directory"
        elif error == ErrorCode.unknown_topic_or_partition:
            reason = f"itself is not in assigned replica list {list(st.replicas)}"
        elif error == ErrorCode.inconsistent_topic_id:
            reason = (
                f"its topic id {None if part is None else part.topic_id} does not match the "
                f"topic id {req.topic_ids.get(st.topic_name)} received"
            )
        elif st.leader_epoch < current:
            reason = (
                f"its associated leader epoch {st.leader_epoch} is smaller than the current "
                f"leader epoch {current}"
            )
        else:
            reason = f"its associated leader epoch {st.leader_epoch} matches the current one"
            # Kafka logs this case (e.g. a new controller re-sending every partition's state)
            # at info, the others at warning.
            level = logging.INFO
        state_change_line(
            level,
            "%s Ignoring LeaderAndIsr request from controller %d epoch %d for partition %s-%d "
            "as %s (%s)",
            self._prefix,
            req.controller_id,
            req.controller_epoch,
            st.topic_name,
            st.partition_index,
            reason,
            error.name.upper(),
        )

    async def handle_update_metadata(self, req: UpdateMetadataRequest) -> int:
        err = self._admit(
            "UpdateMetadata", req.controller_id, req.controller_epoch, req.broker_epoch
        )
        if err:
            return int(err)
        before = {b.broker_id for b in self.cache.alive_brokers()}
        try:
            self.cache.update(req)
        except StaleControllerEpoch:  # the fence has seen at least the cache's epoch
            return int(ErrorCode.stale_controller_epoch)
        if before - {b.broker_id for b in self.cache.alive_brokers()}:
            self.replica_manager.on_brokers_gone()
        self._fetch_from_reachable_leaders()
        return int(ErrorCode.none)

    def _fetch_from_reachable_leaders(self) -> None:
        """Followers whose leader had no known endpoint when they were told of it start
        fetching once the metadata names one. (The leader can come back at the same leader
        epoch -- the only replica in the ISR, restarted --, and a LeaderAndIsr at that epoch is
        then ignored as not newer.)"""
        if not self._unreachable or not self.running:
            return
        waiting = [
            tp for tp, leader in self._unreachable.items()
            if (part := self.replica_manager.get_partition(tp)) is not None
            and not part.is_leader and part.leader_id == leader
        ]
        self._unreachable.clear()
        if waiting:
            self._update_fetchers([], waiting)

    async def handle_stop_replica(self, req: StopReplicaRequest) -> StopReplicaResponse:
        err = self._admit("StopReplica", req.controller_id, req.controller_epoch, req.broker_epoch)
        if err:
            return stop_replica_error_response(err)
        errors: dict[tuple[str, int], int] = {}
        to_stop: list[StopReplicaPartition] = []
        for sp in req.partitions:
            key = (sp.topic_name, sp.partition_index)
            part = self.replica_manager.get_partition(TopicPartition(*key))
            current = None if part is None else part.leader_epoch
            code = stop_replica_error(sp, current)
            if TopicPartition(*key) in self.replica_manager.offline_partitions:
                code = ErrorCode.kafka_storage_error  # Kafka: HostedPartition.Offline
            errors[key] = int(code)
            if code == ErrorCode.none:
                to_stop.append(sp)
            elif code == ErrorCode.kafka_storage_error:
                continue
            else:
                state_change_log.warning(
                    "%s Ignoring StopReplica request (delete=%s) from controller %d epoch %d "
                    "for partition %s-%d since its associated leader epoch %d is smaller than "
                    "the current leader epoch %s",
                    self._prefix,
                    sp.delete_partition,
                    req.controller_id,
                    req.controller_epoch,
                    sp.topic_name,
                    sp.partition_index,
                    sp.leader_epoch,
                    current,
                )
        await self._stop_partitions(dataclasses.replace(req, partitions=tuple(to_stop)))
        return StopReplicaResponse(
            int(ErrorCode.none),
            tuple(LeaderAndIsrPartitionError(t, p, code) for (t, p), code in errors.items()),
        )

    async def _stop_partitions(self, req: StopReplicaRequest) -> None:
        """Stop the judged partitions of `req`; delete the logs it says to delete."""
        # On the loop: the partitions leave, parked requests on them complete, fetchers stop.
        to_delete = self.replica_manager.stop_replicas(req)
        if to_delete:
            # Off the loop: only the file work (close, rename, checkpoints).
            await self.run_blocking(lambda: self._delete_logs(to_delete))
            for listener in self.deletion_listeners:
                listener(to_delete)

    async def _stop_strays(self, req: LeaderAndIsrRequest) -> None:
        """A FULL LeaderAndIsr's strays (`controller_requests.stray_partitions`) are stopped
        and deleted, as the StopReplica they missed would have done."""
        rm = self.replica_manager
        held: dict[TopicPartition, uuid.UUID | None] = dict.fromkeys(
            self.log_manager.topic_partitions()
        )
        held.update((tp, part.topic_id) for tp, part in rm.partitions.items())
        for tp in rm.offline_partitions:  # in a failed log dir: nothing to stop or delete
            held.pop(tp, None)
        strays = stray_partitions(self.broker_id, req, held)
        if not strays:
            return
        state_change_log.warning(
            "%s Stopping and deleting %d stray partition(s) %s: not this broker's in the full "
            "LeaderAndIsr request of controller %d epoch %d",
            self._prefix,
            len(strays),
            ", ".join(str(tp) for tp in strays),
            req.controller_id,
            req.controller_epoch,
        )
        parts = tuple(
            StopReplicaPartition(tp.topic, tp.partition, EPOCH_DURING_DELETE, True)
            for tp in strays
        )
        await self._stop_partitions(
            StopReplicaRequest(req.controller_id, req.controller_epoch, req.broker_epoch, parts)
        )

    def _delete_logs(self, tps: Iterable[TopicPartition]) -> None:
        self.log_manager.delete_logs(tps)

    # --- followers -------------------------------------------------------------------------
    def _on_leadership_change(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        for listener in self.leadership_listeners:
            listener(became_leader, lost)
        if self.running:
            self._update_fetchers(became_leader, lost)

    def _update_fetchers(
        self, became_leader: list[tuple[TopicPartition, int]], lost: list[TopicPartition]
    ) -> None:
        remove = [tp for tp, _ in became_leader]
        add: dict[TopicPartition, tuple[LeaderAddress, int]] = {}
        for tp in remove:
            self._unreachable.pop(tp, None)
        for tp in lost:
            self._unreachable.pop(tp, None)
            part = self.replica_manager.get_partition(tp)
            if part is None or part.is_leader or part.leader_id < 0:
                remove.append(tp)
                continue
            address = self.leader_address(part.leader_id)
            if address is None:
                log.warning(
                    "%s No endpoint known for leader %d of %s-%d; fetching it once the "
                    "metadata names one",
                    self._prefix,
                    part.leader_id,
                    tp.topic,
                    tp.partition,
                )
                self._unreachable[tp] = part.leader_id
                remove.append(tp)
                continue
            add[tp] = (address, part.leader_epoch)
        self.fetchers.remove_partitions(remove)
        if add:
            self.fetchers.add_partitions(add)

    def leader_address(self, broker_id: int) -> LeaderAddress | None:
        found = self._leader_endpoints.get(broker_id)
        if found is not None:
            return found
        b = self.cache.brokers.get(broker_id)
        return None if b is None else LeaderAddress(b.broker_id, b.host, b.port)

    def controller_address(self) -> tuple[int, str, int] | None:
        """(id, host, port) of the controller as the last UpdateMetadata named it."""
        cid = self.cache.controller_id
        if cid is None:
            return None
        b = self.cache.brokers.get(cid)
        return None if b is None else (cid, b.host, b.port)

    def _follower_log(self, tp: TopicPartition) -> Log | None:
        part = self.replica_manager.get_partition(tp)
        if part is None or part.is_leader or part.log.closed:
            return None
        return part.log

    # --- serving produce and fetch (the leader side) -----------------------------------------
    async def append(
        self,
        entries: Mapping[TopicPartition, bytes | None],
        *,
        required_acks: int,
        timeout_ms: int,
        from_coordinator: bool = False,
    ) -> ProduceResult:
        """Append to led partitions; with acks=all, answer once the ISR has the records.
        `from_coordinator`: transaction markers (WriteTxnMarkers)."""
        return await self.start_append(
            entries,
            required_acks=required_acks,
            timeout_ms=timeout_ms,
            from_coordinator=from_coordinator,
        )

    def start_append(
        self,
        entries: Mapping[TopicPartition, bytes | None],
        *,
        required_acks: int,
        timeout_ms: int,
        from_coordinator: bool = False,
    ) -> asyncio.Future[ProduceResult]:
        """`append`, the records appended when this returns: the future holds the answer
        (done at once unless an acks=all produce waits for the ISR)."""
        return answer_future(
            lambda respond: self.replica_manager.append_records(
                timeout_ms=timeout_ms,
                required_acks=required_acks,
                entries=entries,
                respond=respond,
                now_ms=self.clock.now_ms(),
                from_coordinator=from_coordinator,
            )
        )

    async def fetch(
        self,
        partitions: list[FetchPartition],
        *,
        replica_id: int,
        replica_epoch: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int = 0,
        zero_copy: bool = False,
        session: FetchSession | None = None,
        incremental: bool = False,
        allowed: Callable[[TopicPartition], bool] | None = None,
        client: ClientMetadata | None = None,
    ) -> FetchResult:
        """Read from consumers' or followers' positions; wait up to `max_wait_ms` for
        `min_bytes` (a follower's fetch also moves its ISR state and the HW). `zero_copy`:
        records as `FileRegion`s, for a response sent from the files. `session`,
        `incremental`, `allowed`: a KIP-227 fetch session; `client`: a consumer's Fetch
        v11+ metadata, KIP-392 (see `ReplicaManager.fetch_messages`)."""
        return await answer_of(
            lambda respond: self.replica_manager.fetch_messages(
                replica_id=replica_id,
                replica_epoch=replica_epoch,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
                max_bytes=max_bytes,
                partitions=partitions,
                respond=respond,
                isolation_level=isolation_level,
                zero_copy=zero_copy,
                session=session,
                incremental=incremental,
                allowed=allowed,
                client=client,
            )
        )
