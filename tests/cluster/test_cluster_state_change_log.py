"""SPEC H12 on a running cluster: the controller and every broker write their state changes to
`<data dir>/state-change.log`, one parseable line each, and the files merge by time."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import AdminClient, NewTopic

from wherry.runtime.state_change_log import STATE_CHANGE_LOG_FILE, merge_state_change_logs
from wherry.testing.cluster import DevCluster, wait_until


def test_controller_and_brokers_log_each_change_and_the_logs_merge(
    wherry_cluster: DevCluster,
) -> None:
    c = wherry_cluster
    controller = c.wait_for_controller()
    t = f"scl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": c.bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(t, 3, 3)])[t].result(20)
    c.wait_for_topic(t, 3)
    files = [c.broker(b).config.data_dir / STATE_CHANGE_LOG_FILE for b in c.broker_ids]
    victim = next(b for b in c.running if b != controller)
    c.stop_broker(victim, controlled=False)  # a failure: the survivors alone log the moves

    def merged() -> list:  # type: ignore[type-arg]
        return [r for r in merge_state_change_logs(files) if r.topic == t]

    def leader_moved() -> bool:
        kinds = {r.node_kind for r in merged() if r.is_change and r.leader_epoch == 1}
        return kinds == {"Controller", "Broker"}

    assert wait_until(leader_moved, 10)
    records = merged()
    assert records == sorted(records, key=lambda r: r.timestamp_ms)
    ctl = [r for r in records if r.node_kind == "Controller" and r.is_change]
    # The controller took every partition NonExistent -> New -> Online.
    for p in range(3):
        states = [
            (r.old_state, r.new_state) for r in ctl if r.partition == p and r.kind == "Partition"
        ]
        assert ("NonExistentPartition", "NewPartition") in states
        assert ("NewPartition", "OnlinePartition") in states
    assert all(r.node_id == controller and r.controller_epoch is not None for r in ctl)
    # Each broker logged becoming leader or follower for each partition, in its own file.
    for b in c.broker_ids:
        mine = [
            r for r in merge_state_change_logs([files[b]])
            if r.topic == t and r.node_kind == "Broker" and r.is_change
        ]
        assert all(r.node_id == b for r in mine)
        assert {r.partition for r in mine if r.new_state in ("Leader", "Follower")} == {0, 1, 2}
    # After the stop, survivors logged the new leadership with a higher leader epoch.
    moved = [r for r in records if r.node_kind == "Broker" and r.leader_epoch == 1]
    assert moved and all(r.node_id != victim for r in moved)
