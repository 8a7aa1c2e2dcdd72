"""Where a follower truncates its log (KIP-101, KIP-279, Kafka 3.9's AbstractFetcherThread).

Pure decisions; the fetcher applies them to the log. A follower asks the leader
(OffsetForLeaderEpoch) for the end offset of the follower's latest epoch; the leader answers
with the largest epoch it knows that is <= the requested one and where that epoch ends on the
leader. The follower then keeps only the prefix both logs agree on:

* same epoch on both sides → truncate to min(leader end offset, follower end offset of that
  epoch), done (KIP-101);
* the leader answers an older epoch the follower also has, but the follower's range for that
  epoch differs → truncate to min(both end offsets) and ask again with the follower's now
  older latest epoch (KIP-279: iterate until the epochs match);
* the follower does not know the leader's epoch → truncate to the leader's end offset, done;
* the leader knows nothing for the epoch (UNDEFINED end offset) → fall back to the high
  watermark.

The same rules serve Fetch's `diverging_epoch` (KIP-320), which carries the same pair.
"""

from __future__ import annotations

from dataclasses import dataclass

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """The leader's answer for one partition: epoch <= the requested one and its end."""

    leader_epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TruncationState:
    """Truncate to `offset`; `completed` False means ask the leader again afterwards."""

    offset: int
    completed: bool


def truncation_point(
    leader: EpochEndOffset,
    *,
    follower_end_offset_for: tuple[int, int] | None,
    follower_log_end_offset: int,
    follower_high_watermark: int,
) -> TruncationState:
    """Kafka's `getOffsetTruncationState`.

    `follower_end_offset_for` is the follower's own (epoch, end offset) for the largest epoch
    <= `leader.leader_epoch` (its `end_offset_for_epoch`), or None when it has none.
    """
    if leader.end_offset == UNDEFINED_EPOCH_OFFSET:
        # The leader has no entry for the requested epoch (e.g. an old message format):
        # only the high watermark is known to be safe.
        return TruncationState(min(follower_high_watermark, follower_log_end_offset), True)
    if leader.leader_epoch == UNDEFINED_EPOCH:
        return TruncationState(min(leader.end_offset, follower_log_end_offset), True)
    if follower_end_offset_for is None:
        # The follower did not track this epoch; the leader's data below its end offset for
        # an epoch older than ours is what we replicate from.
        return TruncationState(min(leader.end_offset, follower_log_end_offset), True)
    f_epoch, f_end = follower_end_offset_for
    if f_epoch == leader.leader_epoch:
        return TruncationState(min(leader.end_offset, f_end, follower_log_end_offset), True)
    # KIP-279: the follower's epoch differs; drop what cannot be shared and ask again.
    return TruncationState(min(f_end, leader.end_offset, follower_log_end_offset), False)


@dataclass(frozen=True, slots=True)
class OutOfRangeAction:
    """What a follower does on OFFSET_OUT_OF_RANGE (Kafka's `fetchOffsetAndTruncate`).

    `truncate_fully` restarts the log empty at `fetch_offset`; otherwise the log is truncated
    to `fetch_offset` when it ends after it, and fetching resumes there.
    """

    fetch_offset: int
    truncate_fully: bool


def out_of_range_action(
    *, follower_log_end_offset: int, leader_log_end_offset: int, leader_log_start_offset: int
) -> OutOfRangeAction:
    if leader_log_end_offset < follower_log_end_offset:
        # The follower has more than the leader (e.g. after an unclean election).
        return OutOfRangeAction(leader_log_end_offset, truncate_fully=False)
    if leader_log_start_offset > follower_log_end_offset:
        # The leader deleted what the follower still lacks: start again at its log start.
        return OutOfRangeAction(leader_log_start_offset, truncate_fully=True)
    return OutOfRangeAction(follower_log_end_offset, truncate_fully=False)
