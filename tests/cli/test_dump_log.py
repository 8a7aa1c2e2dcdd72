"""`wherry dump-log` on the files of a real broker: a one-broker `DevCluster` written to by
confluent-kafka (plain, gzip and zstd batches, an idempotent producer's batch, a consumer group's
committed offsets), stopped, then its segment, indexes and snapshots dumped; the index check
passes on the clean files and reports the entry of a corrupted copy of the `.index`. wherry
has no transactions (EndTxn) yet, so the control batch is a COMMIT marker from wherry's own
builder appended to a copy of the segment."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from wherry.cli.dump_format import OFFSET_ENTRY, TIME_ENTRY
from wherry.cli.main import main
from wherry.protocol.records import build_control_batch
from wherry.testing.cluster import DevCluster

CALL_TIMEOUT_S = 15.0
TOPIC = "dump-me"
GROUP = "dump-group"
SEGMENT = "00000000000000000000"
PAD = b"x" * 300  # librdkafka sends a batch uncompressed when compressing does not pay


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["dump-log", *args], catch_exceptions=False)


def _produce(bootstrap: str, codec: str, values: list[bytes], **extra: str) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                  "linger.ms": 50, **extra})
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, key=f"k{i}".encode(), partition=0,
                  headers=[("h1", b"x")] if codec == "none" else None)
    assert p.flush(CALL_TIMEOUT_S) == 0


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("dumplog") / "cluster"
    with DevCluster(root, brokers=1) as c:
        c.wait_for_controller()
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        topic = NewTopic(TOPIC, num_partitions=1, replication_factor=1,
                         config={"index.interval.bytes": "1"})  # an index entry per batch
        admin.create_topics([topic])[TOPIC].result(CALL_TIMEOUT_S)
        c.wait_for_topic(TOPIC, 1)
        _produce(c.bootstrap, "none", [b"plain-0", b"plain-1", b"plain-2"])
        _produce(c.bootstrap, "gzip", [b"gzip-%d " % i + PAD for i in range(4)])
        _produce(c.bootstrap, "zstd", [b"zstd-%d " % i + PAD for i in range(5)])
        _produce(c.bootstrap, "none", [b"idem-0", b"idem-1"], **{"enable.idempotence": "true"})
        consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": GROUP,
                             "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 7)], asynchronous=False)
        consumer.close()
    yield root / "broker-0"


@pytest.mark.slow
def test_segment_batches_plain_and_compressed(data_dir: Path) -> None:
    log = data_dir / f"{TOPIC}-0" / f"{SEGMENT}.log"
    result = run("--files", str(log))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    batches = lines[2:]
    assert len(batches) == 4, batches
    pattern = re.compile(
        r"baseOffset: (\d+) lastOffset: (\d+) count: (\d+) baseSequence: -?\d+ "
        r"lastSequence: -?\d+ producerId: -?\d+ producerEpoch: -?\d+ "
        r"partitionLeaderEpoch: \d+ isTransactional: (true|false) isControl: (true|false) "
        r"deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: \d+ size: (\d+) "
        r"magic: 2 compresscodec: (\w+) crc: \d+ isvalid: true")
    parsed = [pattern.fullmatch(b) for b in batches]
    assert all(parsed), batches
    rows = [m.groups() for m in parsed if m]
    assert [(r[0], r[1], r[2], r[7]) for r in rows] == [
        ("0", "2", "3", "none"), ("3", "6", "4", "gzip"), ("7", "11", "5", "zstd"),
        ("12", "13", "2", "none")]
    assert all((r[3], r[4]) == ("false", "false") for r in rows)
    assert re.search(r"baseSequence: 0 lastSequence: 1 producerId: \d+ producerEpoch: 0 ",
                     batches[3]), batches[3]
    positions = [int(r[5]) for r in rows]
    sizes = [int(r[6]) for r in rows]
    assert positions == [0] + [sum(sizes[:i]) for i in range(1, 4)]
    assert sum(sizes) == log.stat().st_size


def test_control_batch(data_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / f"{SEGMENT}.log"
    marker = build_control_batch(commit=True, producer_id=5, producer_epoch=0,
                                 coordinator_epoch=3, base_offset=14, timestamp_ms=1000)
    log.write_bytes((data_dir / f"{TOPIC}-0" / f"{SEGMENT}.log").read_bytes() + marker)
    out = run("--files", str(log), "--deep-iteration").stdout.splitlines()
    assert re.fullmatch(
        r"baseOffset: 14 lastOffset: 14 count: 1 baseSequence: -1 lastSequence: -1 "
        r"producerId: 5 producerEpoch: 0 partitionLeaderEpoch: -1 isTransactional: true "
        r"isControl: true deleteHorizonMs: OptionalLong.empty position: \d+ "
        r"CreateTime: 1000 size: \d+ magic: 2 compresscodec: none crc: \d+ isvalid: true",
        out[-2]), out[-2]
    assert re.fullmatch(
        r"\| offset: 14 CreateTime: 1000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: \[\] "
        r"endTxnMarker: COMMIT coordinatorEpoch: 3", out[-1]), out[-1]


def test_print_data_log_shows_every_record(data_dir: Path) -> None:
    log = data_dir / f"{TOPIC}-0" / f"{SEGMENT}.log"
    out = run("--files", str(log), "--print-data-log").stdout
    records = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(records) == 14
    assert all("endTxnMarker" not in r for r in records)
    assert re.fullmatch(
        r"\| offset: 0 CreateTime: \d+ keySize: 2 valueSize: 7 sequence: -1 "
        r"headerKeys: \[h1\] key: k0 payload: plain-0", records[0]), records[0]
    assert records[6].endswith("key: k3 payload: gzip-3 " + PAD.decode())
    assert records[11].endswith("key: k4 payload: zstd-4 " + PAD.decode())
    assert re.search(r"sequence: 1 headerKeys: \[h1\] key: k1 payload: idem-1$", records[13])
    deep = run("--files", str(log), "--deep-iteration").stdout
    assert "payload" not in deep and deep.count("| offset: ") == 14


def test_index_check_passes_on_the_clean_files(data_dir: Path) -> None:
    part = data_dir / f"{TOPIC}-0"
    index, timeindex = part / f"{SEGMENT}.index", part / f"{SEGMENT}.timeindex"
    result = run("--files", f"{index},{timeindex}")
    assert result.exit_code == 0
    assert result.stderr == ""
    assert result.stdout.startswith(f"Dumping {index}\n")
    assert re.search(r"^offset: \d+ position: \d+$", result.stdout, re.M)
    assert re.search(r"^timestamp: \d+ offset: \d+$", result.stdout, re.M)
    verify = run("--files", str(index), "--verify-index-only")
    assert (verify.stdout, verify.stderr) == (f"Dumping {index}\n", "")
    sanity = run("--files", str(index), "--index-sanity-check")
    assert sanity.exit_code == 0
    assert sanity.stdout == f"Dumping {index}\n{index} passed sanity check.\n"


def test_index_check_reports_a_corrupted_entry(data_dir: Path, tmp_path: Path) -> None:
    part = data_dir / f"{TOPIC}-0"
    for suffix in (".log", ".index"):
        shutil.copy(part / f"{SEGMENT}{suffix}", tmp_path / f"{SEGMENT}{suffix}")
    index = tmp_path / f"{SEGMENT}.index"
    data = bytearray(index.read_bytes())
    assert len(data) >= OFFSET_ENTRY.size
    rel, position = OFFSET_ENTRY.unpack_from(data, 0)
    OFFSET_ENTRY.pack_into(data, 0, rel + 1, position)  # the offset no longer ends that batch
    index.write_bytes(bytes(data))
    result = run("--files", str(index), "--verify-index-only")
    assert result.exit_code == 0  # reported, status 0, as kafka-dump-log does
    assert result.stderr == (
        f"Mismatches in :{index}\n  Index offset: {rel + 1}, log offset: {rel}\n")


def test_index_sanity_check_fails_on_a_torn_index(tmp_path: Path) -> None:
    index = tmp_path / f"{SEGMENT}.index"
    index.write_bytes(b"\x00" * 12)
    result = run("--files", str(index), "--index-sanity-check")
    assert result.exit_code == 1
    assert "neither positive nor a multiple of 8" in result.stderr


def test_producer_snapshot(data_dir: Path) -> None:
    snapshots = sorted((data_dir / f"{TOPIC}-0").glob("*.snapshot"))
    assert snapshots, "the stopped broker wrote no producer snapshot"
    out = run("--files", str(snapshots[-1])).stdout
    lines = out.splitlines()[1:]
    assert lines and all(re.fullmatch(
        r"producerId: \d+ producerEpoch: \d+ coordinatorEpoch: -?\d+ currentTxnFirstOffset: "
        r"OptionalLong(\.empty|\[\d+\]) lastTimestamp: \d+ firstSequence: \d+ "
        r"lastSequence: \d+ lastOffset: \d+ offsetDelta: \d+ timestamp: \d+", line)
        for line in lines), lines


def test_offsets_decoder_on_consumer_offsets(data_dir: Path) -> None:
    logs = [p for p in data_dir.glob("__consumer_offsets-*/*.log") if p.stat().st_size]
    assert logs
    out = run("--files", ",".join(map(str, logs)), "--offsets-decoder").stdout
    assert re.search(
        r'key: \{"type":"1","data":\{"group":"dump-group","topic":"dump-me","partition":0\}\} '
        r'payload: \{"version":"\d+","data":\{"offset":7,', out), out


@pytest.mark.parametrize("args, message", [
    (["--files", "/no/such/00000000000000000000.log"], "is not a file"),
    (["--files", ","], "--files names no file"),
    ([], "Missing option '--files'"),
])
def test_bad_input(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code != 0
    assert message in result.stderr


def test_unknown_and_misnamed_files(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("x")
    result = run("--files", str(other))
    assert result.exit_code == 0 and f"Ignoring unknown file {other}" in result.stderr
    bad = tmp_path / "segment.log"
    bad.write_bytes(b"")
    result = run("--files", str(bad))
    assert result.exit_code == 1
    assert "is not named for a base offset" in result.stderr


def test_max_bytes_stops_at_the_first_batch(data_dir: Path) -> None:
    log = data_dir / f"{TOPIC}-0" / f"{SEGMENT}.log"
    first = run("--files", str(log)).stdout.splitlines()[2]
    found = re.search(r" size: (\d+) ", first)
    assert found
    size = int(found.group(1))
    out = run("--files", str(log), "--max-bytes", str(size + 10)).stdout.splitlines()
    assert out[2:] == [first]


def test_time_index_check_reports_a_changed_timestamp(data_dir: Path, tmp_path: Path) -> None:
    part = data_dir / f"{TOPIC}-0"
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(part / f"{SEGMENT}{suffix}", tmp_path / f"{SEGMENT}{suffix}")
    timeindex = tmp_path / f"{SEGMENT}.timeindex"
    data = bytearray(timeindex.read_bytes())
    ts, rel = TIME_ENTRY.unpack_from(data, 0)
    TIME_ENTRY.pack_into(data, 0, ts - 1, rel)
    timeindex.write_bytes(bytes(data))
    result = run("--files", str(timeindex), "--verify-index-only")
    assert result.exit_code == 0
    assert result.stdout == f"Dumping {timeindex}\n"
    assert result.stderr == (f"Found timestamp mismatch in :{timeindex}\n"
                             f"  Index timestamp: {ts - 1}, log timestamp: {ts}\n")
