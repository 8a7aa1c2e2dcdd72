"""Mistakes at `wherry server`'s start: each prints one `Error:` line naming the cause (which
listener and port, which path and why, which process holds the lock), exits 1, and shows no
traceback unless `--log-level DEBUG`. Real processes, real sockets, real files."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from wherry.testing.zookeeper import ZooKeeperServer

RUN_TIMEOUT_S = 60
# Root passes every permission check; without these capabilities it meets them as anyone.
NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@dataclass
class Setup:
    """A start-up mistake: the arguments after `wherry server`, a command prefix, and the
    words the Error line must hold."""

    args: list[str]
    expect: list[str]
    prefix: list[str]
    cleanup: Callable[[], object] | None = None


def _run(args: list[str], prefix: Sequence[str] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "wherry", "server", *args],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _base(log_dir: Path, port: int = 0) -> list[str]:
    return ["--listeners", f"PLAINTEXT://127.0.0.1:{port}", "--log-dirs", str(log_dir),
            "--override", "http.listeners="]


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield int(s.getsockname()[1])


def port_in_use(tmp: Path, port: int) -> Setup:
    return Setup(_base(tmp / "data", port),
                 ["listener PLAINTEXT", f"127.0.0.1:{port}", f"port {port} is already in use"], [])


def log_dir_is_a_file(tmp: Path, _: int) -> Setup:
    (tmp / "data").write_text("not a dir")
    return Setup(_base(tmp / "data"), [f"log dir {tmp / 'data'}", "is not a directory"], [])


def log_dir_under_a_file(tmp: Path, _: int) -> Setup:
    (tmp / "file").write_text("")
    d = tmp / "file" / "data"
    return Setup(_base(d), [f"log dir {d}", "a part of its path is not a directory"], [])


def log_dir_unreadable(tmp: Path, _: int) -> Setup:
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    (tmp / "data").mkdir()
    (tmp / "data").chmod(0)
    prefix = NO_DAC if os.geteuid() == 0 else []
    return Setup(_base(tmp / "data"), [f"log dir {tmp / 'data'}", "permission denied"], prefix)


def log_dir_locked_by_another_broker(tmp: Path, _: int) -> Setup:
    first = BrokerProcess(tmp / "data").start()
    assert first.proc is not None
    return Setup(_base(tmp / "data"),
                 [f"log dir {tmp / 'data'} is locked by process {first.proc.pid}"], [],
                 cleanup=first.stop)


def latin1_properties_bad_value(tmp: Path, _: int) -> Setup:
    # One Latin-1 byte (0xE9, é) in a comment, and in a value the broker refuses: read as
    # Java reads it, the value is quoted as written.
    path = tmp / "server.properties"
    path.write_bytes(b"# caf\xe9\nbroker.id=1\xe9\nlog.dirs=" + str(tmp / "data").encode() + b"\n")
    return Setup([str(path), "--override", "http.listeners="],
                 ["Invalid value 1\u00e9 for configuration broker.id"], [])


def missing_properties_file(tmp: Path, _: int) -> Setup:
    return Setup([str(tmp / "nope.properties")],
                 [f"properties file {tmp / 'nope.properties'} does not exist"], [])


def properties_file_is_a_directory(tmp: Path, _: int) -> Setup:
    (tmp / "conf").mkdir()
    return Setup([str(tmp / "conf")], [f"properties file {tmp / 'conf'} is a directory"], [])


def malformed_unicode_escape(tmp: Path, _: int) -> Setup:
    path = tmp / "server.properties"
    path.write_bytes(b"broker.id=0\nlog.dirs=/tmp/x\\u00G9\n")
    return Setup([str(path)], [f"properties file {path}", "malformed \\uxxxx encoding"], [])


CASES: list[Callable[[Path, int], Setup]] = [
    port_in_use,
    log_dir_is_a_file,
    log_dir_under_a_file,
    log_dir_unreadable,
    log_dir_locked_by_another_broker,
    latin1_properties_bad_value,
    missing_properties_file,
    properties_file_is_a_directory,
    malformed_unicode_escape,
]


def _error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("Error:")]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_start_mistake_is_one_error_line(
    case: Callable[[Path, int], Setup], tmp_path: Path, held_port: int
) -> None:
    setup = case(tmp_path, held_port)
    try:
        r = _run(setup.args, setup.prefix)
    finally:
        if setup.cleanup is not None:
            setup.cleanup()
        if (tmp_path / "data").is_dir():
            (tmp_path / "data").chmod(0o755)
    output = r.stdout + r.stderr
    assert r.returncode == 1, output
    assert "Traceback" not in output, output
    errors = _error_lines(output)
    assert len(errors) == 1, output
    for words in setup.expect:
        assert words in errors[0], (words, errors[0])


def test_zookeeper_broker_started_twice_names_the_lock_holder(
    tmp_path: Path, zookeeper_server: ZooKeeperServer
) -> None:
    """The same broker started twice on ZooKeeper: the second finds the log dir locked."""
    zk = f"{zookeeper_server.connect_string}/start-errors-{uuid.uuid4().hex[:8]}"
    first = BrokerProcess(tmp_path / "data", overrides=[f"zookeeper.connect={zk}"]).start()
    try:
        assert first.proc is not None
        r = _run([*_base(tmp_path / "data"), "--zookeeper", zk])
        output = r.stdout + r.stderr
        assert r.returncode == 1 and "Traceback" not in output, output
        (line,) = _error_lines(output)
        assert f"log dir {tmp_path / 'data'} is locked by process {first.proc.pid}" in line, line
        assert (tmp_path / "data" / ".lock").read_text().strip() == str(first.proc.pid)
    finally:
        first.stop()


def test_debug_log_level_shows_the_traceback(tmp_path: Path, held_port: int) -> None:
    r = _run([*_base(tmp_path / "data", held_port), "--log-level", "DEBUG"])
    output = r.stdout + r.stderr
    assert r.returncode == 1
    assert "Traceback" in output
    assert len(_error_lines(output)) == 1
