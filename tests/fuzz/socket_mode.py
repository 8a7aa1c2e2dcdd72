"""The fuzz inputs over real sockets to a `wherry server` process.

Inputs: the seed corpus, the in-process fuzzer's corpus (`<workdir>/corpus`), the committed
regression inputs, then mutations of them (bit flips, interesting integers, insertions,
deletions, splices), until `inputs` were sent or `seconds` passed. Per target:

``request``      on a PLAINTEXT connection (``lean`` too), its correlation id replaced by a
                 counter, then an ApiVersions probe: the connection answers in order, so the
                 probe's answer means the input was dealt with (answered, or -- acks=0 -- not)
``sasl``         its frames one at a time on a fresh SASL_PLAINTEXT connection, each answered
                 or the connection closed
``sasl-tokens``  as SaslHandshake v1 for the token's mechanism + one SaslAuthenticate v2 each
``records``      the batch in a Produce v9 request (acks=1) to the topic `fuzz`

(``response`` and ``coordinator`` inputs are what a broker reads from peers and its own logs,
never from a client: they are not sent.)

Checked for every input: answered or the connection closed within the deadline (1 s; an API
that may wait, e.g. a Fetch's max wait, is given no deadline and counted `waiting`), the broker
process alive, and -- every 64 inputs and at the end -- its RSS at most the baseline (measured
after the first pass over the seeds) + `queued_max_request_bytes` + 64 MiB. A dead broker is
restarted after its input is filed under `<workdir>/socket-crashes/`.
"""

from __future__ import annotations

import collections
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.fuzz.inproc import broker_overrides
from tests.fuzz.targets import (
    SELECTORS,
    WAITING_DEADLINE_S,
    WAITING_KEYS,
    short_hash,
    split_frames,
    target_of,
)

HERE = Path(__file__).parent
# What a client can send (`response` and `coordinator` inputs are read from peers and logs).
SENDABLE = ("request", "sasl", "sasl-tokens", "records", "lean")
SLACK_BYTES = 64 * 1024 * 1024
TOPIC = "fuzz"
_READY = re.compile(r"ready on (\S+)")
_SIZE = struct.Struct(">i")
_PROBE_CORR = 0x7FFF0000
_SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass
class SocketResult:
    inputs: int = 0
    seconds: float = 0.0
    answered: int = 0
    closed: int = 0
    waiting: int = 0
    skipped: int = 0
    baseline_rss: int = 0
    max_rss: int = 0
    rss_bound: int = 0
    restarts: int = 0
    tracebacks: int = 0
    traceback_kinds: dict[str, int] = field(default_factory=dict)
    hangs: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    rss_over: list[str] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        return [*self.hangs, *self.crashes, *self.rss_over]

    def line(self) -> str:
        per_s = self.inputs / self.seconds if self.seconds else 0.0
        mib = 1024 * 1024
        return (
            f"inputs={self.inputs} seconds={self.seconds:.0f} inputs/s={per_s:.0f} "
            f"answered={self.answered} closed={self.closed} waiting={self.waiting} "
            f"skipped={self.skipped} hangs={len(self.hangs)} crashes={len(self.crashes)} "
            f"restarts={self.restarts} tracebacks={self.tracebacks} "
            f"rss_baseline_mib={self.baseline_rss // mib} rss_max_mib={self.max_rss // mib} "
            f"rss_bound_mib={self.rss_bound // mib} rss_over={len(self.rss_over)}"
        )


class ServerProcess:
    """`wherry server` with the fuzz broker's listeners; its output is kept as a ring of the
    last lines, and tracebacks are counted."""

    def __init__(self, data_dir: Path, queued_max_request_bytes: int) -> None:
        from wherry.server.config_keys import is_known

        overrides = broker_overrides(data_dir)
        if is_known("queued.max.request.bytes"):
            overrides["queued.max.request.bytes"] = str(queued_max_request_bytes)
        cmd = [sys.executable, "-m", "wherry", "server"]
        for k, v in overrides.items():
            cmd += ["--override", f"{k}={v}"]
        self.lines: collections.deque[str] = collections.deque(maxlen=400)
        self.tracebacks = 0
        self.traceback_kinds: collections.Counter[str] = collections.Counter()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, errors="replace",
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        ready = threading.Event()
        self.addresses: list[str] = []

        def pump() -> None:
            assert self.proc.stdout is not None
            in_traceback = False
            for line in self.proc.stdout:
                self.lines.append(line)
                if line.startswith("Traceback"):
                    self.tracebacks += 1
                    in_traceback = True
                elif in_traceback and not line.startswith((" ", "\t")):
                    in_traceback = False  # the exception's own line: what the traceback was
                    self.traceback_kinds[line.strip()[:160]] += 1
                if not ready.is_set() and (m := _READY.search(line)):
                    self.addresses = m.group(1).split(",")
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(60) or not self.addresses:
            self.stop()
            raise RuntimeError("the broker did not start:\n" + "".join(self.lines))

    def address(self, index: int) -> tuple[str, int]:
        host, port = self.addresses[index].rsplit(":", 1)
        return host, int(port)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# --- the wire --------------------------------------------------------------------------------


def _recv_frame(sock: socket.socket, until: float) -> bytes | None:
    """One response frame, or None when the connection closed; TimeoutError past `until`."""
    head = _recv_exact(sock, 4, until)
    if head is None:
        return None
    (n,) = _SIZE.unpack(head)
    return _recv_exact(sock, n, until)


def _recv_exact(sock: socket.socket, n: int, until: float) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        left = until - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except (ConnectionResetError, BrokenPipeError):
            return None
        except TimeoutError:
            raise
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _send(sock: socket.socket, frame: bytes) -> bool:
    try:
        sock.sendall(_SIZE.pack(len(frame)) + frame)
        return True
    except OSError:
        return False


def _probe() -> bytes:
    from wherry.protocol.codec import encode_request

    return encode_request(18, 0, _PROBE_CORR, {}, client_id="probe")[4:]


class Driver:
    """Sends inputs to one broker and says what became of each."""

    def __init__(self, server: ServerProcess, deadline_s: float) -> None:
        self.server = server
        self.deadline_s = deadline_s
        self.plain: socket.socket | None = None
        self.corr = 0
        self.probe = _probe()

    def close(self) -> None:
        if self.plain is not None:
            self.plain.close()
            self.plain = None

    def _plain(self) -> socket.socket:
        if self.plain is None:
            self.plain = socket.create_connection(self.server.address(0), timeout=5)
            self.plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self.plain

    def send(self, data: bytes) -> tuple[str, str]:
        """(outcome, detail): outcome is answered / closed / waiting / hang / skipped."""
        target = target_of(data)
        payload = data[1:]
        if target in ("request", "lean"):
            return self._request(payload)
        if target == "records":
            return self._request(_produce_frame(payload[1:] if payload else b""))
        if target == "sasl":
            return self._sasl(list(split_frames(payload))[:16])
        if target == "sasl-tokens" and payload:
            return self._sasl(_sasl_token_frames(payload))
        return "skipped", target

    def _request(self, frame: bytes) -> tuple[str, str]:
        key = struct.unpack_from(">h", frame)[0] if len(frame) >= 2 else -1
        self.corr = (self.corr + 1) % _PROBE_CORR
        if len(frame) >= 8:
            frame = frame[:4] + struct.pack(">i", self.corr) + frame[8:]
        sock = self._plain()
        if not (_send(sock, frame) and _send(sock, self.probe)):
            self.close()
            return "closed", f"key {key}: send failed"
        # An API that may wait by design is given a short while, then its connection closed.
        wait_s = min(self.deadline_s, WAITING_DEADLINE_S) if key in WAITING_KEYS else (
            self.deadline_s)
        until = time.monotonic() + wait_s
        try:
            while True:
                answer = _recv_frame(sock, until)
                if answer is None:
                    self.close()
                    return "closed", f"key {key}"
                if len(answer) >= 4 and _SIZE.unpack_from(answer)[0] == _PROBE_CORR:
                    return "answered", f"key {key}"
        except TimeoutError:
            self.close()
            if key in WAITING_KEYS:
                return "waiting", f"key {key}"
            return "hang", f"API key {key}: no answer or close within {self.deadline_s}s"

    def _sasl(self, frames: list[bytes]) -> tuple[str, str]:
        if not frames:
            return "skipped", "sasl: no frames"
        with socket.create_connection(self.server.address(1), timeout=5) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for i, frame in enumerate(frames):
                if not _send(sock, frame):
                    return "closed", f"sasl frame {i}"
                try:
                    if _recv_frame(sock, time.monotonic() + self.deadline_s) is None:
                        return "closed", f"sasl frame {i}"
                except TimeoutError:
                    key = struct.unpack_from(">h", frame)[0] if len(frame) >= 2 else -1
                    if key in WAITING_KEYS:
                        return "waiting", f"sasl frame {i} key {key}"
                    return "hang", f"sasl frame {i} (key {key}) not answered or closed"
        return "answered", "sasl"


def _produce_frame(batch: bytes) -> bytes:
    from wherry.protocol.codec import encode_request

    body = {"transactional_id": None, "acks": 1, "timeout_ms": 1000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
    return encode_request(0, 9, 1, body, client_id="fuzz")[4:]


def _sasl_token_frames(payload: bytes) -> list[bytes]:
    from wherry.protocol.codec import encode_request

    mechanism = _SASL_MECHANISMS[payload[0] % 3]
    frames = [encode_request(17, 1, 1, {"mechanism": mechanism}, client_id="fuzz")[4:]]
    for i, token in enumerate(list(split_frames(payload[1:]))[:4]):
        frames.append(encode_request(36, 2, 2 + i, {"auth_bytes": token}, client_id="fuzz")[4:])
    return frames


def _prepare(server: ServerProcess) -> None:
    """The topic `fuzz`, and the group and transaction coordinators loaded (their internal
    topics created), so that no input waits for what a first request of its kind sets up."""
    from wherry.protocol.codec import decode_response, encode_request

    body = {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 30000}
    until = time.monotonic() + 60
    with socket.create_connection(server.address(0), timeout=35) as sock:
        sock.sendall(encode_request(19, 5, 1, body))
        answer = _recv_frame(sock, until)
        assert answer is not None
        decode_response(19, 5, answer)
        for key_type in (0, 1):
            while True:
                sock.sendall(encode_request(10, 3, 2, {"key": "fuzz", "key_type": key_type}))
                answer = _recv_frame(sock, until)
                assert answer is not None
                if decode_response(10, 3, answer)[1].error_code == 0:
                    break
                time.sleep(0.1)


# --- inputs ----------------------------------------------------------------------------------

_INTERESTING = (b"\x00", b"\x01", b"\x7f", b"\x80", b"\xff", b"\xff\xff", b"\x7f\xff",
                b"\x80\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
                b"\x00\x00\x00\x00", b"\x00\x00\x01\x00", b"\x40\x00\x00\x00")


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """A few random edits of `data`'s payload (its selector byte kept)."""
    head, buf = data[:1], bytearray(data[1:])
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(7)
        pos = rng.randrange(len(buf) + 1)
        if op == 0 and buf:
            i = min(pos, len(buf) - 1)
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:
            buf[min(pos, len(buf) - 1)] = rng.randrange(256)
        elif op == 2:
            value = rng.choice(_INTERESTING)
            buf[pos : pos + len(value)] = value
        elif op == 3:
            buf[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        elif op == 4 and buf:
            del buf[pos : pos + rng.randint(1, 16)]
        elif op == 5 and buf:
            end = min(len(buf), pos + rng.randint(1, 32))
            buf[pos:pos] = buf[pos:end]
        elif op == 6 and pool:
            other = rng.choice(pool)[1:]
            cut = rng.randrange(len(other) + 1)
            buf[pos:] = other[cut:]
    return head + bytes(buf[:65536])


def _files(*dirs: Path) -> list[bytes]:
    out = []
    for d in dirs:
        if d.is_dir():
            out += [p.read_bytes() for p in sorted(d.iterdir())
                    if p.is_file() and not p.name.endswith(".log")]
    return out


def inputs_of(workdir: Path, rng: random.Random) -> tuple[list[bytes], Iterator[bytes]]:
    """(the first pass: seeds, corpus, regressions; an endless stream of their mutations)."""
    seeds = _files(HERE / "corpus")
    first = seeds + _files(workdir / "corpus", HERE / "regressions")
    sendable = [d for d in first if target_of(d) in SENDABLE]

    def stream() -> Iterator[bytes]:
        while True:
            yield mutate(rng, rng.choice(sendable), sendable)

    return first, stream()


# --- the run ---------------------------------------------------------------------------------


def fuzz_over_sockets(
    workdir: Path,
    *,
    inputs: int,
    seconds: float,
    deadline_s: float = 1.0,
    queued_max_request_bytes: int = 100 * 1024 * 1024,
    seed: int = 0,
    echo: bool = True,
) -> SocketResult:
    crashes = workdir / "socket-crashes"
    crashes.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    result = SocketResult()
    first, rest = inputs_of(workdir, rng)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        server, driver = _start(Path(tmp), 0, queued_max_request_bytes, deadline_s)
        try:
            recent: collections.deque[bytes] = collections.deque(maxlen=8)
            for n, data in enumerate(_chain(first, rest)):
                if n >= inputs or time.monotonic() - started > seconds:
                    break
                recent.append(data)
                outcome, detail = driver.send(data)
                result.inputs += 1
                if outcome == "skipped":
                    result.skipped += 1
                elif outcome == "hang":
                    _file(crashes, "hang", data, [detail])
                    result.hangs.append(f"{short_hash(data)} {detail}")
                else:
                    setattr(result, outcome, getattr(result, outcome) + 1)
                if not server.alive:
                    name = _file(crashes, "crash", data, list(server.lines))
                    for i, earlier in enumerate(list(recent)[:-1]):  # it may need its context
                        _file(crashes, f"crash-context{i}", earlier, [])
                    result.crashes.append(name)
                    if echo:
                        print(f"CRASH {name}", flush=True)
                    _count_tracebacks(result, server)
                    driver.close()
                    server.stop()
                    result.restarts += 1
                    server, driver = _start(Path(tmp), result.restarts,
                                            queued_max_request_bytes, deadline_s)
                    continue
                if n == len(first) - 1 or (result.baseline_rss == 0 and n >= 2000):
                    result.baseline_rss = server.rss()
                    result.rss_bound = (result.baseline_rss + max(queued_max_request_bytes, 0)
                                        + SLACK_BYTES)
                if n % 64 == 0 or n == inputs - 1:
                    _check_rss(server, result, data, crashes)
                if echo and n and n % 50_000 == 0:
                    print(f"#{n} {result.line()}", flush=True)
            _check_rss(server, result, b"", crashes)
        finally:
            _count_tracebacks(result, server)
            driver.close()
            server.stop()
    result.seconds = time.monotonic() - started
    return result


def _count_tracebacks(result: SocketResult, server: ServerProcess) -> None:
    result.tracebacks += server.tracebacks
    for kind, n in server.traceback_kinds.items():
        result.traceback_kinds[kind] = result.traceback_kinds.get(kind, 0) + n


def _chain(first: list[bytes], rest: Iterator[bytes]) -> Iterator[bytes]:
    yield from first
    yield from rest


def _start(root: Path, generation: int, queued: int, deadline_s: float
           ) -> tuple[ServerProcess, Driver]:
    server = ServerProcess(root / f"broker-{generation}", queued)
    _prepare(server)
    return server, Driver(server, deadline_s)


def _check_rss(server: ServerProcess, result: SocketResult, data: bytes, crashes: Path) -> None:
    rss = server.rss()
    result.max_rss = max(result.max_rss, rss)
    if result.rss_bound and rss > result.rss_bound:
        _file(crashes, "rss", data, [f"RSS {rss} > bound {result.rss_bound}"])
        result.rss_over.append(f"{short_hash(data)} rss={rss}")


def _file(crashes: Path, kind: str, data: bytes, log: list[str]) -> str:
    name = f"{kind}-{target_of(data)}-{short_hash(data)}"
    (crashes / name).write_bytes(data)
    if log:
        (crashes / f"{name}.log").write_text("".join(
            line if line.endswith("\n") else line + "\n" for line in log))
    return name


assert set(SELECTORS) >= set(SENDABLE)
