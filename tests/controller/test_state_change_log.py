"""The state-change log: the line format, the file a broker's data dir gets, parsing back and
merging several brokers' logs in time order."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from wherry.runtime.state_change_log import (
    STATE_CHANGE_LOG_FILE,
    add_state_change_listener,
    attach_state_change_log,
    batched_lines,
    log_broker_partition_change,
    log_controller_partition_change,
    log_controller_replica_change,
    merge_state_change_logs,
    parse_state_change_line,
    state_change_line,
    state_change_logger,
)

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")


def test_lines_parse_back(tmp_path: Path) -> None:
    handle = attach_state_change_log(tmp_path)
    try:
        log_controller_partition_change(
            1, 3, "orders.v2-x", 12, "OfflinePartition", "OnlinePartition",
            leader=2, leader_epoch=5, isr=[2, 3], zk_version=4,
        )
        log_controller_replica_change(1, 3, "orders.v2-x", 12, 3, "OnlineReplica",
                                      "OfflineReplica", leader=2, leader_epoch=6, isr=[2])
        log_broker_partition_change(2, "orders.v2-x", 12, "Follower", "Leader", leader=2,
                                    leader_epoch=5, isr=[2, 3], controller_epoch=3,
                                    start_offset=120)
        state_change_logger.warning("[Broker id=2] Ignoring a request\nsecond line")
        logging.getLogger("wherry.other").warning("not a state change")
    finally:
        handle.detach()
    lines = (tmp_path / STATE_CHANGE_LOG_FILE).read_text().splitlines()
    assert len(lines) == 4 and all(ISO_MS.match(line) for line in lines)
    assert lines[0].endswith(
        "INFO [Controller id=1 epoch=3] Partition orders.v2-x-12 OfflinePartition -> "
        "OnlinePartition leader=2 leader_epoch=5 isr=[2,3] controller_epoch=3 zk_version=4")
    a, b, c, d = (parse_state_change_line(line) for line in lines)
    assert a is not None and a.is_change
    assert (a.node_kind, a.node_id, a.node_epoch, a.kind) == ("Controller", 1, 3, "Partition")
    assert (a.topic, a.partition, a.old_state, a.new_state) == (
        "orders.v2-x", 12, "OfflinePartition", "OnlinePartition")
    assert (a.leader, a.leader_epoch, a.isr, a.controller_epoch) == (2, 5, (2, 3), 3)
    assert a.fields["zk_version"] == "4"
    assert b is not None and (b.kind, b.replica, b.new_state, b.isr) == (
        "Replica", 3, "OfflineReplica", (2,))
    assert c is not None and (c.node_kind, c.node_id, c.node_epoch) == ("Broker", 2, None)
    assert (c.old_state, c.new_state, c.fields["start_offset"]) == ("Follower", "Leader", "120")
    assert d is not None and not d.is_change and d.level == "WARNING"
    assert d.message == "Ignoring a request\\nsecond line"
    assert parse_state_change_line("[2024-01-01 00:00:00,000] INFO something") is None


def test_none_fields_and_empty_isr(tmp_path: Path) -> None:
    handle = attach_state_change_log(tmp_path)
    try:
        log_controller_partition_change(0, 1, "t", 0, "NonExistentPartition", "NewPartition",
                                        leader=None, leader_epoch=None, isr=None)
        log_controller_partition_change(0, 1, "t", 0, "OnlinePartition", "OfflinePartition",
                                        leader=-1, leader_epoch=3, isr=[])
    finally:
        handle.detach()
    recs = merge_state_change_logs([tmp_path / STATE_CHANGE_LOG_FILE])
    assert [(r.leader, r.leader_epoch, r.isr) for r in recs] == [(None, None, None),
                                                                 (-1, 3, ())]


def test_per_node_files_and_merge(tmp_path: Path) -> None:
    dirs = {n: tmp_path / f"broker-{n}" for n in (1, 2)}
    handles = [attach_state_change_log(d, node_id=n) for n, d in dirs.items()]
    again = attach_state_change_log(dirs[1], node_id=1)
    assert again is handles[0]
    again.detach()
    try:
        for i in range(3):
            log_controller_partition_change(1, 4, "a", i, "NewPartition", "OnlinePartition",
                                             leader=1, leader_epoch=0, isr=[1, 2])
            log_broker_partition_change(2, "a", i, "None", "Follower", leader=1,
                                        leader_epoch=0, isr=[1, 2], controller_epoch=4)
            log_broker_partition_change(1, "b", i, "None", "Leader", leader=1,
                                        leader_epoch=0, isr=[1], controller_epoch=4)
    finally:
        for h in handles:
            h.detach()
    one = (dirs[1] / STATE_CHANGE_LOG_FILE).read_text().splitlines()
    two = (dirs[2] / STATE_CHANGE_LOG_FILE).read_text().splitlines()
    assert len(one) == 6 and len(two) == 3  # each file holds only its node's records
    assert all("id=2]" in line for line in two)
    files = [dirs[1] / STATE_CHANGE_LOG_FILE, dirs[2] / STATE_CHANGE_LOG_FILE]
    merged = merge_state_change_logs(files)
    assert len(merged) == 9
    stamps = [r.timestamp_ms for r in merged]
    assert stamps == sorted(stamps)
    only_a = merge_state_change_logs(files, topic="a", partitions={0, 2})
    assert sorted((r.node_id, r.partition) for r in only_a) == [(1, 0), (1, 2), (2, 0), (2, 2)]
    assert [r.partition for r in only_a if r.node_id == 2] == [0, 2]  # each file's order kept
    window = merge_state_change_logs(files, start_ms=stamps[0], end_ms=stamps[0])
    assert window and all(r.timestamp_ms == stamps[0] for r in window)


def test_merge_orders_out_of_phase_logs() -> None:
    a = ["2025-01-01T00:00:00.100Z INFO [Broker id=1] Partition t-0 None -> Leader leader=1",
         "2025-01-01T00:00:00.300Z INFO [Broker id=1] Partition t-0 Leader -> Follower leader=2"]
    b = ["2025-01-01T00:00:00.050Z INFO [Controller id=2 epoch=9] Partition t-0 "
         "NewPartition -> OnlinePartition leader=1 leader_epoch=0 isr=[1,2]",
         "garbage line",
         "2025-01-01T00:00:00.200Z INFO [Controller id=2 epoch=9] Partition t-0 "
         "OnlinePartition -> OnlinePartition leader=2 leader_epoch=1 isr=[2]"]
    merged = merge_state_change_logs([a, b])
    assert [(r.node_kind, r.leader) for r in merged] == [
        ("Controller", 1), ("Broker", 1), ("Controller", 2), ("Broker", 2)]
    assert merged[0].timestamp_ms == 1735689600050


def test_batched_lines_are_one_record_but_the_same_lines_in_order(tmp_path: Path) -> None:
    """`batched_lines`: a LeaderAndIsr of thousands of partitions costs one log record, yet the
    file holds one parseable line per change, in call order: a record logged inside the block
    (a warning) first writes what was collected; a listener hears each line."""
    records: list[logging.LogRecord] = []
    heard: list[str] = []
    counter = logging.Handler()
    counter.emit = records.append  # type: ignore[method-assign]
    state_change_logger.addHandler(counter)
    handle = attach_state_change_log(tmp_path, node_id=2)
    remove = add_state_change_listener(2, heard.append)
    try:
        with batched_lines():
            for p in range(3):
                log_broker_partition_change(2, "t", p, "Follower", "Leader", leader=2,
                                            leader_epoch=5, isr=[2], controller_epoch=3)
            state_change_line(logging.INFO, "[Broker id=2] Leader %s\nstarts", "t-3")
            state_change_logger.warning("[Broker id=2] something odd")
            log_broker_partition_change(2, "t", 9, "None", "Follower", leader=1,
                                        leader_epoch=1, isr=[1], controller_epoch=3)
        log_broker_partition_change(2, "t", 10, "None", "Follower", leader=1,
                                    leader_epoch=1, isr=[1], controller_epoch=3)
    finally:
        remove()
        handle.detach()
        state_change_logger.removeHandler(counter)
    lines = (tmp_path / STATE_CHANGE_LOG_FILE).read_text().splitlines()
    assert len(lines) == 7 and all(ISO_MS.match(line) for line in lines)
    parsed = [parse_state_change_line(line) for line in lines]
    assert [p.partition for p in parsed if p is not None and p.is_change] == [0, 1, 2, 9, 10]
    assert lines[3].endswith("INFO [Broker id=2] Leader t-3\\nstarts")  # escaped, one line
    assert lines[4].endswith("WARNING [Broker id=2] something odd")
    assert heard == lines
    assert len(records) == 4  # [0, 1, 2, t-3], the warning, [9], [10]: not one per line
