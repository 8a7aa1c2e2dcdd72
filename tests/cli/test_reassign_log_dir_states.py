"""Kafka's log-dir move states and their sentences (`reassign_log_dirs.move_status_lines`),
and the error text of a broker's answer."""

from __future__ import annotations

from wherry.cli.kafka_errors import kafka_error_text
from wherry.cli.reassign_log_dirs import ReplicaDirs, move_status_lines


def test_every_state_in_replica_order() -> None:
    targets = {("t", 0, 1): "/d/b", ("t", 0, 2): "/d/b", ("t", 1, 1): "/d/b",
               ("t", 2, 1): "/d/b", ("t", 3, 1): "/d/b", ("t", 4, 1): "/d/b/",
               ("u", 0, 1): "/d/b"}
    found = {
        ("t", 0, 1): ReplicaDirs("/d/a", "/d/b"),  # active, to the target
        ("t", 0, 2): ReplicaDirs("/d/a", "/d/c"),  # active, elsewhere
        ("t", 1, 1): ReplicaDirs("/d/a", None),    # no move under way
        ("t", 2, 1): ReplicaDirs(None, "/d/b"),    # current log offline
        ("t", 4, 1): ReplicaDirs("/d/b", None),    # done (a trailing slash is the same dir)
    }
    lines, done = move_status_lines(targets, found)
    assert lines == [
        "Reassignment of replica t-0-1 is still in progress.",
        "Partition t-0 on broker 2 is being moved to log dir /d/c instead of /d/b.",
        "Partition t-1 on broker 1 is not being moved from log dir /d/a to /d/b.",
        "Partition t-2 is not found in any live log dir on broker 1. There is likely an "
        "offline log directory on the broker.",
        "Partition t-3 cannot be found in any live log directory on broker 1.",
        "Reassignment of replica t-4-1 completed successfully.",
        "Partition u-0 cannot be found in any live log directory on broker 1.",
    ]
    assert not done


def test_done_when_every_move_completed_or_stopped() -> None:
    targets = {("t", 0, 1): "/d/b", ("t", 1, 1): "/d/b"}
    found = {("t", 0, 1): ReplicaDirs("/d/b", None), ("t", 1, 1): ReplicaDirs("/d/a", None)}
    assert move_status_lines(targets, found)[1]
    assert move_status_lines({}, {}) == ([], True)


def test_error_text_is_kafkas_exception() -> None:
    assert kafka_error_text(57) == (
        "org.apache.kafka.common.errors.LogDirNotFoundException: The user-specified log "
        "directory is not found in the broker config.")
    assert kafka_error_text(56).startswith(
        "org.apache.kafka.common.errors.KafkaStorageException: ")
    assert kafka_error_text(31).startswith(
        "org.apache.kafka.common.errors.ClusterAuthorizationException: ")
