"""The share state's writes in order, on three in-process brokers (RF 3, so that each write of
the share coordinator waits for its followers).

- The share coordinator changes a key one write at a time: a write is checked against the state
  the write before it left, not against the state before a write still being replicated. A
  read with a newer leader epoch writes that epoch first (fencing the older leader); a write of
  the older leader that arrives while that fencing write is on its way is refused
  FENCED_LEADER_EPOCH, not written after it (which would leave the older leader's state, with
  acceptances the newer leader never saw, as the latest).
- A share-partition leader writes every change of its state: a change made while a background
  write is on its way (a second member's records released in the same instant as the first's)
  is written after it, not dropped because a write was already running.
- A start the leader moves past offsets never to be delivered (a transaction's commit marker
  after its records were all accepted) is written too: no acknowledgement would write it.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from wherry.common.topic_partition import TopicPartition
from wherry.server.broker import Broker
from wherry.share.partition import AckBatch, AckType, StateBatch
from wherry.share.state import SHARE_STATE_TOPIC, ShareKey, ShareState
from wherry.testing.cluster import AsyncDevCluster

ACCEPTED = 2  # a persisted state batch's delivery state (ACKNOWLEDGED)


def _run(tmp_path: Path, body: Callable[[AsyncDevCluster], Awaitable[None]]) -> None:
    async def main() -> None:
        async with AsyncDevCluster(
            tmp_path, brokers=3, base_port=0,
            overrides={
                "group.share.delivery.count.limit": "2",
                "share.coordinator.state.topic.num.partitions": "1",
                "share.coordinator.state.topic.replication.factor": "3",
                "share.coordinator.state.topic.min.isr": "2",
            },
        ) as cluster:
            await body(cluster)

    asyncio.run(main())


async def _leader(cluster: AsyncDevCluster, tp: TopicPartition) -> Broker:
    """The broker leading `tp`, once it does."""
    def leader() -> Broker | None:
        for b in cluster.brokers.values():
            part = b.replica_manager.get_partition(tp)
            if part is not None and part.is_leader:
                return b
        return None

    await _until(lambda: leader() is not None, f"{tp} has a leader")
    found = leader()
    assert found is not None
    return found


async def _shared_topic(
    cluster: AsyncDevCluster, prefix: str
) -> tuple[TopicPartition, Broker, uuid.UUID]:
    """A new one-partition topic, RF 3: its partition, its leader and its topic id."""
    topic = f"{prefix}-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    await cluster.brokers[0].admin.create_topic(
        topic, num_partitions=1, replication_factor=3, configs={}
    )
    b = await _leader(cluster, tp)
    # A leader may start leading before the UpdateMetadata that follows its LeaderAndIsr
    # reaches it (as in Kafka): the topic is known once every broker's cache has it.
    await _until(
        lambda: all(x.node.cache.topic_id(topic) for x in cluster.brokers.values()),
        f"every broker knows {topic}",
    )
    topic_id = b.node.cache.topic_id(topic)
    assert topic_id is not None
    return tp, b, topic_id


async def _until(check: Callable[[], bool], what: str) -> None:
    async with asyncio.timeout(20):
        while not check():
            await asyncio.sleep(0.02)
    assert check(), what


@pytest.mark.timeout(90)
def test_an_older_leaders_write_is_fenced_by_a_read_still_being_written(tmp_path: Path) -> None:
    async def body(cluster: AsyncDevCluster) -> None:
        cluster.brokers[0].shares.state_topic.ensure()
        b = await _leader(cluster, TopicPartition(SHARE_STATE_TOPIC, 0))
        coord = b.shares.coordinator
        key = ShareKey("g", uuid.uuid4(), 0)
        await _until(lambda: coord.owner_check(key)[0] == ErrorCode.none, "coordinator loaded")
        assert await coord.write(key, ShareState(0, 4, 0, ())) == ErrorCode.none

        # leader epoch 7 reads: its fencing write is appended and waits for the high watermark
        read = asyncio.ensure_future(coord.read(key, 7))
        await asyncio.sleep(0)
        assert not read.done()
        # meanwhile the leader at epoch 4 writes an acceptance
        older = ShareState(0, 4, 0, (StateBatch(0, 9, ACCEPTED, 1),))
        assert await coord.write(key, older) == ErrorCode.fenced_leader_epoch

        err, state = await read
        assert err == ErrorCode.none and state is not None
        assert state.leader_epoch == 7 and state.batches == ()
        assert coord.store.states[key] == state  # the fence is the latest state

    _run(tmp_path, body)


@pytest.mark.timeout(120)
def test_a_change_made_while_a_write_is_on_its_way_is_written_after_it(tmp_path: Path) -> None:
    async def body(cluster: AsyncDevCluster) -> None:
        from confluent_kafka import Producer

        tp, b, topic_id = await _shared_topic(cluster, "shared")
        topic = tp.topic
        rt = b.shares

        def produce() -> None:  # two batches of 5 records: offsets 0-4 and 5-9
            p = Producer({"bootstrap.servers": f"127.0.0.1:{b.bound_ports[0]}"})
            for batch in range(2):
                for i in range(5):
                    p.produce(topic, f"{batch}-{i}".encode(), partition=0)
                assert p.flush(30) == 0

        group = "writes-in-order"
        wanted = [(tp, topic_id)]
        # the share-partition starts at the end of the empty partition (`latest`), then the
        # records come
        first = await rt.fetch(group, "a", wanted, max_wait_ms=0, max_bytes=1 << 20,
                               max_records=1)
        assert first[tp].error_code == ErrorCode.none and not first[tp].acquired
        await asyncio.to_thread(produce)

        async def acquire(member: str) -> list[int]:
            got = await rt.fetch(group, member, wanted, max_wait_ms=5_000,
                                 max_bytes=1 << 20, max_records=1)
            pf = got[tp]
            assert pf.error_code == ErrorCode.none, pf.error_code
            return [o for r in pf.acquired for o in range(r.first_offset, r.last_offset + 1)]

        def written() -> bool:  # no background write running
            return not rt._bg

        # each member takes one batch, and again once it is released: its last delivery (the
        # delivery limit is 2)
        assert await acquire("a") == list(range(5))
        assert await acquire("b") == list(range(5, 10))
        rt.release(group, "a", tp)
        rt.release(group, "b", tp)
        await _until(written, "releases written")
        assert await acquire("a") == list(range(5))
        assert await acquire("b") == list(range(5, 10))

        # each release archives its batch (at the limit); the second is made while the first
        # one's write is on its way
        entry = rt.parts[(group, tp)]
        rt.release(group, "a", tp)
        await _until(entry.lock.locked, "the first release is being written")
        rt.release(group, "b", tp)
        assert entry.sp is not None and entry.sp.start_offset == 10
        coordinator = await _leader(cluster, TopicPartition(SHARE_STATE_TOPIC, 0))
        store = coordinator.shares.coordinator.store
        key = ShareKey(group, topic_id, 0)
        await _until(lambda: store.states[key].start_offset == 10, "both releases written")
        await _until(written, "no write left")
        assert store.states[key].start_offset == 10

    _run(tmp_path, body)


@pytest.mark.timeout(120)
def test_a_start_moved_past_a_commit_marker_is_written(tmp_path: Path) -> None:
    async def body(cluster: AsyncDevCluster) -> None:
        from confluent_kafka import Producer

        tp, b, topic_id = await _shared_topic(cluster, "shared-txn")
        topic = tp.topic
        rt = b.shares
        group = "past-the-marker"
        wanted = [(tp, topic_id)]
        first = await rt.fetch(group, "a", wanted, max_wait_ms=0, max_bytes=1 << 20,
                               max_records=10)
        assert first[tp].error_code == ErrorCode.none and not first[tp].acquired

        producer = Producer({
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": f"tx-{uuid.uuid4().hex[:8]}",
        })

        def open_transaction() -> None:  # five records (offsets 0-4), not yet committed
            producer.init_transactions(30)
            producer.begin_transaction()
            for i in range(5):
                producer.produce(topic, f"r{i}".encode(), partition=0)
            assert producer.flush(30) == 0

        await asyncio.to_thread(open_transaction)
        # read_uncommitted (the default): the open transaction's records are delivered
        got = await rt.fetch(group, "a", wanted, max_wait_ms=5_000, max_bytes=1 << 20,
                             max_records=10)
        assert [(r.first_offset, r.last_offset) for r in got[tp].acquired] == [(0, 4)]
        assert await rt.acknowledge(
            group, "a", tp, topic_id, [AckBatch(0, 4, (int(AckType.ACCEPT),))]
        ) == ErrorCode.none
        coordinator = await _leader(cluster, TopicPartition(SHARE_STATE_TOPIC, 0))
        store = coordinator.shares.coordinator.store
        key = ShareKey(group, topic_id, 0)
        assert store.states[key].start_offset == 5

        # the commit marker takes offset 5: nothing to deliver, the start moves past it
        await asyncio.to_thread(producer.commit_transaction, 30)
        part = b.replica_manager.get_partition(tp)
        assert part is not None
        await _until(lambda: part.high_watermark == 6, "the marker is replicated")
        got = await rt.fetch(group, "a", wanted, max_wait_ms=0, max_bytes=1 << 20,
                             max_records=10)
        assert got[tp].error_code == ErrorCode.none and not got[tp].acquired
        entry = rt.parts[(group, tp)]
        assert entry.sp is not None and entry.sp.start_offset == 6
        await _until(lambda: store.states[key].start_offset == 6, "the new start written")

    _run(tmp_path, body)
