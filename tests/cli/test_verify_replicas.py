"""`wherry verify-replicas`: option errors (no cluster needed), the pure comparison, the
broker's debugging-consumer fetch (replica id -2) from a follower, and the tool against a real
3-broker `DevCluster` with data produced by confluent-kafka: no divergence on a healthy RF 3
topic; the exact partition and offset after a follower's segment was altered offline."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from pathlib import Path

import google_crc32c
import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_wire
from wherry.cli.main import main
from wherry.cli.replica_compare import compare_partition, decode_records, max_lag_line
from wherry.common.topic_partition import TopicPartition
from wherry.protocol.records import Record, RecordSpec, build_batch, iter_batches, iter_records
from wherry.testing.cluster import DevCluster, wait_until

CALL_TIMEOUT_S = 15.0


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["verify-replicas", *args], catch_exceptions=False)


# --------------------------------------------------------------------------------------------
# Options


def test_bad_regex_is_an_error(unreachable_bootstrap: str) -> None:
    result = run("--bootstrap-server", unreachable_bootstrap, "--topics-include", "a(")
    assert result.exit_code == 1
    assert "Error: Invalid --topics-include regular expression 'a('" in result.stderr


def test_the_deprecated_white_list_option_still_selects(unreachable_bootstrap: str) -> None:
    """Kafka's `--topic-white-list` (deprecated): used when `--topics-include` is not given."""
    result = run("--bootstrap-server", unreachable_bootstrap, "--topic-white-list", "a(")
    assert result.exit_code == 1
    first = result.stderr.splitlines()[0]
    assert first == "--topic-white-list is deprecated: use --topics-include."
    assert "Error: Invalid --topics-include regular expression 'a('" in result.stderr
    both = run("--bootstrap-server", unreachable_bootstrap, "--topic-white-list", "a(",
               "--topics-include", "b(")
    assert "(given, so --topic-white-list is ignored)" in both.stderr
    assert "regular expression 'b('" in both.stderr


def test_bad_address_is_an_error() -> None:
    result = run("--bootstrap-server", "nohostport")
    assert result.exit_code == 1
    assert "Error: Invalid bootstrap server address: nohostport" in result.stderr


def test_unreachable_broker_is_an_error(unreachable_bootstrap: str) -> None:
    result = run("--bootstrap-server", unreachable_bootstrap, "--timeout-ms", "2000")
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: API key 3 v12 to ")


def test_fetch_size_must_be_positive(unreachable_bootstrap: str) -> None:
    result = run("--bootstrap-server", unreachable_bootstrap, "--fetch-size", "0")
    assert result.exit_code == 2 and "--fetch-size" in result.stderr


# --------------------------------------------------------------------------------------------
# The comparison


def _rec(offset: int, value: bytes, *, ts: int = 1000) -> Record:
    return Record(offset, ts, b"k", value, ())


def test_identical_replicas_do_not_diverge() -> None:
    recs = [_rec(i, b"v%d" % i) for i in range(5)]
    check = compare_partition("t", 0, {1: recs, 2: list(recs)}, {1: 5, 2: 5})
    assert check.divergence is None and check.lag == 0 and check.compared == 5


def test_first_differing_offset_is_reported() -> None:
    a = [_rec(i, b"v%d" % i) for i in range(5)]
    b = list(a)
    b[3] = _rec(3, b"xx")
    b[4] = _rec(4, b"yy")
    check = compare_partition("t", 2, {1: a, 0: b}, {1: 5, 0: 5})
    assert check.divergence is not None
    assert (check.divergence.offset, check.divergence.reference, check.divergence.replica,
            check.divergence.field) == (3, 1, 0, "value")
    assert check.divergence.describe() == (
        "Partition t-2: replica 0's record at offset 3 does not match replica 1's "
        "(value differs)")


def test_timestamp_and_missing_record_diverge() -> None:
    a = [_rec(i, b"v") for i in range(3)]
    check = compare_partition("t", 0, {0: a, 1: [a[0], _rec(1, b"v", ts=5), a[2]]},
                              {0: 3, 1: 3})
    assert check.divergence is not None and check.divergence.field == "timestamp"
    check = compare_partition("t", 0, {0: a, 1: [a[0], a[2]]}, {0: 3, 1: 3})
    assert check.divergence is not None
    assert (check.divergence.offset, check.divergence.field) == (1, "presence")


def test_lag_counts_only_common_offsets() -> None:
    a = [_rec(i, b"v") for i in range(10)]
    check = compare_partition("t", 1, {0: a, 1: a[:6]}, {0: 10, 1: 6})
    assert check.divergence is None and check.lag == 4 and check.lag_offset == 6
    assert check.compared == 6
    assert max_lag_line([check], "T") == (
        "T: max lag is 4 for partition t-1 at offset 6 among 1 partitions")


def test_decode_leaves_out_a_partial_trailing_batch() -> None:
    one = build_batch([RecordSpec(key=b"a", value=b"1")], base_offset=0)
    two = build_batch([RecordSpec(key=b"b", value=b"2")], base_offset=1)
    assert [r.value for r in decode_records(one + two)] == [b"1", b"2"]
    assert [r.value for r in decode_records(one + two[:-3])] == [b"1"]


# --------------------------------------------------------------------------------------------
# Against a cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("verify") / "cluster", brokers=3, base_port=0,
                    overrides={"auto.leader.rebalance.enable": "false"}) as c:
        c.wait_for_controller()
        yield c


def _create(cluster: DevCluster, partitions: int) -> str:
    topic = f"vr-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(CALL_TIMEOUT_S)
    cluster.wait_for_topic(topic, partitions)
    return topic


def _produce(cluster: DevCluster, topic: str, count: int, partitions: int) -> None:
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                  "compression.type": "none", "linger.ms": 5})
    for i in range(count):
        p.produce(topic, key=b"key-%05d" % i, value=b"value-%05d" % i, partition=i % partitions,
                  headers=[("h", b"%d" % i)])
    assert p.flush(CALL_TIMEOUT_S) == 0


def _in_sync(cluster: DevCluster, topic: str, partitions: int) -> None:
    """Wait until every replica's log holds as many records as the leader's."""

    def equal() -> bool:
        for p in range(partitions):
            ends = {cluster.broker(b).replica_manager.partitions[_tp(topic, p)].log
                    .log_end_offset for b in cluster.running}
            if len(ends) != 1:
                return False
        return True

    wait_until(equal, timeout_s=CALL_TIMEOUT_S)


def _tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


@pytest.mark.slow
def test_debugging_consumer_reads_a_follower(cluster: DevCluster) -> None:
    topic = _create(cluster, 1)
    _produce(cluster, topic, 10, 1)
    _in_sync(cluster, topic, 1)
    leader = cluster.metadata(cluster.running[0], [topic]).leaders(topic)[0]
    follower = next(b for b in cluster.running if b != leader)
    body = kafka_wire.fetch_body(topic)
    del body["rack_id"]  # Fetch v10: before KIP-392 only the leader serves consumers
    resp = kafka_wire.call(cluster.address(follower), 1, 10, body)
    assert resp.responses[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
    body["replica_id"] = -2
    resp = kafka_wire.call(cluster.address(follower), 1, 10, body)
    answer = resp.responses[0].partitions[0]
    assert answer.error_code == 0
    assert [r.value for r in decode_records(bytes(answer.records))] == [
        b"value-%05d" % i for i in range(10)]


@pytest.mark.slow
def test_healthy_topic_has_no_divergence(cluster: DevCluster) -> None:
    topic = _create(cluster, 3)
    _produce(cluster, topic, 300, 3)
    _in_sync(cluster, topic, 3)
    result = run("--bootstrap-server", cluster.bootstrap, "--topics-include", topic,
                 "--fetch-size", "2000", "--report-interval-ms", "1")
    assert result.exit_code == 0, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert lines[0].endswith(": Getting topic metadata...")
    assert lines[1].endswith(": Verification process is started.")
    assert f": max lag is 0 for partition {topic}-" in lines[-2]
    assert lines[-2].endswith("among 3 partitions")
    assert lines[-1] == "No divergence among 3 partitions"
    # progress lines while it ran (one per partition at a 1 ms interval)
    assert sum("max lag is" in line for line in lines) >= 3


def _alter_value(segment: Path, old: bytes, new: bytes) -> int:
    """Replace `old` by `new` (same length) in the one record holding it, recompute that
    batch's CRC; return the record's offset."""
    assert len(old) == len(new)
    data = bytearray(segment.read_bytes())
    at = data.find(old)
    assert at >= 0 and data.find(old, at + 1) < 0
    for pos, header in iter_batches(data):
        end = pos + header.size_in_bytes
        if pos <= at < end:
            offset = next(r.offset for r in iter_records(data, pos) if r.value == old)
            data[at:at + len(new)] = new
            crc = google_crc32c.value(bytes(data[pos + 21:end]))
            struct.pack_into(">I", data, pos + 17, crc)
            segment.write_bytes(bytes(data))
            return offset
    raise AssertionError("no batch holds the value")


@pytest.mark.slow
def test_altered_follower_segment_is_found(cluster: DevCluster) -> None:
    topic = _create(cluster, 2)
    _produce(cluster, topic, 200, 2)
    _in_sync(cluster, topic, 2)
    leader = cluster.metadata(cluster.running[0], [topic]).leaders(topic)[1]
    follower = next(b for b in cluster.running if b != leader)
    segment = (cluster.cluster.directory / f"broker-{follower}" / f"{topic}-1"
               / "00000000000000000000.log")
    cluster.stop_broker(follower)
    try:
        # value-00077 went to partition 1 (77 % 2) as its record offset 38
        offset = _alter_value(segment, b"value-00077", b"VALUE-00077")
    finally:
        cluster.start_broker(follower)
    assert offset == 38
    wait_until(lambda: _tp(topic, 1) in cluster.broker(follower).replica_manager.partitions,
               timeout_s=CALL_TIMEOUT_S)
    result = run("--bootstrap-server", cluster.bootstrap, "--topics-include", f"{topic}|nomatch")
    assert result.exit_code == 1, (result.stdout, result.stderr)
    lines = result.stdout.splitlines()
    assert (f"Partition {topic}-1: replica {follower}'s record at offset 38 does not match "
            f"replica {leader}'s (value differs)") in lines
    assert not any(f"Partition {topic}-0" in line for line in lines)
    assert lines[-1] == "1 of 2 partitions diverge"


@pytest.mark.slow
def test_a_stopped_replica_is_an_error(cluster: DevCluster) -> None:
    topic = _create(cluster, 1)
    _produce(cluster, topic, 5, 1)
    _in_sync(cluster, topic, 1)
    leader = cluster.metadata(cluster.running[0], [topic]).leaders(topic)[0]
    follower = next(b for b in cluster.running if b != leader)
    cluster.stop_broker(follower)
    try:
        def gone() -> bool:
            return follower not in cluster.metadata(leader, [topic]).brokers

        wait_until(gone, timeout_s=CALL_TIMEOUT_S)
        result = run("--bootstrap-server", cluster.address(leader), "--topics-include", topic)
    finally:
        cluster.start_broker(follower)
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert result.stderr == (f"Error: Replica {follower} of {topic}-0 is not available (its "
                             f"broker is not in the metadata)\n")
