"""The safety properties the simulation checks.

Checked after every event-loop step (`check_step`, cheap, from in-memory state):
  * at most one leader per (partition, leader epoch), over the whole run;
  * on each leader, within its epoch, the high watermark never goes down (per process: a
    broker restarted during a controller failover can lead the same epoch again and starts
    from its checkpointed high watermark, as in Kafka's ZooKeeper mode);
  * on each leader, the high watermark <= the log end offset of every member of the maximal
    ISR (members whose process is up; a member that is down is read when it restarts).
Checked every `data_check_interval_ms` of simulated time and at the end (`check_data`, reads
the logs):
  * every batch acknowledged with acks=all is in the log of the current leader (the broker
    leading at the controller's current leader epoch) at its offset, unchanged (same CRC);
  * no offset below any high watermark ever changes: every up replica's records below its
    own high watermark agree with every record ever seen below a high watermark, and with
    everything a consumer was ever shown (so committed prefixes are identical across
    replicas);
and, after the faults stop and the cluster heals (`check_final`), every acknowledged record is
below the leader's high watermark (liveness: nothing acknowledged is stuck), and every partition
reassignment once started has completed or been cancelled (`check_reassignments_settled`, with
the requests' possible outcomes from `ReassignmentLedger`): nothing is being added or removed in
the store or by the controller, the replica list is the outcome of a request that may have
taken effect, its replicas host the partition and no other broker does.

Replicas removed by a reassignment no longer count for the HW rules: the rules read only the
members of a leader's maximal ISR that have an open log, a removed replica leaves the ISR
before it is stopped and its log deleted, and a member at a newer leader epoch than its leader
is skipped -- the leader is then stale (e.g. a removed leader whose StopReplica was lost to a
controller failover), while the member may have been removed and added back with an empty log.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from wherry.common.topic_partition import TopicPartition
from wherry.log.log import Log
from wherry.protocol.records import (
    CONTROL_ABORT,
    BatchHeader,
    iter_batches,
    iter_records,
    parse_control_record,
)


class InvariantViolation(AssertionError):
    pass


def _batches_below(plog: Log, end: int) -> Iterator[tuple[bytes, int, BatchHeader]]:
    """(data, position, header) of every batch wholly below `end` in a log, in offset order."""
    offset = plog.log_start_offset
    while offset < end:
        # A read stops at its segment's end (as Kafka's does): continue from the next batch.
        data = plog.read(offset, max_bytes=1 << 30, max_offset=end, min_one_message=True)
        nxt = offset
        for pos, header in iter_batches(data):
            if header.last_offset < end:
                yield data, pos, header
            nxt = max(nxt, header.last_offset + 1)
        if nxt == offset:
            break
        offset = nxt


def headers_below(plog: Log, end: int) -> list[BatchHeader]:
    """The header of every batch wholly below `end` in a log, in offset order."""
    return [header for _data, _pos, header in _batches_below(plog, end)]


def batches_below(plog: Log, end: int) -> dict[int, int]:
    """base offset -> CRC of every batch wholly below `end` in a log. A batch is identified
    by its CRC: it covers the records, producer fields and timestamps, and survives the
    leader's patching of base offset and partition leader epoch, so a produced batch and its
    copies on every replica have the same one."""
    return {h.base_offset: h.crc for h in headers_below(plog, end)}


@dataclass(frozen=True, slots=True)
class KeptRecord:
    """A record of a compacted topic as a replica holds it."""

    key: bytes | None
    digest: int  # of the key, value and headers: the record's identity
    plain: bool  # neither transactional nor control: compaction keeps the latest of its key


def records_below(plog: Log, end: int) -> dict[int, KeptRecord]:
    """offset -> every record below `end` in a compacted log. The cleaner rebuilds batches
    (new CRCs) and drops superseded records, but a record it keeps is the one written at that
    offset, and the latest record of each key stays."""
    out: dict[int, KeptRecord] = {}
    for data, pos, header in _batches_below(plog, end):
        plain = not (header.is_transactional or header.is_control)
        for r in iter_records(data, pos):
            out[r.offset] = KeptRecord(r.key, hash((r.key, r.value, r.headers)), plain)
    return out


def decode_batches(data: bytes) -> dict[int, tuple[int, int]]:
    """base offset -> (last offset, CRC) of the batches in fetched bytes."""
    return {h.base_offset: (h.last_offset, h.crc) for _pos, h in iter_batches(data)}


@dataclass(frozen=True, slots=True)
class LeaderView:
    """What the checker reads of one broker's leader partition."""

    broker_id: int
    incarnation: int  # the process: a restarted broker starts its high watermark over
    tp: TopicPartition
    leader_epoch: int
    high_watermark: int
    maximal_isr: frozenset[int]
    # The topic's id (as an int: hashed cheaply every step): a topic deleted and created again
    # under its name starts its leader epochs over.
    topic_id: int | None = None


@dataclass(slots=True)
class History:
    leader_of_epoch: dict[tuple[TopicPartition, int | None, int], int] = field(
        default_factory=dict
    )
    leader_hw: dict[tuple[int, int, TopicPartition, int | None, int], int] = field(
        default_factory=dict
    )
    acked: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    committed: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    # Compacted topics: key -> the offset of the latest plain record seen below a HW.
    latest_of_key: dict[TopicPartition, dict[bytes | None, int]] = field(default_factory=dict)
    consumed: int = 0
    acks: int = 0
    # Self-test: deliberately check a wrong rule, so a test can prove the checker can fail.
    broken_rule: str | None = None

    # --- recording ---------------------------------------------------------------------------
    def record_ack(self, tp: TopicPartition, offset: int, value: int) -> None:
        """`value`: the CRC of the acknowledged batch."""
        prev = self.acked.setdefault(tp, {}).get(offset)
        if prev is not None and prev != value:
            raise InvariantViolation(
                f"{tp}: offset {offset} acknowledged twice for different batches "
                f"(crc {prev:#x}, then {value:#x})"
            )
        self.acked[tp][offset] = value
        self.acks += 1

    def record_committed(self, tp: TopicPartition, values: Mapping[int, int], who: str) -> None:
        """Batches (base offset -> CRC) seen below a high watermark (by a consumer or on a
        replica)."""
        seen = self.committed.setdefault(tp, {})
        for offset, value in values.items():
            prev = seen.setdefault(offset, value)
            if prev != value:
                raise InvariantViolation(
                    f"{tp}: the batch at offset {offset}, below a high watermark, changed: crc "
                    f"was {prev:#x}, now {value:#x} ({who})"
                )

    def record_compacted(
        self,
        tp: TopicPartition,
        log_start: int,
        high_watermark: int,
        records: Mapping[int, KeptRecord],
        who: str,
    ) -> None:
        """A compacted log's records below its high watermark: a record at an offset is always
        the one first seen there, and the latest plain record seen of each key (between this
        replica's log start and its high watermark) is still there, unless a newer record of
        that key is. Transactional records are not tracked as a key's latest: the cleaner
        drops those of aborted transactions."""
        self.record_committed(tp, {o: r.digest for o, r in records.items()}, who)
        latest = self.latest_of_key.setdefault(tp, {})
        newest_here: dict[bytes | None, int] = {}
        for offset, r in records.items():
            newest_here[r.key] = max(offset, newest_here.get(r.key, -1))
        for key, offset in latest.items():
            if offset < log_start or offset >= high_watermark or offset in records:
                continue
            if newest_here.get(key, -1) <= offset:
                raise InvariantViolation(
                    f"{tp}: the latest record of key {key!r}, at offset {offset}, is gone and "
                    f"no newer one of its key is there ({who})"
                )
        for offset, r in records.items():
            if r.plain and offset > latest.get(r.key, -1):
                latest[r.key] = offset

    # --- checks ------------------------------------------------------------------------------
    def check_leaders(
        self,
        leaders: Iterable[LeaderView],
        log_end_offset: Mapping[tuple[int, TopicPartition], int],
        replica_epoch: Mapping[tuple[int, TopicPartition], int] | None = None,
    ) -> None:
        """`replica_epoch`: the leader epoch each replica is at. A maximal-ISR member already
        at a newer leader epoch than its leader's does not bind it: that leader is stale (a
        removed replica whose StopReplica was lost, say), and the member may since have been
        removed, deleted and added again with an empty log."""
        for v in leaders:
            key = (v.tp, v.topic_id, v.leader_epoch)
            other = self.leader_of_epoch.setdefault(key, v.broker_id)
            if other != v.broker_id:
                raise InvariantViolation(
                    f"{v.tp}: two leaders in leader epoch {v.leader_epoch}: "
                    f"brokers {other} and {v.broker_id}"
                )
            hkey = (v.broker_id, v.incarnation, v.tp, v.topic_id, v.leader_epoch)
            last = self.leader_hw.get(hkey, -1)
            if v.high_watermark < last:
                raise InvariantViolation(
                    f"{v.tp}: high watermark on leader {v.broker_id} went down within leader "
                    f"epoch {v.leader_epoch}: {last} -> {v.high_watermark}"
                )
            self.leader_hw[hkey] = v.high_watermark
            for member in sorted(v.maximal_isr):
                leo = log_end_offset.get((member, v.tp))
                if leo is None:
                    continue
                if replica_epoch is not None and (
                    replica_epoch.get((member, v.tp), -1) > v.leader_epoch
                ):
                    continue
                bound = leo if self.broken_rule != "hw-below-leo" else leo - 1
                if v.high_watermark > bound:
                    raise InvariantViolation(
                        f"{v.tp}: leader {v.broker_id} (epoch {v.leader_epoch}) has high "
                        f"watermark {v.high_watermark} above the log end offset {leo} of "
                        f"maximal-ISR member {member}"
                    )

    def check_acked_on_leader(self, tp: TopicPartition, leader: int, plog: Log) -> None:
        acked = self.acked.get(tp)
        if not acked:
            return
        have = batches_below(plog, plog.log_end_offset)
        for offset, value in sorted(acked.items()):
            got = have.get(offset)
            if got != value:
                raise InvariantViolation(
                    f"{tp}: acknowledged batch (crc {value:#x}) at offset {offset} is "
                    f"{'missing' if got is None else f'replaced (crc {got:#x})'} on leader "
                    f"{leader} (log end offset {plog.log_end_offset})"
                )

    def check_acked_committed(self, tp: TopicPartition, leader: int, hw: int) -> None:
        for offset, value in sorted(self.acked.get(tp, {}).items()):
            if offset >= hw:
                raise InvariantViolation(
                    f"{tp}: after healing, acknowledged batch (crc {value:#x}) at offset "
                    f"{offset} is not below the high watermark {hw} of leader {leader}"
                )


# --- reassignments -----------------------------------------------------------------------------
Outcome = tuple[tuple[int, ...], bool]
"""A replica list a request may leave and whether only its set counts (a cancel's: the
original replicas come back in the controller's order, target first)."""


@dataclass(slots=True)
class LedgerEntry:
    outcomes: tuple[Outcome, ...]
    sent_ms: int  # when it was asked (for whoever debugs a seed)
    answer: str = "pending"  # "ok", "error" (took no effect) or "pending" (unknown)


@dataclass(slots=True)
class ReassignmentLedger:
    """What the simulation asked of reassignments, per partition, in the order it asked.

    A request answered OK took effect; one answered with an error did not; one whose answer
    was lost (timeout, controller gone, NOT_CONTROLLER after a half-done event) may have. A
    controller processes its requests in order and a stale controller's writes are fenced, so
    the final replica list is the outcome of the last request answered OK or of one asked
    after it whose answer is unknown (or, with no OK, the initial list)."""

    initial: dict[str, dict[int, tuple[int, ...]]] = field(default_factory=dict)
    requests: dict[tuple[str, int], list[LedgerEntry]] = field(default_factory=dict)

    def start(self, topic: str, partition: int, target: Sequence[int], now_ms: int) -> LedgerEntry:
        return self._add(topic, partition, ((tuple(target), False),), now_ms)

    def cancel(
        self,
        topic: str,
        partition: int,
        replicas: Sequence[int],
        adding: Collection[int],
        removing: Collection[int],
        now_ms: int,
    ) -> LedgerEntry:
        """A cancel sent while the store showed `replicas` (with `adding` / `removing`): it
        restores the original replicas of the reassignment it finds -- the one shown, or, if
        that one completed meanwhile and another started, its target."""
        original = tuple(r for r in replicas if r not in adding)
        target = tuple(r for r in replicas if r not in removing)
        return self._add(topic, partition, ((original, True), (target, True)), now_ms)

    def _add(
        self, topic: str, partition: int, outcomes: tuple[Outcome, ...], now_ms: int
    ) -> LedgerEntry:
        r = LedgerEntry(outcomes, now_ms)
        self.requests.setdefault((topic, partition), []).append(r)
        return r

    def possible(self, topic: str, partition: int) -> list[Outcome]:
        reqs = self.requests.get((topic, partition), [])
        last_ok = max((i for i, r in enumerate(reqs) if r.answer == "ok"), default=None)
        out: list[Outcome] = []
        if last_ok is None:
            out.append((self.initial[topic][partition], False))
        for r in reqs[last_ok or 0 :]:
            if r.answer != "error":
                out.extend(r.outcomes)
        return out


def _matches(replicas: Sequence[int], outcome: Outcome) -> bool:
    want, as_set = outcome
    return set(replicas) == set(want) if as_set else tuple(replicas) == want


def check_reassignments_settled(
    topic: str,
    stored: Mapping[int, Sequence[int]],
    adding: Mapping[int, Sequence[int]],
    removing: Mapping[int, Sequence[int]],
    ongoing: Collection[tuple[str, int]] | None,
    online: Mapping[int, Collection[int]],
    on_disk: Mapping[int, Collection[int]],
    ledger: ReassignmentLedger,
) -> None:
    """After the cluster has been healthy for a while: no reassignment is left half-done.

    `stored`, `adding`, `removing`: the topic's node; `ongoing`: what the acting controller
    lists (None: no controller acts, itself a failure); `online`: partition -> the brokers
    with a replica of it open (their replica manager's partition); `on_disk`: partition -> the
    brokers with its log in their log dirs.

    A removed replica is told to stop and delete the partition by StopReplica, which the
    controller sends only to live brokers and holds only in memory: a controller that dies (or
    resigns) before it is delivered, or a broker that is away, loses it. The next controller's
    FULL LeaderAndIsr at its failover, or the one a starting broker gets, drops such a stray
    (Kafka 3.9's ZooKeeper mode kept it until a restart, and its log for good). So after
    healing no broker outside a partition's replicas hosts it or keeps its log."""
    for p in sorted(stored):
        tp = f"{topic}-{p}"
        if adding.get(p) or removing.get(p):
            raise InvariantViolation(
                f"{tp}: after healing, the store still shows a reassignment: replicas "
                f"{list(stored[p])}, adding {list(adding.get(p, []))}, removing "
                f"{list(removing.get(p, []))}"
            )
        possible = ledger.possible(topic, p)
        if not any(_matches(stored[p], o) for o in possible):
            raise InvariantViolation(
                f"{tp}: after healing, its replicas {list(stored[p])} are neither a requested "
                f"target nor the original of a cancelled reassignment: possible "
                f"{[list(r) for r, _ in possible]}"
            )
        replicas = set(stored[p])
        missing = sorted(replicas - set(online.get(p, ())))
        if missing:
            raise InvariantViolation(
                f"{tp}: after healing, replicas {missing} of {list(stored[p])} do not host it"
            )
        for place, holds, undone in (
            (online, "still host it", "stopped"),
            (on_disk, "still have its log", "deleted"),
        ):
            left = sorted(set(place.get(p, ())) - replicas)
            if left:
                raise InvariantViolation(
                    f"{tp}: after healing, brokers {left} outside its replicas "
                    f"{list(stored[p])} {holds} (removed replicas not {undone})"
                )
    if ongoing is None:
        raise InvariantViolation("after healing, no controller answers")
    if ongoing:
        raise InvariantViolation(
            f"after healing, the controller still lists reassignments in progress: "
            f"{sorted(ongoing)}"
        )


# --- transactions --------------------------------------------------------------------------------
def read_committed_values(
    data: bytes, aborted: Sequence[tuple[int, int]]
) -> list[tuple[int, bytes | None]]:
    """(offset, value) of the records a read_committed consumer delivers from one fetched
    range, given the fetch's aborted transactions (producer id, first offset): Kafka's
    consumer (CompletedFetch): a transactional batch of a producer whose aborted transaction
    began at or before the batch's last offset is skipped until that producer's ABORT marker;
    control batches are never delivered."""
    pending = sorted(aborted, key=lambda t: t[1])
    aborted_pids: set[int] = set()
    out: list[tuple[int, bytes | None]] = []
    for pos, h in iter_batches(data):
        if h.has_producer_id:
            while pending and pending[0][1] <= h.last_offset:
                aborted_pids.add(pending.pop(0)[0])
            if h.is_control:
                for rec in iter_records(data, pos):
                    if parse_control_record(rec)[0] == CONTROL_ABORT:
                        aborted_pids.discard(h.producer_id)
            elif h.is_transactional and h.producer_id in aborted_pids:
                continue
        if h.is_control:
            continue
        out.extend((rec.offset, rec.value) for rec in iter_records(data, pos))
    return out


def transaction_outcomes(plog: Log, end: int) -> tuple[set[int], set[int]]:
    """(offsets of the aborted transactions' records, offsets of the records of transactions
    still open) below `end` in a log: a transactional batch belongs to its producer's
    transaction until that producer's next marker, COMMIT or ABORT."""
    pending: dict[int, list[int]] = {}  # producer id -> offsets of its open transaction
    aborted: set[int] = set()
    for data, pos, h in _batches_below(plog, end):
        if h.is_control:
            offsets = pending.pop(h.producer_id, [])
            if any(parse_control_record(rec)[0] == CONTROL_ABORT
                   for rec in iter_records(data, pos)):
                aborted.update(offsets)
        elif h.is_transactional:
            pending.setdefault(h.producer_id, []).extend(range(h.base_offset, h.last_offset + 1))
    return aborted, {o for offsets in pending.values() for o in offsets}


@dataclass(slots=True)
class LedgerTxn:
    """One transaction of a simulated transactional producer, as the producer knows it."""

    transactional_id: str
    number: int
    producer_id: int
    producer_epoch: int
    started_ms: int
    sent: dict[TopicPartition, list[bytes]] = field(default_factory=dict)  # maybe written
    acked: dict[TopicPartition, list[bytes]] = field(default_factory=dict)  # acks=all
    commit_sent: bool = False  # EndTxn(commit) was sent (its outcome may be unknown)
    abort_sent: bool = False
    # What EndTxn answered in the end: "committed", "aborted" (NONE to a commit or an abort)
    # or None (no answer, an error, or never sent: it was aborted unless a commit was sent).
    answer: str | None = None

    def describe(self) -> str:
        state = self.answer or (
            "commit sent, outcome unknown"
            if self.commit_sent
            else "abort sent"
            if self.abort_sent
            else "no EndTxn (open, or aborted by the coordinator)"
        )
        return (
            f"transaction {self.number} of {self.transactional_id} (producer id "
            f"{self.producer_id}, epoch {self.producer_epoch}, begun at {self.started_ms} ms; "
            f"{state})"
        )


@dataclass(slots=True)
class TxnLedger:
    """What the transactional producers were told (like `History.acked` for plain batches):
    every transaction, the records it sent and had acknowledged, and how EndTxn answered.

    The rules (`check_read_committed`, `check_committed_complete`): a read_committed reader
    sees a transaction's records only if a commit was asked for it (never those of an aborted
    transaction, nor of one still open or aborted by the coordinator's timeout), each record
    at most once; after healing it sees every acknowledged record of every transaction whose
    EndTxn(commit) was answered NONE, and of one whose commit went unanswered, all or none."""

    txns: list[LedgerTxn] = field(default_factory=list)
    by_value: dict[bytes, LedgerTxn] = field(default_factory=dict)
    checked_reads: int = 0

    def begin(self, tid: str, number: int, pid: int, epoch: int, now_ms: int) -> LedgerTxn:
        t = LedgerTxn(tid, number, pid, epoch, now_ms)
        self.txns.append(t)
        return t

    def sent(self, txn: LedgerTxn, tp: TopicPartition, value: bytes) -> None:
        txn.sent.setdefault(tp, []).append(value)
        self.by_value[value] = txn

    @staticmethod
    def acked(txn: LedgerTxn, tp: TopicPartition, value: bytes) -> None:
        txn.acked.setdefault(tp, []).append(value)

    def committed(self) -> int:
        return sum(1 for t in self.txns if t.answer == "committed")

    def check_read_committed(
        self, tp: TopicPartition, values: Sequence[tuple[int, bytes | None]], who: str
    ) -> None:
        """`values`: what a read_committed reader got from the partition, in offset order."""
        self.checked_reads += 1
        seen: dict[bytes, int] = {}
        for offset, value in values:
            if value is None or not value.startswith(TXN_VALUE_PREFIX):
                continue
            txn = self.by_value.get(value)
            if txn is None:
                raise InvariantViolation(
                    f"{tp}: read_committed ({who}) shows {value!r} at offset {offset}, which "
                    "no transactional producer sent"
                )
            if not txn.commit_sent:
                raise InvariantViolation(
                    f"{tp}: read_committed ({who}) shows {value!r} at offset {offset} of "
                    f"{txn.describe()}: data of an aborted or open transaction"
                )
            if tp not in txn.sent or value not in txn.sent[tp]:
                raise InvariantViolation(
                    f"{tp}: read_committed ({who}) shows {value!r} at offset {offset}, sent to "
                    f"another partition by {txn.describe()}"
                )
            if value in seen:
                raise InvariantViolation(
                    f"{tp}: read_committed ({who}) shows {value!r} twice, at offsets "
                    f"{seen[value]} and {offset} ({txn.describe()})"
                )
            seen[value] = offset

    def check_committed_complete(self, visible: Mapping[TopicPartition, Collection[bytes]]) -> None:
        """After healing, `visible`: every partition's read_committed values (all of them)."""
        for txn in self.txns:
            if not txn.commit_sent:
                continue
            acked = [(tp, v) for tp, vs in txn.acked.items() for v in vs]
            missing = [(tp, v) for tp, v in acked if v not in visible.get(tp, ())]
            if txn.answer == "committed" and missing:
                tp, v = missing[0]
                raise InvariantViolation(
                    f"{tp}: after healing, read_committed does not show {v!r} of "
                    f"{txn.describe()} ({len(missing)} of its {len(acked)} records missing)"
                )
            if txn.answer is None and missing and len(missing) < len(acked):
                tp, v = missing[0]
                raise InvariantViolation(
                    f"{tp}: after healing, read_committed shows only part of {txn.describe()}: "
                    f"{v!r} and {len(missing) - 1} more of its {len(acked)} records missing"
                )


TXN_VALUE_PREFIX = b"t:"
