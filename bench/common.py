"""Shared pieces of the benchmark: broker processes, worker processes, wire encoding.

Everything here is loopback-only and bounded in time: brokers are started on a free port
with a temporary data directory and stopped by their PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import json
import mmap
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

MIB: Final = 1 << 20
REPO_ROOT: Final = Path(__file__).resolve().parent.parent


@dataclass(slots=True)
class BrokerRuntime:
    """How broker processes run: from which source tree (`python -m wherry` in its root), and
    whether they keep compiled bytecode in `pycache` (`PYTHONPYCACHEPREFIX`, overriding a
    `PYTHONDONTWRITEBYTECODE` of the environment, as an installed package has its bytecode;
    None: the environment decides)."""

    tree: Path = REPO_ROOT
    pycache: Path | None = None


BROKER_RUNTIME = BrokerRuntime()

_SIZE: Final = struct.Struct(">i")
_READY: Final = re.compile(r"ready on (\S+)")
_BOUND: Final = re.compile(r"listeners bound on ports \S+ after ([0-9.]+) ms of process CPU")


class BenchError(Exception):
    """A benchmark step failed (broker did not start, a worker failed or timed out...)."""


# --------------------------------------------------------------------------------------------
# Ports, processes
# --------------------------------------------------------------------------------------------


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(metrics_url: str) -> str:
    """A broker's `/metrics` page, as text."""
    with urllib.request.urlopen(metrics_url, timeout=10) as resp:
        return str(resp.read().decode())


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB, from /proc/PID/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise BenchError(f"no VmRSS for pid {pid}")


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (all its threads), from /proc/PID/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/PID/stat."""
    return sum(cpu_split(pid))


def pretouch_page_cache(directory: Path, mib: int) -> float:
    """Touch `mib` MiB of fresh memory and free it again; the seconds it took. On a VM whose
    memory the host backs on first touch and takes back soon after the guest frees it
    (Firecracker with a free-page-reporting balloon, as here), the first write into fresh guest
    memory costs 5-15x a write into pages just freed (1.5 GB: 1.5-4 s against 0.27 s of system
    CPU, measured with dd). A produce run right after this gets recycled pages, so what a row
    measures is the broker, not how much NEW memory its run happens to touch (an RF 3 run
    touches three times as much as an acks=1 one, and a row after a row that wrote GBs finds
    none of the recycled pages left).

    "Right after" matters: Linux reports freed pages to the host 2 s after they are freed
    (page_reporting's delay), and the host takes them back. Measured here, 1.5 GB written
    again 0.5-1 s after it was freed: 0.19 ms of CPU per MB; 2 s after: 0.48; 4 s: 0.79;
    8 s: 1.16; fresh memory: 1.75. So workers call this themselves, once connected, just
    before their clock starts (the `pretouch` param: `pretouch_param`).

    What is touched must be what the page cache then takes. Linux 6.x file systems (ext4 here)
    fill the page cache with large folios, carved out of free 2 MiB blocks; pages freed one at
    a time (a tmpfs file, plain anonymous memory) do not serve them. Measured on Linux 6.18
    after 4 GB of other files had taken the recycled memory, a 600 MB file write cost 1.4-1.7 s
    of system CPU after a 700 MB tmpfs or plain anonymous pre-touch, against 0.15-0.19 s after
    the same pre-touch in transparent huge pages (and 3 GB: 0.82 s against 2.8 s). So the
    memory is anonymous and asks for huge pages (`MADV_HUGEPAGE`); it leaves nothing in any
    file system. Where transparent huge pages are off, a file in `directory` written and
    deleted at once is the fallback (the page cache's own kind of memory)."""
    t0 = time.monotonic()
    if _huge_pages_available():
        _touch_huge_pages(mib)
    else:
        _touch_file(directory / f"wherry-pretouch-{os.getpid()}.bin", mib)
    return time.monotonic() - t0


# What a time-bound write run's pre-touch covers, MiB per second of run: above the fastest
# write rate seen on this machine (about 880 MB/s, the lean producer against one broker).
PRETOUCH_MIB_PER_S = 1000
_THP_SWITCH = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _huge_pages_available() -> bool:
    """Transparent huge pages may be asked for (the switch reads `[always]` or `[madvise]`)."""
    try:
        return "[never]" not in _THP_SWITCH.read_text()
    except OSError:
        return False


def _touch_huge_pages(mib: int) -> None:
    chunk = b"\1" * 2**20
    with mmap.mmap(-1, mib * 2**20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) as mem:
        mem.madvise(mmap.MADV_HUGEPAGE)
        for i in range(mib):
            mem[i * 2**20 : (i + 1) * 2**20] = chunk


def _touch_file(path: Path, mib: int) -> None:
    chunk = b"\0" * 2**20
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(mib):
            os.write(fd, chunk)
    finally:
        os.close(fd)
        path.unlink()


def dirty_mib() -> float:
    """The page cache's dirty and under-writeback memory, MiB (/proc/meminfo)."""
    total = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(("Dirty:", "Writeback:")):
            total += int(line.split()[1])
    return total / 1024


def settle_writeback(max_dirty_mib: float = 32.0, timeout_s: float = 120.0) -> float:
    """Flush the page cache (sync) and wait until the kernel holds at most `max_dirty_mib`
    dirty or under writeback, so a row does not measure the writeback of the rows before it
    (GBs written by a throughput row keep the disk busy for many seconds, and an appender's
    latency then shows the disk's, not the broker's). Returns the seconds it took."""
    t0 = time.monotonic()
    os.sync()
    while dirty_mib() > max_dirty_mib and time.monotonic() - t0 < timeout_s:
        time.sleep(0.2)
    return time.monotonic() - t0


def pretouch_param(params: dict[str, Any]) -> float | None:
    """In a worker: pre-touch as its params' `pretouch` ({"dir", "mib"}) asks, if they do;
    the seconds it took (None if not asked)."""
    ask = params.get("pretouch")
    if not ask:
        return None
    return pretouch_page_cache(Path(ask["dir"]), int(ask["mib"]))


def stop_pid(proc: subprocess.Popen[Any], timeout_s: float = 20.0) -> int | None:
    """SIGTERM the process by its PID, wait, SIGKILL if it is still running."""
    if proc.poll() is None:
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
    return proc.returncode


def broker_command(port: int, data_dir: Path, overrides: Sequence[str] = ()) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "wherry",
        "server",
        "--listeners",
        f"PLAINTEXT://127.0.0.1:{port}",
        "--log-dirs",
        str(data_dir),
        "--override",
        "http.listeners=",  # no HTTP listener (`wherry server` would take 9644)
    ]
    for o in overrides:
        cmd += ["--override", o]
    return cmd


class Broker:
    """A `python -m wherry server` child process on a free loopback port."""

    def __init__(self, data_dir: Path, overrides: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.overrides = list(overrides)
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.output: list[str] = []
        self._ready = threading.Event()
        self.spawned_at = 0.0  # perf_counter() just before the exec
        self.answer_cpu_ms = 0.0  # its CPU time when it answered the first ApiVersions (f1)
        self.ready_at: float | None = None  # perf_counter() when the "ready on" line came
        self.bind_cpu_ms: float | None = None  # its CPU time when its listeners were bound
        # what runs `wherry server ARGS` instead of `python -m wherry server` (a profiler)
        self.command_prefix: list[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def spawn(self, port: int | None = None) -> float:
        """Exec the broker; returns the `time.perf_counter()` taken just before the exec."""
        self.port = port or free_port()
        cmd = broker_command(self.port, self.data_dir, self.overrides)
        if self.command_prefix is not None:
            cmd = [*self.command_prefix, *cmd[4:]]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if BROKER_RUNTIME.pycache is not None:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(BROKER_RUNTIME.pycache)
        t0 = self.spawned_at = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=BROKER_RUNTIME.tree,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        return t0

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            if len(self.output) < 5000:
                self.output.append(line)
            if self.bind_cpu_ms is None and (bound := _BOUND.search(line)):
                self.bind_cpu_ms = float(bound.group(1))
            if _READY.search(line):
                if self.ready_at is None:
                    self.ready_at = time.perf_counter()
                self._ready.set()
        self._ready.set()

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        if not self._ready.wait(timeout_s) or self.proc is None or self.proc.poll() is not None:
            self.stop()
            raise BenchError("broker did not start:\n" + "".join(self.output[-40:]))

    def start(self, timeout_s: float = 30.0) -> Broker:
        self.spawn()
        self.wait_ready(timeout_s)
        return self

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)

    def stop(self) -> None:
        if self.proc is not None:
            stop_pid(self.proc)
            self.proc = None

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Profiler:
    """Optional py-spy sampling of a process while a step runs (`--profile DIR`).

    Writes `DIR/LABEL.txt` (py-spy's raw/collapsed stacks, for flamegraph tools) and
    `DIR/LABEL-summary.txt` (top functions by self and inclusive samples).
    """

    def __init__(self, out_dir: Path | None, label: str, pid: int) -> None:
        self.out_dir = out_dir
        self.label = label
        self.proc: subprocess.Popen[bytes] | None = None
        spy = shutil.which("py-spy")
        if out_dir is None or spy is None:
            return
        out_dir.mkdir(parents=True, exist_ok=True)
        self.raw = out_dir / f"{label}.txt"
        cmd = [spy, "record", "-p", str(pid), "-r", "200", "-f", "raw", "--nonblocking"]
        self.proc = subprocess.Popen(
            [*cmd, "-o", str(self.raw)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def __enter__(self) -> Profiler:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None or self.out_dir is None:
            return
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                stop_pid(self.proc, timeout_s=2)
        if self.raw.exists():
            summary = summarize_profile(self.raw)
            (self.out_dir / f"{self.label}-summary.txt").write_text(summary)


def summarize_profile(raw: Path, top: int = 25) -> str:
    """Top functions (self and inclusive sample share) of py-spy's raw (collapsed) output."""
    own: dict[str, int] = {}
    incl: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        # "func (file:line)" → "func (file)": aggregate lines of a function
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            incl[f] = incl.get(f, 0) + n
    out = [f"{total} samples"]
    for title, table in (("self", own), ("inclusive", incl)):
        out.append(f"--- {title}")
        for f, n in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
            out.append(f"{n / max(total, 1) * 100:5.1f}%  {f}")
    return "\n".join(out) + "\n"


def _worker_cmd(
    role: str, params: dict[str, Any], module: str = "bench.workers"
) -> list[str]:
    return [sys.executable, "-m", module, role, json.dumps(params)]


def run_worker(
    role: str, params: dict[str, Any], timeout_s: float, module: str = "bench.workers"
) -> dict[str, Any]:
    """Run `python -m MODULE ROLE PARAMS` (bench/workers.py unless `module` says another) and
    return the JSON it prints last."""
    proc = subprocess.Popen(
        _worker_cmd(role, params, module),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop_pid(proc, timeout_s=2)
        out, err = proc.communicate()
        raise BenchError(f"worker {role} timed out after {timeout_s:.0f}s\n{err[-2000:]}") from None
    return _worker_result(role, proc.returncode, out, err)


def _worker_result(role: str, rc: int | None, out: str, err: str) -> dict[str, Any]:
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        raise BenchError(f"worker {role} failed (exit {rc}):\n{err[-3000:]}{out[-1000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


class ServerWorker:
    """A worker that serves on a port (it prints `port N` first, its JSON result last)."""

    def __init__(self, role: str, params: dict[str, Any], timeout_s: float) -> None:
        self.role = role
        self.timeout_s = timeout_s
        self.proc = subprocess.Popen(
            _worker_cmd(role, params),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            stop_pid(self.proc, timeout_s=2)
            raise BenchError(f"worker {role} did not start: {line!r} {self.proc.stderr!r}")
        self.port = int(line.split()[1])

    def result(self) -> dict[str, Any]:
        try:
            out, err = self.proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            stop_pid(self.proc, timeout_s=2)
            raise BenchError(f"worker {self.role} timed out") from None
        return _worker_result(self.role, self.proc.returncode, out, err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            stop_pid(self.proc, timeout_s=2)


# --------------------------------------------------------------------------------------------
# Kafka wire encoding (kio) for the lean clients
# --------------------------------------------------------------------------------------------


def encode_request(
    api_key: int,
    version: int,
    body: dict[str, Any],
    correlation_id: int = 1,
    client_id: str = "wherry-bench",
) -> bytes:
    """A size-prefixed request frame (header v1/v2 as the schema says)."""
    from wherry.protocol.codec import encode_request as encode

    return encode(api_key, version, correlation_id, body, client_id=client_id)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("connection closed by peer")
        got += k
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(recv_exact(sock, 4))
    return recv_exact(sock, size)


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """Parse a response frame (without its size prefix) with kio."""
    from kio.index import load_response_schema
    from kio.serial import entity_reader

    cls = load_response_schema(api_key, version)
    # Response header v1 (flexible) has a tagged-field byte; ApiVersions always uses v0.
    hdr = 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
    resp, _ = entity_reader(cls)(frame, hdr)
    return resp


def call(bootstrap: str, api_key: int, version: int, body: dict[str, Any]) -> Any:
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(encode_request(api_key, version, body))
        return decode_response(api_key, version, read_frame(s))


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int,
    configs: dict[str, str] | None = None,
    replication_factor: int = 1,
) -> None:
    """CreateTopics v7; raises BenchError unless the topic was created."""
    resp = call(
        bootstrap,
        19,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": replication_factor,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    t = resp.topics[0]
    if int(t.error_code) != 0:
        raise BenchError(f"CreateTopics {name} failed: {t.error_code} {t.error_message}")


def api_versions_request() -> bytes:
    return encode_request(
        18, 3, {"client_software_name": "wherry-bench", "client_software_version": "1"}
    )


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


def segment_files(data_dir: Path, topic: str) -> list[Path]:
    """The `.log` segment files of every partition of a topic, in partition/offset order."""
    out: list[Path] = []
    for pdir in sorted(data_dir.glob(f"{topic}-[0-9]*"), key=lambda p: int(p.name.rsplit("-")[-1])):
        out += sorted(pdir.glob("*.log"))
    return out


def environment() -> dict[str, Any]:
    import importlib.util
    import platform

    env: dict[str, Any] = {
        "cpus": os.cpu_count() or 0,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "uvloop": importlib.util.find_spec("uvloop") is not None,
        "kernel": platform.release(),
        "loadavg_1m": os.getloadavg()[0],
    }
    try:
        import confluent_kafka

        version = confluent_kafka.version()
        env["confluent_kafka"] = version if isinstance(version, str) else version[0]
        env["librdkafka"] = confluent_kafka.libversion()[0]
    except ImportError:  # pragma: no cover - a project dependency
        env["confluent_kafka"] = None
    return env


# --------------------------------------------------------------------------------------------
# Runs and output
# --------------------------------------------------------------------------------------------


def log(msg: str) -> None:
    """A progress line: to stderr (the table goes to stdout)."""
    print(msg, file=sys.stderr, flush=True)


@contextmanager
def temp_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A temporary directory (under `parent` when given), removed with its content at the end."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def finish(env: dict[str, Any], t0: float) -> None:
    """Log the run's duration (since `t0`, monotonic) and record the load average at its end."""
    log(f"bench finished in {time.monotonic() - t0:.0f} s")
    env["loadavg_1m_end"] = os.getloadavg()[0]


def env_line(env: dict[str, Any]) -> str:
    """The environment line printed above a table (from `environment`, with the load average
    at the end of the run in ``loadavg_1m_end``)."""
    return (
        f"env: {env['cpus']} CPUs, {env['implementation']} {env['python']}, "
        f"uvloop {'on' if env['uvloop'] else 'off'}, Linux {env['kernel']}, "
        f"confluent-kafka {env.get('confluent_kafka')} / librdkafka {env.get('librdkafka')}, "
        f"load avg (1 min) {env['loadavg_1m']:.2f} at start, {env['loadavg_1m_end']:.2f} at end"
    )


def print_table(
    title: str,
    cells: Sequence[tuple[str, ...]],
    headers: tuple[str, ...] = ("row", "measurement", "result", "detail"),
) -> None:
    """Print rows of cells under `headers` (by default row, measurement, result, detail) as a
    table: with `rich` when it is installed, in plain text otherwise."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
        line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
        print(title)
        print(line)
        print("-" * len(line))
        for c in cells:
            print("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)))
    else:
        table = Table(title=title)
        for h in headers:
            table.add_column(h, overflow="fold")
        for c in cells:
            table.add_row(*c)
        Console(width=200).print(table)
    sys.stdout.flush()
