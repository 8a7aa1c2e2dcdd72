"""Issue 16 acceptance, share groups (KIP-932) with confluent-kafka's ShareConsumer against a
real `wherry server`: several share consumers on one partition get distinct records and all
of them; released records come back until the delivery limit, rejected ones never; a
SIGKILLed consumer's acquired records go to another as soon as its connection drops (well
before a 60 s lock duration); malformed
ShareFetch / ShareAcknowledge / ShareGroupHeartbeat get Kafka's error codes and corrupt
nothing; group configs (type 32) are validated and described; a read_committed share group
(`share.isolation.level`) gets committed transactions only, and an open one's records once
it commits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kio.schema.errors import ErrorCode

from tests.broker_process import BrokerProcess, wait_until
from tests.helpers import create_topic
from tests.kafka_wire import call, connect
from tests.share.share_harness import (
    BROKER_OVERRIDES,
    consume_until,
    produce,
    set_group_configs,
    share_consumer,
)

pytestmark = pytest.mark.slow
E = ErrorCode
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("share"), overrides=BROKER_OVERRIDES).start()
    try:
        yield b
    finally:
        b.stop()


def _names() -> tuple[str, str]:
    u = uuid.uuid4().hex[:8]
    return f"share-t-{u}", f"share-g-{u}"


def test_several_consumers_on_one_partition_get_distinct_records(
    share_broker: BrokerProcess,
) -> None:
    bs = share_broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    total = 300
    seen: dict[int, list[int]] = {i: [] for i in range(3)}
    lock = threading.Lock()
    all_offsets: list[int] = []

    def run(i: int) -> None:
        c = share_consumer(bs, group, topic)
        try:
            def take(_c: object, m: object) -> None:
                with lock:
                    seen[i].append(m.offset())  # type: ignore[attr-defined]
                    all_offsets.append(m.offset())  # type: ignore[attr-defined]

            consume_until(c, lambda: len(all_offsets) >= total, take, 60)
            c.commit_sync(15)  # the last poll's records (close alone releases them)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(4)  # all three joined and fetching before the records arrive
    listed = call(bs, 16, 5, {"states_filter": [], "types_filter": ["share"]})
    assert (group, "share", "Stable") in [
        (g.group_id, g.group_type, g.group_state) for g in listed.groups]
    desc = call(bs, 77, 1, {"group_ids": [group], "include_authorized_operations": False})
    members = desc.groups[0].members
    resources = call(bs, 74, 1, {"resource_types": [32]}).config_resources
    assert (group, 32) in [(r.resource_name, r.resource_type) for r in resources]
    classic = call(bs, 15, 5, {"groups": [group], "include_authorized_operations": False})
    assert classic.groups[0].error_code == E.group_id_not_found
    assert len(members) == 3 and all(
        [tp.topic_name for tp in m.assignment.topic_partitions] == [topic] for m in members)
    for k in range(30):
        produce(bs, topic, [b"r%d" % (k * 10 + j) for j in range(10)])
        time.sleep(0.05)
    for t in threads:
        t.join(90)
    counts = Counter(all_offsets)
    assert sorted(counts) == list(range(total)), "every record consumed"
    assert max(counts.values()) == 1, "no record delivered twice (all accepted in time)"
    assert sum(1 for v in seen.values() if v) >= 2, f"shared: {[len(v) for v in seen.values()]}"


def test_released_records_redelivered_to_the_limit_rejected_never(
    share_broker: BrokerProcess,
) -> None:
    bs = share_broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=1)
    set_group_configs(
        bs, group, {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"}
    )
    values = [b"ok-0", b"release-1", b"reject-2", b"ok-3", b"release-4", b"reject-5"]
    produce(bs, topic, values)
    deliveries: Counter[bytes] = Counter()
    counts_seen: dict[bytes, list[int]] = {}
    c = share_consumer(bs, group, topic, **{"share.acknowledgement.mode": "explicit"})
    try:
        deadline = time.monotonic() + 40
        quiet_since = None
        while time.monotonic() < deadline:
            msgs = [m for m in c.poll(0.5) if m.error() is None]
            for m in msgs:
                v = m.value()
                deliveries[v] += 1
                counts_seen.setdefault(v, []).append(m.delivery_count())
                if v.startswith(b"release"):
                    c.acknowledge(m, AcknowledgeType.RELEASE)
                elif v.startswith(b"reject"):
                    c.acknowledge(m, AcknowledgeType.REJECT)
                else:
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                c.commit_sync(15)
                quiet_since = None
            elif sum(deliveries.values()) >= 10:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 3:
                    break
    finally:
        c.close()
    assert deliveries[b"ok-0"] == deliveries[b"ok-3"] == 1
    assert deliveries[b"reject-2"] == deliveries[b"reject-5"] == 1
    assert deliveries[b"release-1"] == deliveries[b"release-4"] == 3, deliveries
    assert counts_seen[b"release-1"] == [1, 2, 3]


CRASHER = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    msgs = [m for m in c.poll(0.5) if m.error() is None]
    if msgs:
        print("ACQUIRED", " ".join(str(m.offset()) for m in msgs), flush=True)
        time.sleep(120)
"""


def test_crashed_consumer_records_come_back_when_its_connection_drops(
    share_broker: BrokerProcess, tmp_path: Path
) -> None:
    bs = share_broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=1)
    lock_ms = 60_000
    set_group_configs(
        bs, group,
        {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": str(lock_ms)},
    )
    produce(bs, topic, [b"c%d" % i for i in range(20)])
    script = tmp_path / "crasher.py"
    script.write_text(CRASHER)
    proc = subprocess.Popen(
        [sys.executable, str(script), bs, group, topic],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert proc.stdout is not None
        line = ""
        start = time.monotonic()
        while time.monotonic() - start < 40 and not line.startswith("ACQUIRED"):
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith("ACQUIRED"), line
        held = [int(x) for x in line.split()[1:]]
        acquired_at = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    got: dict[int, int] = {}
    first_back: list[float] = []
    c = share_consumer(bs, group, topic)
    try:
        def take(_c: object, m: object) -> None:
            if not first_back:
                first_back.append(time.monotonic())
            got[m.offset()] = m.delivery_count()  # type: ignore[attr-defined]

        consume_until(c, lambda: set(held) <= set(got), take, 40)
        c.commit_sync(15)
    finally:
        c.close()
    assert set(held) <= set(got), (held, sorted(got))
    assert all(got[o] == 2 for o in held), "redelivered: second delivery"
    # released when the connection dropped, not when the 60 s locks expire
    assert first_back[0] - acquired_at < 20


def _topic_id(bs: str, topic: str) -> uuid.UUID:
    md = call(bs, 3, 12, {"topics": [{"name": topic, "topic_id": None}],
                          "allow_auto_topic_creation": False,
                          "include_topic_authorized_operations": False})
    return md.topics[0].topic_id


def _share_fetch(sock: object, group: str, member: str, epoch: int, tid: uuid.UUID,
                 acks: list[dict[str, object]] | None = None, wait_ms: int = 0) -> object:
    return call(sock, 78, 1, {  # type: ignore[arg-type]
        "group_id": group, "member_id": member, "share_session_epoch": epoch,
        "max_wait": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 100,
        "batch_size": 100,
        "topics": [{"topic_id": tid, "partitions": [
            {"partition_index": 0, "acknowledgement_batches": acks or []}]}],
        "forgotten_topics_data": [],
    })


def test_malformed_share_requests_get_kafka_errors_and_corrupt_nothing(
    share_broker: BrokerProcess,
) -> None:
    bs = share_broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest"})
    produce(bs, topic, [b"m%d" % i for i in range(10)])
    tid = _topic_id(bs, topic)
    sock = connect(bs)
    try:
        assert _share_fetch(sock, group, "", 0, tid).error_code == E.invalid_request
        assert _share_fetch(sock, group, "m1", 3, tid).error_code == E.share_session_not_found
        r = _share_fetch(sock, group, "m1", 0, tid, wait_ms=3000)
        part = r.responses[0].partitions[0]
        assert r.error_code == E.none and part.error_code == E.none
        assert [(a.first_offset, a.last_offset) for a in part.acquired_records] == [(0, 9)]
        assert _share_fetch(sock, group, "m1", 5, tid).error_code == E.invalid_share_session_epoch
        # acknowledgements outside the in-flight records, or of records it does not hold
        ack = call(sock, 79, 1, {
            "group_id": group, "member_id": "m1", "share_session_epoch": 1,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                        "acknowledgement_batches": [
                            {"first_offset": 5, "last_offset": 50, "acknowledge_types": [1]}]}]}],
        })
        assert ack.responses[0].partitions[0].error_code == E.invalid_record_state
        other = call(sock, 79, 1, {
            "group_id": group, "member_id": "m2", "share_session_epoch": 0,
            "topics": []})
        assert other.error_code == E.invalid_share_session_epoch
        bad_type = call(sock, 79, 1, {
            "group_id": group, "member_id": "m1", "share_session_epoch": 2,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                        "acknowledgement_batches": [
                            {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1, 7]}]}]}],
        })
        assert bad_type.responses[0].partitions[0].error_code == E.invalid_request
        # a good one: accept 0-4, then close the session (releasing 5-9)
        ok = call(sock, 79, 1, {
            "group_id": group, "member_id": "m1", "share_session_epoch": -1,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                        "acknowledgement_batches": [
                            {"first_offset": 0, "last_offset": 4, "acknowledge_types": [1]}]}]}],
        })
        assert ok.responses[0].partitions[0].error_code == E.none
        fc = call(sock, 10, 4, {"key_type": 2, "coordinator_keys": [f"{group}:{tid}:0"]})
        assert fc.coordinators[0].error_code == E.none
        assert fc.coordinators[0].port == int(bs.rsplit(":", 1)[1])
        hbs: list[object] = []

        def heartbeat() -> bool:  # __consumer_offsets may be in the making
            hbs.append(call(sock, 76, 1, {"group_id": group, "member_id": "ghost",
                                          "member_epoch": 4, "rack_id": None,
                                          "subscribed_topic_names": None}))
            return hbs[-1].error_code != E.coordinator_not_available  # type: ignore[attr-defined]

        assert wait_until(heartbeat, timeout_s=20, interval_s=0.2)
        assert hbs[-1].error_code == E.unknown_member_id  # type: ignore[attr-defined]
    finally:
        sock.close()
    # nothing corrupted: a consumer gets exactly the released 5-9, on their second delivery
    got: dict[int, int] = {}
    c = share_consumer(bs, group, topic)
    try:
        consume_until(c, lambda: len(got) >= 5,
                      lambda _c, m: got.__setitem__(m.offset(), m.delivery_count()), 30)
        time.sleep(1)
        consume_until(c, lambda: False,
                      lambda _c, m: got.__setitem__(m.offset(), m.delivery_count()), 2)
        c.commit_sync(15)
    finally:
        c.close()
    assert got == {o: 2 for o in range(5, 10)}


def test_group_config_resources(share_broker: BrokerProcess) -> None:
    bs = share_broker.bootstrap
    _, group = _names()
    admin = AdminClient({"bootstrap.servers": bs})
    set_group_configs(bs, group, {"share.record.lock.duration.ms": "5000"})
    r = ConfigResource(ResourceType.GROUP, group)
    cfg = admin.describe_configs([r])[r].result(15)
    assert cfg["share.record.lock.duration.ms"].value == "5000"
    assert cfg["share.auto.offset.reset"].value == "latest"
    assert cfg["share.delivery.count.limit"].value == "5"
    for bad in ({"share.record.lock.duration.ms": "500"},  # below the broker's minimum
                {"share.auto.offset.reset": "sometimes"},
                {"no.such.group.config": "1"}):
        with pytest.raises(KafkaException) as ei:
            set_group_configs(bs, group, bad)
        assert ei.value.args[0].code() == E.invalid_config.value, bad
    cfg = admin.describe_configs([r])[r].result(15)
    assert cfg["share.record.lock.duration.ms"].value == "5000"  # unchanged
    # AlterConfigs (key 33) replaces the group's configs whole
    alter = call(bs, 33, 2, {"resources": [{"resource_type": 32, "resource_name": group,
                                            "configs": [{"name": "share.delivery.count.limit",
                                                         "value": "4"}]}],
                             "validate_only": False})
    assert alter.responses[0].error_code == E.none
    cfg = admin.describe_configs([r])[r].result(15)
    assert cfg["share.delivery.count.limit"].value == "4"
    assert cfg["share.record.lock.duration.ms"].value == "30000"  # back to the default
    descs: list[object] = []

    def describe() -> bool:  # __consumer_offsets may be in the making
        descs.append(call(bs, 77, 1, {"group_ids": [group, "share-unknown"],
                                      "include_authorized_operations": False}))
        return descs[-1].groups[0].error_code != E.coordinator_not_available  # type: ignore[attr-defined]

    assert wait_until(describe, timeout_s=20, interval_s=0.2)
    assert [g.error_code for g in descs[-1].groups] == [  # type: ignore[attr-defined]
        E.group_id_not_found] * 2


def test_read_committed_share_group_sees_committed_transactions_only(
    share_broker: BrokerProcess,
) -> None:
    bs = share_broker.bootstrap
    topic, group = _names()
    create_topic(bs, topic, partitions=1)
    set_group_configs(bs, group, {"share.auto.offset.reset": "earliest",
                                  "share.isolation.level": "read_committed"})
    p = Producer({"bootstrap.servers": bs, "transactional.id": f"tx-{group}"})
    p.init_transactions(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"aborted-%d" % i, partition=0)
    p.abort_transaction(20)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=b"committed-%d" % i, partition=0)
    p.commit_transaction(20)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=b"late-%d" % i, partition=0)
    p.flush(20)  # written, not committed yet: above the LSO
    got: list[bytes] = []
    c = share_consumer(bs, group, topic)
    try:
        consume_until(c, lambda: len(got) >= 5, lambda _c, m: got.append(m.value()), 30)
        consume_until(c, lambda: False, lambda _c, m: got.append(m.value()), 2)
        assert sorted(got) == [b"committed-%d" % i for i in range(5)]
        p.commit_transaction(20)
        consume_until(c, lambda: len(got) >= 8, lambda _c, m: got.append(m.value()), 30)
        c.commit_sync(15)
    finally:
        c.close()
    assert sorted(got) == sorted([b"committed-%d" % i for i in range(5)]
                                 + [b"late-%d" % i for i in range(3)])
