"""Run a real `wherry server` as a child process for tests (bounded, stopped by its PID)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

_READY = re.compile(r"ready on (\S+)")


class BrokerProcess:
    def __init__(
        self,
        data_dir: Path,
        *,
        broker_id: int = 0,
        port: int = 0,
        overrides: Sequence[str] = (),
        start_timeout_s: float = 30.0,
        listeners: str | None = None,
        properties: Path | None = None,
    ) -> None:
        """`listeners` replaces the default PLAINTEXT://127.0.0.1:<port>; `addresses` then
        holds each listener's bound host:port, in order, and `bootstrap` the first."""
        self.listeners = listeners
        self.properties = properties
        self.addresses: list[str] = []
        self.data_dir = data_dir
        self.broker_id = broker_id
        self.port = port
        self.overrides = list(overrides)
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.bootstrap = ""

    def start(self) -> BrokerProcess:
        cmd = [
            sys.executable,
            "-m",
            "wherry",
            "server",
            "--broker-id",
            str(self.broker_id),
            "--listeners",
            self.listeners or f"PLAINTEXT://127.0.0.1:{self.port}",
            "--log-dirs",
            str(self.data_dir),
            "--override",
            "http.listeners=",  # none unless the overrides ask (`wherry server` takes 9644)
        ]
        if self.properties is not None:
            cmd.insert(4, str(self.properties))
        for o in self.overrides:
            cmd += ["--override", o]
        self.output = []
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        ready = threading.Event()

        def pump() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.output.append(line)
                m = _READY.search(line)
                if m:
                    self.addresses = m.group(1).split(",")
                    self.bootstrap = self.addresses[0]
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(self.start_timeout_s) or not self.bootstrap:
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.output[-50:]))
        self.port = int(self.bootstrap.rsplit(":", 1)[1])
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM (graceful shutdown) and wait; SIGKILL if it does not exit in time."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        rc = self.proc.returncode
        self.proc = None
        return rc if rc is not None else -9

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def log_text(self) -> str:
        return "".join(self.output)


def wait_until(pred: object, timeout_s: float = 10.0, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():  # type: ignore[operator]
            return True
        time.sleep(interval_s)
    return bool(pred())  # type: ignore[operator]
