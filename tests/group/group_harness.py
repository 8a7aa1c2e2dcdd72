"""An in-memory `OffsetsStorage` and a driver for the pure group coordinator (manual clock)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.group.config import GroupCoordinatorConfig
from wherry.group.coordinator import GroupCoordinator, MemberIdentity
from wherry.group.group import OffsetAndMetadata, OffsetCommitter
from wherry.group.member import JoinGroupResult, SyncGroupResult
from wherry.group.records import encode_subscription
from wherry.group.state import GroupState
from wherry.group.storage import AppendDone, ProducerIdAndEpoch, Record
from wherry.protocol.records import build_batch, build_control_batch

T0 = 1_700_000_000_000
R = TypeVar("R")


class MemoryOffsetsLog:
    """Our storage interface kept in memory: one list of v2 batches per partition.

    `hold = True` parks appends until `release()` (an acks=all write still in flight);
    `fail_with` answers every append with that error instead of storing it.
    """

    def __init__(self) -> None:
        self.batches: dict[int, list[bytes]] = {}
        self.next_offset: dict[int, int] = {}
        self.hold = False
        self.held: list[tuple[int, Sequence[Record], AppendDone, ProducerIdAndEpoch | None]] = []
        self.fail_with: ErrorCode | None = None
        self.appends = 0

    def append(self, partition: int, records: Sequence[Record], done: AppendDone) -> None:
        self._append(partition, records, done, None)

    def append_transactional(
        self, partition: int, txn: ProducerIdAndEpoch, records: Sequence[Record], done: AppendDone
    ) -> None:
        self._append(partition, records, done, txn)

    def _append(
        self,
        partition: int,
        records: Sequence[Record],
        done: AppendDone,
        txn: ProducerIdAndEpoch | None,
    ) -> None:
        self.appends += 1
        if self.hold:
            self.held.append((partition, list(records), done, txn))
            return
        self._write(partition, records, done, txn)

    def _write(
        self,
        partition: int,
        records: Sequence[Record],
        done: AppendDone,
        txn: ProducerIdAndEpoch | None,
    ) -> None:
        if self.fail_with is not None:
            done(self.fail_with, -1)
            return
        base = self.next_offset.get(partition, 0)
        if txn is None:
            batch = build_batch(list(records), base_offset=base, timestamp_ms=T0)
        else:
            batch = build_batch(
                list(records),
                base_offset=base,
                timestamp_ms=T0,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                base_sequence=0,
                is_transactional=True,
            )
        self.batches.setdefault(partition, []).append(batch)
        self.next_offset[partition] = base + len(records)
        done(ErrorCode.none, base)

    def write_marker(self, partition: int, producer_id: int, *, commit: bool) -> None:
        """Append a COMMIT/ABORT marker of the producer (as WriteTxnMarkers would)."""
        base = self.next_offset.get(partition, 0)
        self.batches.setdefault(partition, []).append(
            build_control_batch(
                commit=commit,
                producer_id=producer_id,
                producer_epoch=0,
                coordinator_epoch=0,
                base_offset=base,
                timestamp_ms=T0,
            )
        )
        self.next_offset[partition] = base + 1

    def release(self) -> None:
        held, self.held = self.held, []
        for partition, records, done, txn in held:
            self._write(partition, records, done, txn)

    def records(self, partition: int = 0) -> list[tuple[bytes | None, bytes | None]]:
        from wherry.protocol.records import iter_records

        out: list[tuple[bytes | None, bytes | None]] = []
        for b in self.batches.get(partition, []):
            out.extend((r.key, r.value) for r in iter_records(b))
        return out


@dataclass
class Call:
    """Collects what a callback-style API answered."""

    results: list[object] = field(default_factory=list)

    def __call__(self, r: object) -> None:
        self.results.append(r)

    @property
    def done(self) -> bool:
        return bool(self.results)

    def only(self, kind: type[R]) -> R:
        """The one answer, which must be a `kind`."""
        assert len(self.results) == 1, self.results
        r = self.results[0]
        assert isinstance(r, kind)
        return r

    @property
    def join(self) -> JoinGroupResult:
        return self.only(JoinGroupResult)

    @property
    def sync(self) -> SyncGroupResult:
        return self.only(SyncGroupResult)

    @property
    def commit(self) -> dict[TopicPartition, ErrorCode]:
        return self.only(dict)


def commit_one(
    coord: GroupCoordinator, now: int, member: str, epoch: int, offset: int, version: int = 9
) -> ErrorCode:
    """OffsetCommit of t-0 by `member` at `epoch` (its member epoch or generation)."""
    call = Call()
    tp = TopicPartition("t", 0)
    coord.handle_commit_offsets(
        OffsetCommitter("g", member, None, epoch), {tp: OffsetAndMetadata(offset, -1, "", now)},
        call, now, api_version=version,
    )
    return call.commit[tp]


def sub(*topics: str) -> bytes:
    return encode_subscription(list(topics))


SUB_T = sub("t")


class Harness:
    def __init__(
        self,
        *,
        initial_delay_ms: int = 0,
        partitions: int = 1,
        loaded: bool = True,
        **cfg: int,
    ) -> None:
        self.now = T0
        self.log = MemoryOffsetsLog()
        self.config = GroupCoordinatorConfig(
            group_initial_rebalance_delay_ms=initial_delay_ms,
            offsets_topic_num_partitions=partitions,
            **cfg,
        )
        self.coord = GroupCoordinator(0, self.config, self.log, now_ms=self.now)
        self.coord.startup()
        if loaded:
            for p in range(partitions):
                self.coord.load_partition(p, [], now_ms=self.now)

    def advance(self, ms: int) -> None:
        self.now += ms
        self.coord.advance_clock(self.now)

    def join(
        self,
        group: str,
        member_id: str = "",
        *,
        instance_id: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = (("range", SUB_T),),
        protocol_type: str = "consumer",
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        require_known: bool = False,
        skip_assignment: bool = False,
        client_id: str = "client",
    ) -> Call:
        call = Call()
        self.coord.handle_join_group(
            group,
            member_id,
            instance_id,
            require_known_member_id=require_known,
            support_skipping_assignment=skip_assignment,
            client_id=client_id,
            client_host="/127.0.0.1",
            rebalance_timeout_ms=rebalance_ms,
            session_timeout_ms=session_ms,
            protocol_type=protocol_type,
            protocols=list(protocols),
            callback=call,
            now_ms=self.now,
        )
        return call

    def join_new(self, group: str, **kw: object) -> Call:
        """KIP-394 dance: first JoinGroup gets MEMBER_ID_REQUIRED, the second joins."""
        first = self.join(group, require_known=True, **kw)  # type: ignore[arg-type]
        assert first.join.error == ErrorCode.member_id_required
        return self.join(group, first.join.member_id, require_known=True, **kw)  # type: ignore[arg-type]

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        instance_id: str | None = None,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
    ) -> Call:
        call = Call()
        self.coord.handle_sync_group(
            group,
            generation,
            member_id,
            protocol_type,
            protocol_name,
            instance_id,
            assignments or {},
            call,
            self.now,
        )
        return call

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> ErrorCode:
        return self.coord.handle_heartbeat(group, member_id, instance_id, generation, self.now)

    def leave(self, group: str, *members: MemberIdentity) -> list[ErrorCode]:
        r = self.coord.handle_leave_group(group, list(members), self.now)
        assert r.error == ErrorCode.none, r
        return [m.error for m in r.members]

    def commit(
        self,
        group: str,
        offsets: dict[TopicPartition, int | tuple[int, str]],
        *,
        member_id: str = "",
        generation: int = -1,
        instance_id: str | None = None,
    ) -> Call:
        call = Call()
        oms = {}
        for tp, v in offsets.items():
            off, meta = v if isinstance(v, tuple) else (v, "")
            oms[tp] = OffsetAndMetadata(off, -1, meta, self.now)
        self.coord.handle_commit_offsets(
            OffsetCommitter(group, member_id, instance_id, generation), oms, call, self.now
        )
        return call

    def fetch(self, group: str, *tps: TopicPartition) -> dict[TopicPartition, int]:
        err, parts = self.coord.handle_fetch_offsets(group, False, list(tps) if tps else None)
        assert err == ErrorCode.none, err
        return {tp: p.offset for tp, p in parts.items()}

    def stable_group(self, group: str, n: int, **kw: object) -> list[str]:
        """n dynamic members joined and synced; returns their member ids (leader first)."""
        calls = [self.join_new(group, **kw) for _ in range(n)]
        # Members that completed an earlier generation rejoin until one join completes for all.
        for _ in range(n + 2):
            if all(c.done for c in calls):
                break
            g = self.coord.group(group)
            assert g is not None and g.is_(GroupState.PREPARING_REBALANCE)
            for i, c in enumerate(calls):
                if c.done and not g.get(c.join.member_id).is_awaiting_join:
                    calls[i] = self.join(group, c.join.member_id, **kw)  # type: ignore[arg-type]
        results = [c.join for c in calls]
        assert all(r.error == ErrorCode.none for r in results), results
        gen = results[0].generation_id
        assert all(r.generation_id == gen for r in results)
        leader = results[0].leader_id
        ids = [r.member_id for r in results]
        assignment = {mid: f"assign-{mid}".encode() for mid in ids}
        syncs = {mid: self.sync(group, mid, gen, assignment if mid == leader else None)
                 for mid in [leader] + [i for i in ids if i != leader]}
        for mid, s in syncs.items():
            assert s.sync.error == ErrorCode.none
            assert s.sync.assignment == assignment[mid]
        return [leader] + [i for i in ids if i != leader]
