"""The leader-epoch bookkeeping of a coordinator that serves the partitions of its internal
topic it leads: a partition is loading (its log being replayed) or loaded, each at the leader
epoch it was elected at."""

from __future__ import annotations

from collections.abc import Callable, Mapping

__all__ = ["begin_load"]


def begin_load(
    loaded: Mapping[int, int],
    loading: dict[int, int],
    partition: int,
    epoch: int,
    unload: Callable[[int], None],
) -> bool:
    """This broker leads `partition` from leader epoch `epoch`: what it held of the partition
    is dropped (`unload`) and the partition marked loading at `epoch`. False, and nothing
    changes, when it is already loading or loaded at that epoch."""
    if loaded.get(partition) == epoch or loading.get(partition) == epoch:
        return False
    unload(partition)
    loading[partition] = epoch
    return True
