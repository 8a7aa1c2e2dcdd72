"""Follower replication on real brokers (`DevCluster`, SPEC R8, H5): followers fetch from the
leader over the Kafka protocol until their logs are byte-identical to the leader's; after a
leader failure the new leader has the data; the old leader comes back as a follower and drops
the suffix it wrote that the new leader never had (leader-epoch truncation)."""

from __future__ import annotations

import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode

from tests.helpers import create_topic
from tests.log.logtest_util import read_all
from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import build_batch, iter_batches
from wherry.replication.fetcher import EpochAnswer, FetcherConfig, FetchLimits, FetchPosition
from wherry.replication.network_endpoint import NetworkLeaderEndpoint
from wherry.replication.partition import Partition
from wherry.testing.cluster import DevCluster, wait_until

TIMEOUT_S = 20.0


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "enable.idempotence": False,
            "linger.ms": 5,
            "log_level": 0,
        }
    )
    errors: list[object] = []
    for v in values:
        p.produce(topic, v, partition=0, on_delivery=lambda e, _m: e and errors.append(e))
    assert p.flush(TIMEOUT_S) == 0
    assert not errors, errors


def partition(c: DevCluster, broker: int, tp: TopicPartition) -> Partition | None:
    return c.call(lambda: c.broker(broker).replica_manager.get_partition(tp))


def log_bytes(c: DevCluster, broker: int, tp: TopicPartition) -> bytes:
    def read() -> bytes:
        part = c.broker(broker).replica_manager.get_partition(tp)
        assert part is not None
        return read_all(part.log)

    return c.call(read)


def log_end(c: DevCluster, broker: int, tp: TopicPartition) -> int:
    def leo() -> int:
        part = c.broker(broker).replica_manager.get_partition(tp)
        return -1 if part is None else part.log.log_end_offset

    return c.call(leo)


def leader_of(c: DevCluster, broker: int, tp: TopicPartition) -> tuple[int, int]:
    def get() -> tuple[int, int]:
        part = c.broker(broker).replica_manager.get_partition(tp)
        return (-1, -1) if part is None else (part.leader_id, part.leader_epoch)

    return c.call(get)


def test_followers_replicate_and_old_leader_truncates_its_divergent_suffix(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    topic = f"r-{uuid.uuid4().hex[:10]}"
    tp = TopicPartition(topic, 0)
    create_topic(c.bootstrap, topic, [[0, 1, 2]])
    assert wait_until(lambda: all(leader_of(c, b, tp)[0] == 0 for b in (0, 1, 2)), TIMEOUT_S)

    # 1. acks=1 writes to the leader reach both followers, byte for byte.
    produce(c.bootstrap, topic, [b"first-%d" % i for i in range(200)])
    assert log_end(c, 0, tp) == 200
    assert wait_until(lambda: log_end(c, 1, tp) == 200 and log_end(c, 2, tp) == 200, TIMEOUT_S)
    leader_data = log_bytes(c, 0, tp)
    assert log_bytes(c, 1, tp) == leader_data
    assert log_bytes(c, 2, tp) == leader_data
    # One fetcher per source broker, fetching from broker 0.
    for b in (1, 2):
        sources = c.call(lambda b=b: sorted(c.broker(b).node.fetchers.fetchers))  # type: ignore[union-attr]
        assert sources == [0]

    # 2. Cut the followers off (as a network partition would), then the leader appends a
    # suffix nobody replicates (an acks=1 write that is lost on failover).
    for b in (1, 2):
        c.call(lambda b=b: c.broker(b).node.fetchers.remove_partitions([tp]))  # type: ignore[union-attr]
    epoch0 = leader_of(c, 0, tp)[1]

    def append_on_leader() -> int:
        part = c.broker(0).replica_manager.get_partition(tp)
        assert part is not None and part.is_leader
        batch = build_batch([(None, b"lost-%d" % i) for i in range(5)])
        part.log.append_as_leader(batch, leader_epoch=epoch0, now_ms=c.broker(0).clock.now_ms())
        return part.log.log_end_offset

    assert c.call(append_on_leader) == 205
    assert log_end(c, 1, tp) == 200

    # 3. The leader stops; a follower takes over with all acknowledged data.
    c.stop_broker(0)
    assert wait_until(lambda: leader_of(c, 1, tp)[0] in (1, 2), TIMEOUT_S)
    new_leader, new_epoch = leader_of(c, 1, tp)
    assert new_epoch > epoch0
    assert log_bytes(c, new_leader, tp) == leader_data
    other = 3 - new_leader
    assert wait_until(lambda: leader_of(c, other, tp) == (new_leader, new_epoch), TIMEOUT_S)
    produce(c.bootstrap, topic, [b"second-%d" % i for i in range(50)])
    assert log_end(c, new_leader, tp) == 250

    # 4. The old leader restarts as a follower: its "lost" suffix goes, it fetches the rest.
    c.start_broker(0)
    assert wait_until(lambda: leader_of(c, 0, tp)[0] == new_leader, TIMEOUT_S)
    assert wait_until(lambda: log_end(c, 0, tp) == 250 and log_end(c, other, tp) == 250, TIMEOUT_S)
    final = log_bytes(c, new_leader, tp)
    assert log_bytes(c, 0, tp) == final
    assert log_bytes(c, other, tp) == final
    assert b"lost-" not in log_bytes(c, 0, tp)

    def epochs(b: int) -> list[tuple[int, int]]:
        part = c.broker(b).replica_manager.get_partition(tp)
        assert part is not None
        return [(e.epoch, e.start_offset) for e in part.log.leader_epoch_cache.entries]

    assert c.call(lambda: epochs(0)) == c.call(lambda: epochs(new_leader))


def test_stopped_replica_stops_its_idle_fetcher(wherry_cluster: DevCluster) -> None:
    """A follower whose only followed partition goes away (topic deleted) shuts its fetcher
    down (SPEC R8: idle fetchers stop)."""
    c = wherry_cluster
    topic = f"r-{uuid.uuid4().hex[:10]}"
    tp = TopicPartition(topic, 0)
    create_topic(c.bootstrap, topic, [[0, 1]])
    assert wait_until(lambda: leader_of(c, 1, tp)[0] == 0, TIMEOUT_S)

    def fetching_from_0(b: int) -> bool:
        fetchers = c.broker(b).node.fetchers
        assert fetchers is not None
        return 0 in fetchers.fetchers and fetchers.fetcher_for(tp) is not None

    assert wait_until(lambda: c.call(lambda: fetching_from_0(1)), TIMEOUT_S)
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    admin.delete_topics([topic], operation_timeout=10, request_timeout=15)[topic].result(20)
    assert wait_until(lambda: partition(c, 1, tp) is None, TIMEOUT_S)
    assert wait_until(lambda: not c.call(lambda: fetching_from_0(1)), TIMEOUT_S)


def test_offset_for_leader_epoch_over_the_wire(wherry_cluster: DevCluster) -> None:
    """API 23 served by the leader from its leader-epoch cache, with Kafka's errors."""
    c = wherry_cluster
    topic = f"r-{uuid.uuid4().hex[:10]}"
    tp = TopicPartition(topic, 0)
    create_topic(c.bootstrap, topic, [[0, 1]])
    assert wait_until(lambda: leader_of(c, 1, tp)[0] == 0, TIMEOUT_S)
    produce(c.bootstrap, topic, [b"v%d" % i for i in range(10)])
    epoch = leader_of(c, 0, tp)[1]
    missing = TopicPartition(f"missing-{uuid.uuid4().hex[:6]}", 0)

    async def ask(broker: int, replica_id: int, current: int, wanted: int) -> EpochAnswer:
        host, port = c.address(broker).rsplit(":", 1)
        ep = NetworkLeaderEndpoint(replica_id, host, int(port), config=FetcherConfig())
        try:
            answers = await ep.end_offsets_for_epochs({tp: (current, wanted)})
            assert (await ep.end_offsets_for_epochs({missing: (-1, 0)}))[missing] == EpochAnswer(
                ErrorCode.unknown_topic_or_partition, -1, -1
            )
            return answers[tp]
        finally:
            await ep.close()

    # The leader's current epoch ends at its log end offset; replica and consumer alike.
    assert c.run(ask(0, 1, epoch, epoch)) == EpochAnswer(ErrorCode.none, epoch, 10)
    assert c.run(ask(0, -1, -1, epoch)) == EpochAnswer(ErrorCode.none, epoch, 10)
    # An epoch newer than any known is unknown (-1, -1).
    assert c.run(ask(0, 1, epoch, epoch + 5)) == EpochAnswer(ErrorCode.none, -1, -1)
    assert c.run(ask(0, 1, epoch + 1, epoch)).error_code == ErrorCode.unknown_leader_epoch
    # Only the leader answers (the debugging replica id -2 aside).
    assert c.run(ask(1, 2, epoch, epoch)).error_code == ErrorCode.not_leader_or_follower
    assert wait_until(lambda: log_end(c, 1, tp) == 10, TIMEOUT_S)
    assert c.run(ask(1, -2, epoch, epoch)) == EpochAnswer(ErrorCode.none, epoch, 10)


def test_follower_fetch_answers_over_the_wire_are_the_leader_log(
    wherry_cluster: DevCluster,
) -> None:
    """The follower's path end to end: the leader sends its answers' records with sendfile
    (PLAINTEXT), the endpoint receives them into its reused buffer and hands them out as
    views; views still held are never overwritten by later answers, and together they are
    the leader's log byte for byte."""
    c = wherry_cluster
    topic = f"r-{uuid.uuid4().hex[:10]}"
    tp = TopicPartition(topic, 0)
    create_topic(c.bootstrap, topic, [[0, 1]], **{"segment.bytes": str(1 << 20)})
    assert wait_until(lambda: leader_of(c, 0, tp)[0] == 0, TIMEOUT_S)
    produce(c.bootstrap, topic, [bytes([i % 251]) * 1024 for i in range(3000)])
    epoch = leader_of(c, 0, tp)[1]
    want = log_bytes(c, 0, tp)
    assert len(want) > 3_000_000

    async def fetch_all() -> list[memoryview | bytes]:
        host, port = c.address(0).rsplit(":", 1)
        ep = NetworkLeaderEndpoint(1, host, int(port), config=FetcherConfig())
        held: list[memoryview | bytes] = []
        offset, got = 0, 0
        try:
            while got < len(want):
                answers = await ep.fetch(
                    {tp: FetchPosition(offset, epoch, -1, 0)}, FetchLimits(0, 0, 1 << 20, 700_000)
                )
                a = answers[tp]
                assert a.error_code == ErrorCode.none and a.records
                held.append(a.records)
                got += len(a.records)
                offset = [h for _, h in iter_batches(bytes(a.records))][-1].next_offset
        finally:
            await ep.close()
        return held

    held = c.run(fetch_all())
    assert len(held) >= 3  # several answers, all held at once
    assert b"".join(bytes(h) for h in held) == want
