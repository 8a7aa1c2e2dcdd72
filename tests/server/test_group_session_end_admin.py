"""A closed static member's group, deleted right after the member's session timeout.

librdkafka's admin test does exactly this: static consumers (KIP-345 members send no
LeaveGroup on close) consume, close -- committing their offsets, which keeps a classic
member's session alive, as Kafka does -- and `session.timeout.ms` later DeleteGroups must
find the groups empty. Kafka's session timers fire at the deadline; on a busy broker the
request can be read before the timer task runs, so the coordinator expires what is due before
it answers. To make that order certain, the broker process is stopped (SIGSTOP) across the
deadline while a DeleteGroups waits in its socket, then continued: the request and the timer
are then due at once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests import kafka_wire
from tests.broker_process import BrokerProcess

SESSION_MS = 6000  # Kafka's group.min.session.timeout.ms default, librdkafka's test value
DELETE_GROUPS, DESCRIBE_GROUPS = 42, 15
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND = 68, 69

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        Path(tmp_path_factory.mktemp("session-end")),
        overrides=["group.initial.rebalance.delay.ms=0"],
    ).start()
    try:
        yield b
    finally:
        b.stop()


def _static_member_consumes_and_closes(bootstrap: str, group: str) -> float:
    """A static member reads a topic's 10 records and closes; the monotonic time the close
    returned (its offset commit answered before)."""
    topic = "t-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):
        p.produce(topic, str(i).encode())
    assert p.flush(30) == 0
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": "static-0",
        "session.timeout.ms": SESSION_MS, "auto.offset.reset": "earliest",
    })
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < 10:
        assert time.monotonic() < deadline, f"consumed {got} of 10"
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got += 1
    c.close()
    return time.monotonic()


def _members(bootstrap: str, group: str) -> int:
    d = kafka_wire.call(bootstrap, DESCRIBE_GROUPS, 5,
                        {"groups": [group], "include_authorized_operations": False})
    return len(d.groups[0].members)


def test_delete_groups_before_and_after_a_closed_static_members_session(
    broker: BrokerProcess,
) -> None:
    bootstrap = broker.bootstrap
    group = "static-" + uuid.uuid4().hex[:8]
    closed = _static_member_consumes_and_closes(bootstrap, group)
    admin = AdminClient({"bootstrap.servers": bootstrap})

    # Within the session the member stays (a static member sends no LeaveGroup): Kafka
    # answers NON_EMPTY_GROUP.
    with pytest.raises(KafkaException) as refused:
        admin.delete_consumer_groups([group], request_timeout=15)[group].result(30)
    assert refused.value.args[0].code() == NON_EMPTY_GROUP
    assert _members(bootstrap, group) == 1

    # Stop the broker before the deadline, queue DeleteGroups past it on a few connections,
    # continue the broker: the first one handled deletes the group, the others find it gone.
    socks = [kafka_wire.connect(bootstrap, timeout_s=60) for _ in range(4)]
    answers: list[Any] = []
    try:
        time.sleep(max(0.0, closed + SESSION_MS / 1000 - 1.0 - time.monotonic()))
        assert _members(bootstrap, group) == 1  # asked on a connection of its own
        os.kill(broker.pid, signal.SIGSTOP)
        try:
            time.sleep(max(0.0, closed + SESSION_MS / 1000 + 0.5 - time.monotonic()))
            threads = [
                threading.Thread(target=lambda s=s: answers.append(kafka_wire.call(
                    s, DELETE_GROUPS, 2, {"groups_names": [group]})))
                for s in socks
            ]
            for t in threads:
                t.start()
            time.sleep(0.3)  # the requests are in the sockets
        finally:
            os.kill(broker.pid, signal.SIGCONT)
        for t in threads:
            t.join(30)
    finally:
        for s in socks:
            s.close()
    errors = sorted(a.results[0].error_code for a in answers)
    assert errors == [0, GROUP_ID_NOT_FOUND, GROUP_ID_NOT_FOUND, GROUP_ID_NOT_FOUND], answers
    d = admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)
    assert d.members == [] and d.state.name == "DEAD", d
