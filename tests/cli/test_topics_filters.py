"""`wherry topics describe` partition filters on three brokers in this process (`DevCluster`)
with one follower stopped: kafka-topics' `--under-replicated-partitions`,
`--unavailable-partitions`, `--under-min-isr-partitions` and `--at-min-isr-partitions`."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from wherry.cli.main import main
from wherry.testing.cluster import DevCluster, wait_until

pytestmark = pytest.mark.slow

LINE_RE = re.compile(
    r"^\tTopic: (?P<topic>\S+)\tPartition: (?P<p>\d+)\tLeader: (?P<leader>\d+|none)"
    r"\tReplicas: (?P<replicas>[\d,]*)\tIsr: (?P<isr>[\d,]*)$")


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def filtered(bootstrap: str, pattern: str, flag: str) -> set[tuple[str, int]]:
    """The (topic, partition) lines of `describe --topic pattern flag` (no header lines)."""
    out = ok(run("topics", "describe", "--bootstrap-server", bootstrap, "--topic", pattern,
                 flag))
    found = set()
    for line in out.splitlines():
        m = LINE_RE.match(line)
        assert m is not None, out  # with a filter, only partition lines
        found.add((m["topic"], int(m["p"])))
    return found


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with DevCluster(tmp_path / "cluster", brokers=3,
                    overrides={"auto.leader.rebalance.enable": "false"}) as c:
        c.wait_for_controller()
        yield c


def test_filters_with_one_follower_stopped(cluster: DevCluster) -> None:
    c = cluster
    controller = c.wait_for_controller()
    stopped, a = [x for x in c.broker_ids if x != controller]
    b = controller
    prefix = f"flt-{uuid.uuid4().hex[:8]}"
    rep, off = f"{prefix}-rep", f"{prefix}-off"
    boot = c.bootstrap
    # rep: stopped is a follower of partitions 0 and 1 only; min ISR 2.
    ok(run("topics", "create", "--bootstrap-server", boot, "--topic", rep,
           "--replica-assignment", f"{a}:{stopped},{b}:{stopped},{a}:{b}",
           "--config", "min.insync.replicas=2"))
    # off: the one replica of its partition is on the broker that stops.
    ok(run("topics", "create", "--bootstrap-server", boot, "--topic", off,
           "--replica-assignment", f"{stopped}"))
    c.wait_for_topic(rep, 3)
    c.wait_for_topic(off, 1)
    pattern = f"{prefix}-.*"

    # Healthy: nothing under-replicated or unavailable; every partition at its min ISR.
    assert wait_until(lambda: filtered(boot, pattern, "--under-replicated-partitions") == set(),
                      15)
    assert filtered(boot, pattern, "--unavailable-partitions") == set()
    assert filtered(boot, pattern, "--under-min-isr-partitions") == set()
    assert filtered(boot, pattern, "--at-min-isr-partitions") == {(rep, 0), (rep, 1), (rep, 2),
                                                                 (off, 0)}

    c.stop_broker(stopped)
    live = c.address(a)
    expected_under = {(rep, 0), (rep, 1)}
    assert wait_until(
        lambda: filtered(live, pattern, "--under-replicated-partitions") == expected_under, 20
    ), filtered(live, pattern, "--under-replicated-partitions")
    assert wait_until(
        lambda: filtered(live, pattern, "--unavailable-partitions") == {(off, 0)}, 20
    ), filtered(live, pattern, "--unavailable-partitions")
    assert filtered(live, pattern, "--under-min-isr-partitions") == expected_under | {(off, 0)}
    # Kafka's semantics: the offline partition keeps its last ISR ([stopped]), so it is
    # at its min ISR of 1 as well as under it (no leader).
    assert filtered(live, pattern, "--at-min-isr-partitions") == {(rep, 2), (off, 0)}

    # The unavailable partition's line says so.
    out = ok(run("topics", "describe", "--bootstrap-server", live, "--topic", off,
                 "--unavailable-partitions"))
    m = LINE_RE.match(out.splitlines()[0])
    assert m is not None and m["leader"] == "none", out

    # Back: the filters empty again.
    c.start_broker(stopped)
    assert wait_until(
        lambda: filtered(live, pattern, "--under-replicated-partitions") == set(), 30
    ), filtered(live, pattern, "--under-replicated-partitions")
    assert wait_until(lambda: filtered(live, pattern, "--unavailable-partitions") == set(), 30)
