"""AlterPartitionManager: batching, one request in flight, retries (SPEC R6)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.replication.alter_partition import (
    AlterPartitionItem,
    AlterPartitionManager,
    AlterPartitionResult,
)
from wherry.replication.isr import CommittedLeaderAndIsr, IsrProposal

TID = uuid.uuid4()


class _Obj:
    def __init__(self, **kw: object) -> None:
        self.__dict__.update(kw)


def item(p: int, results: list[tuple[int, AlterPartitionResult]]) -> AlterPartitionItem:
    return AlterPartitionItem(
        TopicPartition("t", p), TID, IsrProposal(1, 3, (1, 2), (-1, 7), 4),
        lambda r: results.append((p, r)))


def ok(partitions: list[int], error: int = 0) -> Any:
    return _Obj(error_code=error, topics=(_Obj(topic_id=TID, partitions=tuple(
        _Obj(partition_index=p, error_code=0, leader_id=1, leader_epoch=3, isr=(2, 1),
             leader_recovery_state=0, partition_epoch=5) for p in partitions)),))


def test_batches_queued_changes_one_request_in_flight() -> None:
    res: list[tuple[int, AlterPartitionResult]] = []
    m = AlterPartitionManager(1, lambda: 42)
    assert m.submit(item(0, res)) and m.submit(item(1, res))
    assert not m.submit(item(1, res))  # one queued per partition
    req = m.next_request(0)
    assert req is not None
    body, items = req
    assert body["broker_id"] == 1 and body["broker_epoch"] == 42
    assert [p["partition_index"] for p in body["topics"][0]["partitions"]] == [0, 1]
    assert body["topics"][0]["partitions"][0]["new_isr_with_epochs"][1] == {
        "broker_id": 2, "broker_epoch": 7}
    assert m.submit(item(2, res))
    assert m.next_request(0) is None  # one in flight
    out = m.handle_response(items, ok([0]), 1)
    assert [(it.tp.partition, r) for it, r in out] == [
        (0, CommittedLeaderAndIsr(1, 3, (1, 2), 5)),
        (1, ErrorCode.unknown_server_error),  # missing from the answer
    ]
    nxt = m.next_request(1)
    assert nxt is not None and [it.tp.partition for it in nxt[1]] == [2]


def test_top_level_error_requeues_with_backoff() -> None:
    res: list[tuple[int, AlterPartitionResult]] = []
    m = AlterPartitionManager(1, lambda: 42, retry_backoff_ms=50, retry_backoff_max_ms=120)
    m.submit(item(0, res))
    req = m.next_request(0)
    assert req is not None
    assert m.handle_response(req[1], ok([], error=int(ErrorCode.not_controller)), 10) == []
    assert m.next_request(59) is None and m.next_request(60) is not None
    req2 = m.inflight
    assert req2 is not None
    assert m.handle_response(req2, ConnectionError("down"), 100) == []
    assert m.next_request(199) is None  # backoff doubled
    req3 = m.next_request(200)
    assert req3 is not None
    assert m.handle_response(req3[1], ConnectionError("down"), 200) == []
    assert m.not_before_ms == 320  # capped
    req4 = m.next_request(320)
    assert req4 is not None and req4[1][0].attempts == 4
    out = m.handle_response(req4[1], ok([0]), 330)
    assert out and m.failures == 0


def test_requeue_keeps_newer_proposal() -> None:
    res: list[tuple[int, AlterPartitionResult]] = []
    m = AlterPartitionManager(1, lambda: 42)
    old = item(0, res)
    m.submit(old)
    req = m.next_request(0)
    assert req is not None
    new = item(0, res)
    m.submit(new)
    m.handle_response(req[1], ConnectionError("x"), 0)
    assert m.unsent[TopicPartition("t", 0)] is new


def test_run_drives_sends_and_callbacks() -> None:
    async def main() -> None:
        res: list[tuple[int, AlterPartitionResult]] = []
        m = AlterPartitionManager(1, lambda: 42, retry_backoff_ms=10)
        calls: list[dict[str, Any]] = []

        async def send(body: Any) -> Any:
            calls.append(body)
            if len(calls) == 1:
                raise ConnectionError("controller not reachable yet")
            parts = [p["partition_index"] for t in body["topics"] for p in t["partitions"]]
            return ok(parts)

        loop = asyncio.get_running_loop()
        task = asyncio.create_task(m.run(send, lambda: int(loop.time() * 1000)))
        m.submit(item(0, res))
        m.submit(item(1, res))
        async with asyncio.timeout(5):
            while len(res) < 2:
                await asyncio.sleep(0.005)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        assert len(calls) == 2  # failed once, then both in one batch
        assert sorted(p for p, _ in res) == [0, 1]
        assert all(isinstance(r, CommittedLeaderAndIsr) for _, r in res)

    asyncio.run(main())
