"""The fuzzer as a test: a bounded coverage-guided run over every target, a bounded run over
real sockets, and every committed regression input replayed through the decoders (in a child
process: a native abort must not take pytest with it) and over a socket to a real broker,
which must answer a client afterwards.

Inputs under `regressions/` crashed (or hung) the broker once; those under `findings/` made a
handler fail with a traceback (the connection closed, the broker lived on).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.run import REGRESSIONS, fuzz_in_process, input_files
from tests.fuzz.socket_mode import (
    SENDABLE,
    Driver,
    ServerProcess,
    _prepare,
    fuzz_over_sockets,
)
from tests.fuzz.targets import target_of

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
FINDINGS = HERE / "findings"
REGRESSION_FILES = input_files([REGRESSIONS]) if REGRESSIONS.is_dir() else []
FINDING_FILES = input_files([FINDINGS]) if FINDINGS.is_dir() else []
SENT_FILES = [f for f in REGRESSION_FILES + FINDING_FILES
              if target_of(f.read_bytes()) in SENDABLE]

# Crashes the decoders do not survive yet: file name -> what happens.
UNFIXED: dict[str, str] = {}


def _marks(path: Path) -> list[pytest.MarkDecorator]:
    reason = UNFIXED.get(path.name)
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


def _params(files: list[Path]) -> list[object]:
    return [pytest.param(f, id=f.name, marks=_marks(f)) for f in files]


def _env() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), path) if p)}


@pytest.mark.slow
def test_fuzz_budget_in_process_finds_no_crash_or_hang(tmp_path: Path) -> None:
    """50 s of coverage-guided fuzzing of every target through an in-process broker."""
    summary = fuzz_in_process(tmp_path, inputs=50_000_000, seconds=50, echo=False)
    print(summary.line())
    assert summary.inputs > 10_000, summary.line()
    assert summary.cov > 1000, summary.line()
    assert not summary.crashes, (summary.line(), summary.crashes,
                                 [(tmp_path / "crashes" / f"{c}.log").read_text()[-3000:]
                                  for c in summary.crashes[:2]])
    assert not summary.hangs, summary.hangs


@pytest.mark.slow
def test_fuzz_budget_over_sockets_answers_every_input(tmp_path: Path) -> None:
    """20 s of inputs to a `wherry server`: each answered or its connection closed within 1 s,
    the process alive, its RSS within the bound."""
    result = fuzz_over_sockets(tmp_path, inputs=10_000_000, seconds=20, echo=False)
    print(result.line())
    assert result.inputs > 5_000, result.line()
    assert result.answered > 100 and result.closed > 100, result.line()
    assert not result.failures, (result.line(), result.failures)


@pytest.mark.parametrize("path", _params(REGRESSION_FILES + FINDING_FILES))
def test_regression_input_through_the_decoders(path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", "--replay", str(path), "--no-broker"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env(),
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:])


class _Brokers:
    """One `wherry server` for the module's inputs, started again after one died."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started = 0
        self.server: ServerProcess | None = None

    def current(self) -> ServerProcess:
        if self.server is None or not self.server.alive:
            if self.server is not None:
                self.server.stop()
            self.started += 1
            self.server = ServerProcess(self.root / f"broker-{self.started}", 100 * 1024 * 1024)
            _prepare(self.server)
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


@pytest.fixture(scope="module")
def brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Brokers]:
    b = _Brokers(tmp_path_factory.mktemp("fuzz-broker"))
    try:
        yield b
    finally:
        b.stop()


def _still_serves(server: ServerProcess) -> None:
    """A new client connection gets Metadata from the broker (confluent-kafka)."""
    from confluent_kafka.admin import AdminClient

    host, port = server.address(0)
    md = AdminClient({"bootstrap.servers": f"{host}:{port}"}).list_topics(timeout=10)
    assert "fuzz" in md.topics


@pytest.mark.parametrize("path", _params(SENT_FILES))
def test_regression_input_over_a_socket(brokers: _Brokers, path: Path) -> None:
    server = brokers.current()
    data = path.read_bytes()
    driver = Driver(server, deadline_s=1.0)
    try:
        started = time.monotonic()
        outcome, detail = driver.send(data)
        took = time.monotonic() - started
    finally:
        driver.close()
    until = time.monotonic() + 0.5
    while outcome == "closed" and server.alive and time.monotonic() < until:
        time.sleep(0.05)  # a process that aborts closes its connections first
    if not server.alive:  # the next input gets a broker of its own
        pytest.fail(f"the broker died ({outcome}: {detail}):\n" + "".join(list(server.lines)[-40:]))
    assert outcome in ("answered", "closed", "waiting"), (outcome, detail)
    assert took < 5, took
    _still_serves(server)


def test_the_harness_sees_a_hang() -> None:
    """The socket driver reports an input nobody answers as a hang: a listener that reads and
    never answers stands in for the broker."""
    listener = socket.create_server(("127.0.0.1", 0))
    conns: list[socket.socket] = []

    class Silent:
        def address(self, index: int) -> tuple[str, int]:
            return listener.getsockname()[:2]

    import threading

    def accept() -> None:
        while True:
            try:
                c, _ = listener.accept()
            except OSError:
                return
            conns.append(c)

    threading.Thread(target=accept, daemon=True).start()
    from wherry.protocol.codec import encode_request

    frame = encode_request(3, 12, 1, {"topics": None})[4:]
    driver = Driver(Silent(), deadline_s=0.3)  # type: ignore[arg-type]
    try:
        assert driver.send(b"\x00" + frame)[0] == "hang"
    finally:
        driver.close()
        listener.close()
        for c in conns:
            c.close()


def test_seed_corpus_holds_every_served_version_with_both_headers() -> None:
    """One seed per API key x version the broker serves, with the request header its version
    uses and with the other one (`python -m tests.fuzz.seed` rebuilds them)."""
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    names = {p.name for p in (HERE / "corpus").iterdir()}
    missing = [
        f"k{key}v{version}{suffix}"
        for key, (lo, hi) in SUPPORTED_VERSIONS.items()
        for version in range(lo, hi + 1)
        for suffix in ("-", "-hdr-")
        if not any(n.startswith(f"request-k{key}v{version}{suffix}") for n in names)
    ]
    assert not missing
