"""A broker for the CLI tests.

`cli_bootstrap` is the shared session broker (`broker_bootstrap` from tests/conftest.py) when
that fixture exists; otherwise it runs its own `wherry server` subprocess on a port the OS
chooses (listener port 0: the address comes from its "ready on" line, awaited with a bound;
stopped by PID at the end of the session). Setting WHERRY_TEST_BOOTSTRAP=host:port uses an
already running broker instead.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
_READY = re.compile(r"ready on (\S+)")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    def __init__(self, data_dir: Path) -> None:
        self.address = ""  # host:port, from the "ready on" line
        self.data_dir = data_dir
        self.stderr_path = data_dir / "server.stderr"
        self.stdout_lines: list[str] = []
        self.ready = threading.Event()
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from wherry.cli.main import main; main()", "server",
             "--listeners", "PLAINTEXT://127.0.0.1:0",
             "--log-dirs", str(data_dir / "logs")],
            stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL,
        )
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.stdout_lines.append(line)
            m = _READY.search(line)
            if m:
                self.address = m.group(1).split(",")[0]
                self.ready.set()

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            text = self.stderr_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"wherry server exited with {self.proc.returncode}:\n"
                                   f"{self.stderr_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"wherry server not ready after {timeout_s} s:\n"
                                   f"{self.stderr_tail()}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        self._stderr.close()


@pytest.fixture(scope="session")
def cli_bootstrap(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    external = os.environ.get("WHERRY_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    try:
        shared = request.getfixturevalue("broker_bootstrap")
    except pytest.FixtureLookupError:
        shared = None
    if shared is not None:
        yield str(shared)
        return
    server = ServerProcess(tmp_path_factory.mktemp("cli-broker"))
    try:
        server.wait_ready(READY_TIMEOUT_S)
        yield server.address
    finally:
        server.stop()


@pytest.fixture
def unreachable_bootstrap() -> str:
    """An address nothing listens on (for 'unreachable broker' tests)."""
    return f"127.0.0.1:{free_port()}"


@pytest.fixture
def topic_name() -> str:
    return f"cli-{uuid.uuid4().hex[:10]}"
