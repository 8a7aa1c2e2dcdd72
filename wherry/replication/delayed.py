"""DelayedProduce and DelayedFetch: parked requests completed by the purgatory."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.purgatory.operation import DelayedOperation


@dataclass(slots=True)
class ProducePartitionStatus:
    required_offset: int  # last offset + 1 of the append: HW must reach it
    error_code: ErrorCode
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    error_message: str | None = None
    acks_pending: bool = True
    # KIP-467: (index in the batch, message) of each record that made the append fail
    record_errors: tuple[tuple[int, str], ...] = ()


class DelayedProduce(DelayedOperation):
    """Waits until the HW covers every appended batch (acks=all), or times out."""

    def __init__(
        self,
        delay_ms: int,
        statuses: Mapping[TopicPartition, ProducePartitionStatus],
        check: Callable[[TopicPartition, ProducePartitionStatus], ErrorCode | None],
        respond: Callable[[Mapping[TopicPartition, ProducePartitionStatus]], None],
    ) -> None:
        super().__init__(delay_ms)
        self.statuses = statuses
        self._check = check
        self._respond = respond

    def try_complete(self) -> bool:
        for tp, st in self.statuses.items():
            if not st.acks_pending:
                continue
            result = self._check(tp, st)
            if result is not None:
                st.acks_pending = False
                st.error_code = result
        if all(not st.acks_pending for st in self.statuses.values()):
            return self.force_complete()
        return False

    def pending_on(self, key: Hashable) -> bool:
        """Still waiting for partition `key`'s high watermark: the produces parked after this
        one on it need a higher one (appends are watched in offset order)."""
        st = self.statuses.get(key)  # type: ignore[call-overload]
        return st is not None and st.acks_pending

    def on_expiration(self) -> None:
        for st in self.statuses.values():
            if st.acks_pending:
                st.acks_pending = False
                st.error_code = ErrorCode.request_timed_out

    def on_complete(self) -> None:
        self._respond(self.statuses)


class DelayedFetch(DelayedOperation):
    """Waits for `min_bytes` of new data across the fetched partitions, or `max_wait_ms`."""

    def __init__(
        self,
        delay_ms: int,
        enough: Callable[[], bool],
        complete: Callable[[], None],
    ) -> None:
        super().__init__(delay_ms)
        self._enough = enough
        self._complete = complete

    def try_complete(self) -> bool:
        if self._enough():
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        pass

    def on_complete(self) -> None:
        self._complete()
