"""The safety properties the simulation checks (issue 6, scope item 7).

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
below the leader's high watermark (liveness: nothing acknowledged is stuck).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from wherry.common.topic_partition import TopicPartition
from wherry.log.log import Log
from wherry.protocol.records import iter_batches


class InvariantViolation(AssertionError):
    pass


def batches_below(plog: Log, end: int) -> dict[int, int]:
    """base offset -> CRC of every batch wholly below `end` in a log. A batch is identified
    by its CRC: it covers the records, producer fields and timestamps, and survives the
    leader's patching of base offset and partition leader epoch, so a produced batch and its
    copies on every replica have the same one."""
    out: dict[int, int] = {}
    offset = plog.log_start_offset
    while offset < end:
        # A read stops at its segment's end (as Kafka's does): continue from the next batch.
        data = plog.read(offset, max_bytes=1 << 30, max_offset=end, min_one_message=True)
        nxt = offset
        for _pos, header in iter_batches(data):
            if header.last_offset < end:
                out[header.base_offset] = header.crc
            nxt = max(nxt, header.last_offset + 1)
        if nxt == offset:
            break
        offset = nxt
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


@dataclass(slots=True)
class History:
    leader_of_epoch: dict[tuple[TopicPartition, int], int] = field(default_factory=dict)
    leader_hw: dict[tuple[int, int, TopicPartition, int], int] = field(default_factory=dict)
    acked: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
    committed: dict[TopicPartition, dict[int, int]] = field(default_factory=dict)
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

    # --- checks ------------------------------------------------------------------------------
    def check_leaders(
        self,
        leaders: Iterable[LeaderView],
        log_end_offset: Mapping[tuple[int, TopicPartition], int],
    ) -> None:
        for v in leaders:
            key = (v.tp, v.leader_epoch)
            other = self.leader_of_epoch.setdefault(key, v.broker_id)
            if other != v.broker_id:
                raise InvariantViolation(
                    f"{v.tp}: two leaders in leader epoch {v.leader_epoch}: "
                    f"brokers {other} and {v.broker_id}"
                )
            hkey = (v.broker_id, v.incarnation, v.tp, v.leader_epoch)
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
