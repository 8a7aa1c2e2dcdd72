"""What the partition and replica state machines share (Kafka's ZooKeeper-mode controller).

`ControllerStates` holds the current state of each partition or replica (absent means the
non-existent state), checks transitions against a table of valid previous states, logs the
invalid ones (state-change log, ERROR) and skips them, as Kafka does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

from wherry.common.state_enum import StateEnum
from wherry.controller.context import ControllerContext
from wherry.runtime.state_change_log import controller_prefix, state_change_logger

__all__ = ["ControllerStates"]

K = TypeVar("K", bound=Hashable)
S = TypeVar("S", bound=StateEnum)


class ControllerStates(Generic[K, S]):
    """The states of the partitions (or replicas) ``K`` of one controller.

    ``valid_previous`` maps each state to the states it may be entered from; ``describe``
    names a key in log lines ("partition t-0").
    """

    def __init__(
        self,
        controller_id: int,
        *,
        absent: S,
        valid_previous: Mapping[S, frozenset[S]],
        describe: Callable[[K], str],
    ) -> None:
        self.controller_id = controller_id
        self._states: dict[K, S] = {}
        self._absent = absent
        self._valid_previous = valid_previous
        self._describe = describe

    def state(self, key: K) -> S:
        return self._states.get(key, self._absent)

    def clear(self) -> None:
        self._states.clear()

    def forget(self, keys: Iterable[K]) -> None:
        """Drop keys whose topic vanished from the store (no transition)."""
        for key in keys:
            self._states.pop(key, None)

    def valid(self, ctx: ControllerContext, keys: Iterable[K], target: S) -> list[K]:
        """The keys that may move to `target`; the others are logged and skipped."""
        out: list[K] = []
        for key in dict.fromkeys(keys):
            current = self.state(key)
            if current in self._valid_previous[target]:
                out.append(key)
            else:
                state_change_logger.error(
                    "%s Invalid transition of %s from %s to %s (valid previous states: %s)",
                    controller_prefix(self.controller_id, ctx.epoch),
                    self._describe(key),
                    current,
                    target,
                    sorted(str(s) for s in self._valid_previous[target]),
                )
        return out

    def _record(self, key: K, target: S) -> None:
        if target is self._absent:
            self._states.pop(key, None)
        else:
            self._states[key] = target
