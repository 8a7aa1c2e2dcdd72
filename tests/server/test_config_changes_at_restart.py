"""A restarted broker finds the config-change notifications still in the store: a topic
deleted since is not applied nor logged, a topic changed several times is applied (and
logged) once."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from tests.broker_process import BrokerProcess, wait_until


def _alter(admin: AdminClient, topic: str, retention_ms: int) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms),
                    incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        assert f.result(20) is None


def _applied(b: BrokerProcess, topic: str) -> int:
    return sum(1 for line in b.log_text().splitlines()
               if line.rstrip().endswith(f"applied config change for topic {topic}")
               or f"applied config change for topic {topic} " in line)


def test_notifications_replayed_at_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "b").start()
    try:
        admin = AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0})
        for t in ("events", "kept"):
            admin.create_topics([NewTopic(t, 1, 1, config={"retention.ms": "100000"})])[t] \
                .result(20)
            for ms in (200_000, 300_000):
                _alter(admin, t, ms)
        # (changes found together are applied once: one or two lines each)
        assert wait_until(lambda: _applied(b, "events") >= 1 and _applied(b, "kept") >= 1, 20)
        admin.delete_topics(["events"])["events"].result(20)
        assert wait_until(lambda: "events" not in admin.list_topics(timeout=5).topics, 20)
        # Gone from the metadata first; the store's nodes go at the deletion's end (as in
        # Kafka, a deletion still pending at the stop resumes at the restart).
        assert wait_until(
            lambda: "deletion of topic events completed" in b.log_text(), 20
        ), b.log_text()[-3000:]
        assert b.stop() == 0, b.log_text()[-3000:]

        b.start()
        assert wait_until(lambda: _applied(b, "kept") >= 1, 20), b.log_text()[-3000:]
        time.sleep(2)  # anything else the listener would still do at start
        assert _applied(b, "kept") == 1, b.log_text()
        assert _applied(b, "events") == 0, b.log_text()
        # The kept topic's value is the last one set; changes after the start apply as ever.
        _alter(admin := AdminClient({"bootstrap.servers": b.bootstrap, "log_level": 0}),
               "kept", 400_000)
        assert wait_until(lambda: _applied(b, "kept") == 2, 20)
        [entries] = [f.result(20) for f in admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, "kept")]).values()]
        assert entries["retention.ms"].value == "400000"
    finally:
        assert b.stop() == 0, b.log_text()[-3000:]
