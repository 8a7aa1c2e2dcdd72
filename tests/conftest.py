"""Shared fixtures: a real broker process for client tests, a real ZooKeeper; the run's last
line groups the skipped tests by what they need."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.helpers import running_zookeeper
from wherry.testing.tmpfs import TmpfsUnavailable, mount_tmpfs, unmount
from wherry.testing.zookeeper import ZooKeeperServer


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One `wherry server` for the session (port chosen by the OS)."""
    b = BrokerProcess(
        tmp_path_factory.mktemp("broker"), overrides=["log.retention.check.interval.ms=1000"]
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def broker_bootstrap(broker: BrokerProcess) -> str:
    return broker.bootstrap


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own for a test that restarts or kills it."""
    b = BrokerProcess(tmp_path / "data")
    try:
        yield b
    finally:
        b.kill()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """`small_disk(size_bytes)`: a tmpfs of that size mounted under the test's directory (a
    disk that fills), unmounted after the test; the test is skipped where mounting is refused."""
    mounted: list[Path] = []

    def mount(size_bytes: int) -> Path:
        path = tmp_path / f"small-{len(mounted)}"
        try:
            mount_tmpfs(path, size_bytes)
        except TmpfsUnavailable as e:
            pytest.skip(str(e))
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        unmount(path)


@pytest.fixture(scope="session")
def zookeeper_server() -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the session's store and controller tests (each test works in a
    chroot of its own). Skipped where ZooKeeper is not installed, failed in CI."""
    with running_zookeeper() as server:
        yield server



# What a skipped test needs, recognized in its skip reason -> how the summary names it.
SKIP_GROUPS: tuple[tuple[str, str], ...] = (
    ("zookeeper", "need ZooKeeper (apt-get install zookeeper)"),
    ("kcat", "need kcat (apt-get install kcat)"),
    ("chromium", "need Chromium (apt-get install chromium)"),
    ("pyspark", "need PySpark (pip install -e '.[spark]')"),
)


def skip_group(reason: str) -> str:
    low = reason.lower()
    for needle, group in SKIP_GROUPS:
        if needle in low:
            return group
    return reason.removeprefix("Skipped: ").strip()


def skip_summary(reasons: Iterable[str]) -> str | None:
    """One line: `skipped: 46 need ZooKeeper (apt-get install zookeeper), 3 need kcat (...)`,
    the largest group first; None when nothing was skipped."""
    counts = Counter(skip_group(r) for r in reasons)
    if not counts:
        return None
    return "skipped: " + ", ".join(f"{n} {g}" for g, n in counts.most_common())


_SKIP_LINE = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    reasons = []
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        if isinstance(longrepr, tuple) and len(longrepr) == 3:
            reasons.append(str(longrepr[2]))
        else:
            reasons.append(str(longrepr))
    line = skip_summary(reasons)
    if line is not None:
        terminalreporter.config.stash[_SKIP_LINE] = line


def pytest_unconfigure(config: pytest.Config) -> None:
    """After pytest's own summary: the run's last line."""
    line = config.stash.get(_SKIP_LINE, None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line is not None and reporter is not None:
        reporter.write_line(line)


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, bounded by a cgroup's CPU quota
    (a container's `--cpus`), where one is set."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
    except (OSError, ValueError):
        return cores
    if quota == "max":
        return cores
    return max(1, min(cores, int(int(quota) / int(period))))


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker per usable core (not per core the host has)."""
    return usable_cores()


# The longest files of the run (minutes each: a Spark cluster, the simulator's sweeps).
LONGEST_FIRST = ("spark_cluster", "sim", "spark")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding a slow test run first, the longest directories before them: with the run
    spread over workers (``-n``), the long suites start at once instead of ending the run on
    one busy worker."""
    here = Path(__file__).parent
    slow_files = {item.path for item in items if item.get_closest_marker("slow") is not None}

    def rank(item: pytest.Item) -> tuple[int, int]:
        parts = item.path.relative_to(here).parts if item.path.is_relative_to(here) else ()
        top = parts[0] if len(parts) > 1 else ""
        longest = LONGEST_FIRST.index(top) if top in LONGEST_FIRST else len(LONGEST_FIRST)
        return (item.path not in slow_files, longest)

    items.sort(key=rank)
