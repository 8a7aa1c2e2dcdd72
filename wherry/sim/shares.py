"""`python -m wherry.sim --shares`: seeded share-group schedules (KIP-932) on the real pure
share-partition state machine and share coordinator store.

Each seed runs one share-partition of a log of records (with control batches among them)
for a group of members that fetch (acquire), acknowledge (accept / release / reject / renew,
some of them too late, after their lock expired), crash (their locks expire), while the
partition's leader fails over (the new leader loads what the share coordinator holds, as
ReadShareGroupState answers; the old one, a zombie, tries to write once more and must be
fenced), the share coordinator fails over (its store is rebuilt from the `__share_group_state`
records it appended, encoded and decoded as on disk) and writes to it fail now and then (the
acknowledgement is then answered with an error). Invariants, checked at every step and at the
end:

* no record is held by two members at once;
* a record whose acceptance was answered OK is never delivered again, across every failover;
* no delivery count exceeds the delivery limit;
* after healing (every member gone, one last member accepting everything), every record is
  accepted, rejected, or archived at the delivery limit: none is lost.

Membership runs too (`share.group.ShareGroups`): members heartbeat, join and leave, each
change written to a simulated `__consumer_offsets` as the broker writes it (the share-group
records, some writes failing), and the group coordinator fails over (the new one replays the
records through the group coordinator's loader). Checked: after every reload, every member
goes on heartbeating with the epoch it was last answered (no UNKNOWN_MEMBER_ID, no fencing),
and a member whose leave was answered is gone. A member's connection drops now and then
(its share session closes): everything it held is available again at once, not after its
locks. A zombie leader of a deleted group (DeleteShareGroupState's marker at the next state
epoch) is fenced with FENCED_STATE_EPOCH.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from wherry.group.loader import read_partition
from wherry.protocol.records import build_batch
from wherry.share.group import ShareGroups, TopicInfo
from wherry.share.partition import (
    AckBatch,
    AckType,
    FetchedBatch,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)
from wherry.share.state import (
    ShareKey,
    ShareState,
    ShareStateStore,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)

__all__ = ["ShareSimResult", "run_share_seed"]

KEY = ShareKey("sim-group", __import__("uuid").UUID(int=7), 0)
TOPICS = {"sim-topic": TopicInfo(KEY.topic_id, 1)}
SESSION_MS = 10**12  # member sessions never expire here: expiry is not what is checked


@dataclass
class ShareSimResult:
    seed: int
    ok: bool = True
    violation: str | None = None
    deliveries: int = 0
    accepted: int = 0
    failovers: int = 0
    group_reloads: int = 0
    connection_drops: int = 0
    steps: int = 0
    log: list[str] = field(default_factory=list)


class _Violation(Exception):
    pass


class _Sim:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        rng = self.rng
        self.cfg = SharePartitionConfig(
            record_lock_duration_ms=rng.choice([200, 500, 1_000]),
            delivery_count_limit=rng.choice([2, 3, 5]),
            max_record_locks=rng.choice([20, 50, 200]),
        )
        # the log: batches of 1-5 records, a control batch now and then
        self.batches: list[FetchedBatch] = []
        off = 0
        for _ in range(rng.randint(10, 60)):
            n = rng.randint(1, 5)
            skip = rng.random() < 0.1
            self.batches.append(FetchedBatch(off, off + (0 if skip else n - 1), skip))
            off += 1 if skip else n
        self.end = off
        self.records = {o for b in self.batches if not b.skip
                        for o in range(b.first_offset, b.last_offset + 1)}
        self.now = 0
        self.leader_epoch = 1
        self.store = ShareStateStore()
        self.state_log: list[tuple[bytes, bytes | None]] = []
        self.sp = SharePartition(0, self.cfg)
        self._write(self.sp, self.leader_epoch)  # the initial start, as the leader writes it
        self.members = [f"m{i}" for i in range(rng.randint(2, 5))]
        self.held: dict[int, tuple[str, int]] = {}  # offset -> (member, lock deadline)
        self.accepted: set[int] = set()
        self.rejected: set[int] = set()
        self.deliveries: dict[int, int] = {}
        self.zombie: tuple[SharePartition, int] | None = None
        self.failovers = 0
        self.delivered = 0
        self.lines: list[str] = []
        # membership: the coordinator's groups, the offsets log it wrote (one batch a write),
        # what each member was last answered (its epoch; absent: not a member)
        self.groups = ShareGroups()
        self.offsets_log: list[bytes] = []
        self.epochs: dict[str, int] = {}
        self.leaving: set[str] = set()
        self.left: set[str] = set()  # their leave was answered (until they join again)
        self.group_reloads = 0
        self.drops = 0

    # --- the share coordinator --------------------------------------------------------------
    def _write(self, sp: SharePartition, leader_epoch: int) -> ErrorCode:
        state = ShareState(sp.state_epoch, leader_epoch, sp.start_offset,
                           tuple(sp.state_batches()))
        err = self.store.check_write(KEY, state)
        if err != ErrorCode.none:
            return err
        self.state_log.append((encode_key(KEY), encode_value(state)))
        self.store.apply(KEY, 0, state)
        return ErrorCode.none

    def coordinator_failover(self) -> None:
        self.store = ShareStateStore()
        records = [(k, v) for k, v in self.state_log]
        self.store.load(0, records)
        assert all(decode_key(k) == KEY for k, _ in records[-1:])
        self.state_log = records[-1:]  # what the log cleaner keeps of a compacted topic
        self.lines.append(f"{self.now}: share coordinator failover ({len(records)} records)")

    def leader_failover(self) -> None:
        self.zombie = (self.sp, self.leader_epoch)
        self.leader_epoch += 1
        fenced = self.store.fence_read(KEY, self.leader_epoch)
        if fenced is not None:  # the read records the new leader epoch first
            self.state_log.append((encode_key(KEY), encode_value(fenced)))
            self.store.apply(KEY, 0, fenced)
        err, st = self.store.read(KEY, self.leader_epoch)
        if err != ErrorCode.none or st is None:
            raise _Violation(f"the new leader cannot read the state: {err}")
        assert decode_value(encode_value(st)) == st
        self.sp = SharePartition.from_state(st.start_offset, st.batches, self.cfg,
                                            state_epoch=st.state_epoch)
        # what members held is gone with the old leader: redelivered later (not a violation)
        self.held.clear()
        self.failovers += 1
        self.lines.append(f"{self.now}: leader failover to epoch {self.leader_epoch}, "
                          f"SPSO {self.sp.start_offset}")

    # --- membership (the group coordinator) -------------------------------------------------
    def heartbeat(self, member: str, *, leave: bool = False) -> None:
        leave = leave or member in self.leaving  # a leave answered with an error is re-sent
        known = self.epochs.get(member)
        epoch = -1 if leave else (known if known is not None else 0)
        if leave and known is None and member not in self.leaving:
            return
        r = self.groups.heartbeat(KEY.group_id, member, epoch,
                                  ["sim-topic"] if epoch == 0 else None, None, TOPICS,
                                  self.now, session_timeout_ms=SESSION_MS)
        if r.error_code != ErrorCode.none:
            raise _Violation(f"{member}'s heartbeat at epoch {epoch} answered {r.error_code.name}")
        if not leave:
            self.left.discard(member)  # joining (even if unanswered): in the group again
        group = self.groups.groups[KEY.group_id]
        records = group.changes()
        if records and self.rng.random() < 0.1:  # the append failed: answered with an error
            group.unwritten()
            if leave:
                self.leaving.add(member)
            return
        if records:
            self.offsets_log.append(build_batch(records))
        if leave:
            self.epochs.pop(member, None)
            self.leaving.discard(member)
            self.left.add(member)
        else:
            self.left.discard(member)
            self.epochs[member] = r.member_epoch

    def group_coordinator_failover(self) -> None:
        snap = read_partition(self.offsets_log)
        if snap.skipped:
            raise _Violation(f"{snap.skipped} share-group records did not replay")
        self.groups = ShareGroups()
        self.groups.load(snap.share_groups.groups, lambda g: True, self.now, SESSION_MS)
        self.group_reloads += 1
        loaded = self.groups.groups.get(KEY.group_id)
        members = set() if loaded is None else set(loaded.members)
        gone = members & self.left
        if gone:
            raise _Violation(f"members {sorted(gone)} left (answered) but were reloaded")
        for member, epoch in sorted(self.epochs.items()):
            if member in self.leaving:
                continue
            r = self.groups.heartbeat(KEY.group_id, member, epoch, None, None, TOPICS,
                                      self.now, session_timeout_ms=SESSION_MS)
            if r.error_code != ErrorCode.none or r.member_epoch < epoch:
                raise _Violation(f"after a group coordinator failover {member} at epoch "
                                 f"{epoch} got {r.error_code.name} epoch {r.member_epoch}")
            self.epochs[member] = r.member_epoch
        g = self.groups.groups.get(KEY.group_id)
        if g is not None:
            records = g.changes()
            if records:
                self.offsets_log.append(build_batch(records))
        self.lines.append(f"{self.now}: group coordinator failover "
                          f"({len(self.offsets_log)} batches, members {sorted(members)})")

    def connection_drop(self, member: str) -> None:
        """The member's connection to the leader closed: its share session with it."""
        mine = [o for o, (m, _) in self.held.items() if m == member]
        self.sp.release_member(member)
        for o in mine:
            del self.held[o]
            if o >= self.sp.start_offset and self.sp.state_of(o) not in (
                RecordState.AVAILABLE, RecordState.ARCHIVED
            ):  # (below the SPSO: archived at the delivery limit, then passed)
                raise _Violation(f"record {o} of {member}'s dropped session is "
                                 f"{self.sp.state_of(o).name}, not available at once")
        if self.sp.acquired_by(member):
            raise _Violation(f"{member} still holds records after its connection dropped")
        self.drops += 1
        self.lines.append(f"{self.now}: {member}'s connection dropped ({len(mine)} released)")

    def deleted_group_zombie(self) -> None:
        """DeleteShareGroupState on a copy of the store: the leader's next write is fenced
        by the marker's state epoch, and a new incarnation writes at that epoch."""
        store = ShareStateStore()
        store.load(0, self.state_log[-1:] if self.state_log else [])
        marker = store.deletion_marker(KEY)
        if marker is None:
            return
        store.apply(KEY, 0, marker)
        state = ShareState(self.sp.state_epoch, self.leader_epoch, self.sp.start_offset,
                           tuple(self.sp.state_batches()))
        if store.check_write(KEY, state) != ErrorCode.fenced_state_epoch:
            raise _Violation("a leader of a deleted share group was not fenced")
        fresh = ShareState(marker.state_epoch, self.leader_epoch, 0, ())
        if store.check_write(KEY, fresh) != ErrorCode.none:
            raise _Violation("the deleted group's next incarnation cannot write")

    # --- members ----------------------------------------------------------------------------
    def fetch(self, member: str) -> None:
        start = self.sp.fetch_offset()
        read = [b for b in self.batches if b.last_offset >= start][: self.rng.randint(1, 8)]
        got = self.sp.acquire(member, read, self.rng.randint(1, 30), self.now)
        for r in got:
            for o in range(r.first_offset, r.last_offset + 1):
                if o not in self.records:
                    raise _Violation(f"offset {o} (no record there) delivered")
                if o in self.accepted:
                    raise _Violation(f"accepted record {o} delivered again to {member}")
                holder = self.held.get(o)
                if holder is not None and holder[1] > self.now:
                    raise _Violation(f"record {o} delivered to {member} while {holder[0]} "
                                     "holds it")
                if r.delivery_count > self.cfg.delivery_count_limit:
                    raise _Violation(f"record {o} delivered {r.delivery_count} times")
                self.held[o] = (member, self.now + self.cfg.record_lock_duration_ms)
                self.deliveries[o] = r.delivery_count
                self.delivered += 1

    def acknowledge(self, member: str, *, all_accept: bool = False) -> None:
        mine = sorted(o for o, (m, _) in self.held.items() if m == member)
        if not mine:
            return
        rng = self.rng
        chosen = mine if all_accept else rng.sample(mine, rng.randint(1, len(mine)))
        types = {
            o: int(AckType.ACCEPT) if all_accept else rng.choice(
                [int(AckType.ACCEPT)] * 4 + [int(AckType.RELEASE), int(AckType.REJECT),
                                             int(AckType.RENEW)])
            for o in chosen
        }
        batches = [AckBatch(o, o, (t,)) for o, t in sorted(types.items())]
        err = self.sp.acknowledge(member, batches, self.now)
        if err != ErrorCode.none:
            # only allowed when a lock expired (the record went back) before the ack
            late = [o for o in chosen if self.held[o][1] <= self.now]
            if not late:
                raise _Violation(f"{member}'s acknowledgement of held records refused: {err}")
            for o in chosen:
                self.held.pop(o, None)
            return
        write_ok = rng.random() > 0.1 and self._write(self.sp, self.leader_epoch) == 0
        for o, t in types.items():
            if t == AckType.RENEW:
                self.held[o] = (member, self.now + self.cfg.record_lock_duration_ms)
                continue
            self.held.pop(o, None)
            if write_ok and t == AckType.ACCEPT:
                self.accepted.add(o)
            if write_ok and t == AckType.REJECT:
                self.rejected.add(o)

    def step(self) -> None:
        rng = self.rng
        self.now += rng.randint(1, 150)
        if self.sp.expire_locks(self.now) and rng.random() < 0.5:
            self._write(self.sp, self.leader_epoch)
        for o in [o for o, (_, d) in self.held.items() if d <= self.now]:
            del self.held[o]
        x = rng.random()
        member = rng.choice(self.members)
        if x < 0.45:
            self.fetch(member)
        elif x < 0.8:
            self.acknowledge(member)
        elif x < 0.86:
            self.leader_failover()
        elif x < 0.9:
            self.coordinator_failover()
        elif x < 0.93 and self.zombie is not None:
            old, epoch = self.zombie
            if self._write(old, epoch) != ErrorCode.fenced_leader_epoch:
                raise _Violation("a deposed leader's write was not fenced")
            self.zombie = None
        elif x < 0.95:
            self.lines.append(f"{self.now}: member {member} crashed")
            # its locks simply run out
        elif x < 0.97:
            self.heartbeat(member, leave=rng.random() < 0.2)
        elif x < 0.98:
            self.group_coordinator_failover()
        elif x < 0.99:
            self.connection_drop(member)
        else:
            self.deleted_group_zombie()
        if not rng.random() < 0.02:
            return

    def heal(self) -> None:
        last = "final-member"
        for _ in range(10_000):
            self.now += self.cfg.record_lock_duration_ms + 1
            self.sp.expire_locks(self.now)
            self.held.clear()
            self.fetch(last)
            self.acknowledge(last, all_accept=True)
            if self.sp.start_offset >= self.end:
                break
        if self.sp.start_offset < self.end:
            raise _Violation(f"SPSO {self.sp.start_offset} never reached the end {self.end}")
        for o in sorted(self.records):
            if self.deliveries.get(o, 0) == 0:
                raise _Violation(f"record {o} lost: never delivered")


def run_share_seed(seed: int, steps: int = 400) -> ShareSimResult:
    sim = _Sim(seed)
    res = ShareSimResult(seed)
    try:
        for i in range(steps):
            res.steps = i + 1
            sim.step()
        sim.heal()
    except _Violation as e:
        res.ok = False
        res.violation = str(e)
    res.deliveries = sim.delivered
    res.accepted = len(sim.accepted)
    res.failovers = sim.failovers
    res.group_reloads = sim.group_reloads
    res.connection_drops = sim.drops
    res.log = sim.lines
    return res
