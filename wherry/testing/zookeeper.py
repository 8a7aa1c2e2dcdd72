"""A real standalone ZooKeeper server for tests (Debian's ``zookeeper`` package).

`ZooKeeperServer` writes its own ``zoo.cfg`` into a temporary directory and runs
``java ... org.apache.zookeeper.server.ZooKeeperServerMain zoo.cfg`` listening on a free
loopback port, with a short ``tickTime`` (so short session timeouts are allowed), the admin
server and the four-letter-word commands disabled (ZooKeeper always keeps ``srvr``), and the
server log written to ``<workdir>/zookeeper.log``. The classpath is ``zookeeper.jar`` (whose
manifest names its dependencies in ``/usr/share/java``) plus ``slf4j-simple.jar`` for the log.
The process is stopped by its own PID only.

Besides start/stop/restart it can `pause` and `resume` the process (SIGSTOP/SIGCONT: every
client sees the server go silent) and `expire_session`: end one session exactly as the server
does when the session times out (its ephemeral nodes are deleted and watches fire, and its
owner is told the session has expired when it next talks to the server).

Readiness and `expire_session` speak the ZooKeeper client protocol directly over a socket
(connect handshake, ``closeSession``), so this module needs neither pytest nor a ZooKeeper
client library.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import weakref
from pathlib import Path

from wherry.common.closeable import Startable
from wherry.testing.sockets import recv_exact

__all__ = ["JAVA_DIR", "ZooKeeperServer", "find_free_port"]

JAVA_DIR = Path("/usr/share/java")
_ZOOKEEPER_JAR = JAVA_DIR / "zookeeper.jar"
_REQUIRED_JARS = (_ZOOKEEPER_JAR, JAVA_DIR / "zookeeper-jute.jar", JAVA_DIR / "slf4j-api.jar")
# zookeeper.jar's manifest lists its dependencies (Debian); we add only a logging binding.
_LOGGING_JAR = JAVA_DIR / "slf4j-simple.jar"
_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"

_CLOSE_SESSION = -11
_PASSWORD_LEN = 16


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------------------ wire helpers


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _connect_request(session_id: int, password: bytes, timeout_ms: int) -> bytes:
    # ConnectRequest: protocolVersion, lastZxidSeen, timeOut, sessionId, passwd, readOnly
    return _frame(
        struct.pack(">iqiqi", 0, 0, timeout_ms, session_id, len(password)) + password + b"\x00"
    )


def _close_request(xid: int) -> bytes:
    return _frame(struct.pack(">ii", xid, _CLOSE_SESSION))


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    return recv_exact(sock, n, closed="ZooKeeper closed the connection")


def _recv_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack(">i", _recv_exact(sock, 4))
    if not 0 <= length <= 1 << 20:
        raise ConnectionError(f"bad ZooKeeper frame length {length}")
    return _recv_exact(sock, length)


def _session_handshake(
    address: tuple[str, int],
    session_id: int,
    password: bytes,
    *,
    timeout_ms: int,
    io_timeout_s: float,
) -> tuple[int, int] | None:
    """Connect with the given session credentials (0 / zeros: a new session) and close the
    session again, pipelined in one write. Returns ``(session_id, negotiated_timeout_ms)`` of
    the session that was closed, or ``None`` if the server said the session does not exist
    (expired or never existed). Raises `OSError`/`ConnectionError` if the server is not
    serving."""
    with socket.create_connection(address, timeout=io_timeout_s) as sock:
        sock.settimeout(io_timeout_s)
        sock.sendall(_connect_request(session_id, password, timeout_ms) + _close_request(1))
        resp = _recv_frame(sock)
        _proto, negotiated, sid, _pw_len = struct.unpack_from(">iiqi", resp)
        if negotiated <= 0:
            return None
        while True:  # the closeSession reply (xid 1); nothing else is expected
            reply = _recv_frame(sock)
            xid, _zxid, err = struct.unpack_from(">iqi", reply)
            if xid == 1:
                if err != 0:
                    raise ConnectionError(f"closeSession failed with ZooKeeper error {err}")
                return sid, negotiated


# ------------------------------------------------------------------------------ the server


class _PortTaken(RuntimeError):
    """The server could not bind its client port."""


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)  # a paused JVM cannot act on SIGTERM
        proc.terminate()
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout_s)


class ZooKeeperServer(Startable):
    """One standalone ZooKeeper process, data kept in ``workdir`` across `restart`.

    ``workdir=None`` makes a temporary directory that `close` removes. ``tick_time_ms`` sets
    the session-expiry granularity (sessions expire in tick steps); ``min_session_timeout_ms``
    defaults to ``2 * tick_time_ms`` (ZooKeeper's own default). ``fsync=False`` skips fsync of
    the transaction log: data survives a process restart, not a machine crash.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        *,
        port: int | None = None,
        tick_time_ms: int = 100,
        min_session_timeout_ms: int | None = None,
        max_session_timeout_ms: int = 60_000,
        fsync: bool = False,
        java: str = "java",
        startup_timeout_s: float = 30.0,
        heap_mb: int = 256,
    ) -> None:
        if workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="wherry-zk-"))
            self._owns_workdir = True
        else:
            self._workdir = Path(workdir)
            self._workdir.mkdir(parents=True, exist_ok=True)
            self._owns_workdir = False
        self.host = "127.0.0.1"
        self._auto_port = port is None
        self.port = port if port is not None else find_free_port(self.host)
        self._started_once = False
        self.tick_time_ms = tick_time_ms
        self.min_session_timeout_ms = (
            2 * tick_time_ms if min_session_timeout_ms is None else min_session_timeout_ms
        )
        self.max_session_timeout_ms = max_session_timeout_ms
        self.fsync = fsync
        self.java = java
        self.startup_timeout_s = startup_timeout_s
        self.heap_mb = heap_mb
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._closed = False
        # Kill a still-running process when this object is collected or the interpreter exits.
        self._exit_procs: list[subprocess.Popen[bytes]] = []
        self._finalizer = weakref.finalize(self, ZooKeeperServer._kill_at_exit, self._exit_procs)

    # -------------------------------------------------------------------------- availability

    @staticmethod
    def unavailable_reason(java: str = "java") -> str | None:
        """Why a server cannot be started here (``None``: it can)."""
        if shutil.which(java) is None:
            return f"{java!r} (a Java runtime) is not on PATH"
        missing = [str(jar) for jar in _REQUIRED_JARS if not jar.is_file()]
        if missing:
            return (
                f"ZooKeeper is not installed ({', '.join(missing)} missing; "
                "apt-get install zookeeper)"
            )
        return None

    @classmethod
    def is_available(cls, java: str = "java") -> bool:
        """Whether Java and ZooKeeper's jars are installed."""
        return cls.unavailable_reason(java) is None

    # -------------------------------------------------------------------------- properties

    @property
    def workdir(self) -> Path:
        return self._workdir

    @property
    def data_dir(self) -> Path:
        return self._workdir / "data"

    @property
    def config_path(self) -> Path:
        return self._workdir / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self._workdir / "zookeeper.log"

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def connect_string(self) -> str:
        """``host:port`` for clients (append ``/chroot`` as needed)."""
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused

    # -------------------------------------------------------------------------- lifecycle

    def _write_config(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.host}",
            f"minSessionTimeout={self.min_session_timeout_ms}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            "maxClientCnxns=0",
            "initLimit=10",
            "syncLimit=5",
            "autopurge.purgeInterval=0",
            "admin.enableServer=false",
            "4lw.commands.whitelist=",
            f"forceSync={'yes' if self.fsync else 'no'}",
        ]
        self.config_path.write_text("\n".join(lines) + "\n")

    def _command(self) -> list[str]:
        classpath = [str(_ZOOKEEPER_JAR)]
        if _LOGGING_JAR.is_file():
            classpath.append(str(_LOGGING_JAR))
        return [
            self.java,
            f"-Xmx{self.heap_mb}m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-cp",
            ":".join(classpath),
            _MAIN_CLASS,
            str(self.config_path),
        ]

    def start(self) -> ZooKeeperServer:
        """Start the process and wait (bounded) until it serves client sessions."""
        if self._closed:
            raise RuntimeError("ZooKeeperServer is closed")
        if self.running:
            return self
        reason = self.unavailable_reason(self.java)
        if reason is not None:
            raise RuntimeError(f"cannot start ZooKeeper: {reason}")
        for attempt in range(3):
            try:
                self._start_once()
            except _PortTaken:
                # Another process took the free port we picked: pick another (first start
                # only; a restart must keep its port for its clients).
                if attempt == 2:
                    raise
                self.port = find_free_port(self.host)
                continue
            self._started_once = True
            return self
        raise AssertionError("unreachable")

    def _start_once(self) -> None:
        self._write_config()
        with open(self.log_path, "ab") as log:
            log.write(f"---- starting ZooKeeper on {self.connect_string}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(
                self._command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self._workdir,
                start_new_session=True,  # a terminal's Ctrl-C goes to the test runner only
            )
        self._paused = False
        self._exit_procs[:] = [self._proc]
        try:
            self._wait_ready()
        except BaseException:
            stop_process(self._proc, 5.0)
            raise

    @staticmethod
    def _kill_at_exit(procs: list[subprocess.Popen[bytes]]) -> None:
        for proc in procs:
            with contextlib.suppress(Exception):
                stop_process(proc, 5.0)

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: BaseException | None = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                if (
                    self._auto_port
                    and not self._started_once
                    and "Address already in use" in self.log_tail()
                ):
                    raise _PortTaken(self.connect_string)
                raise RuntimeError(
                    f"ZooKeeper exited with status {self._proc.returncode} during startup; "
                    f"log tail:\n{self.log_tail()}"
                )
            try:
                if _session_handshake(
                    self.address, 0, bytes(_PASSWORD_LEN), timeout_ms=30_000, io_timeout_s=2.0
                ):
                    return
            except (OSError, ConnectionError, struct.error) as e:
                last_error = e
            time.sleep(0.05)
        raise TimeoutError(
            f"ZooKeeper on {self.connect_string} not serving after {self.startup_timeout_s} s "
            f"(last error: {last_error!r}); log tail:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop the process (SIGTERM, SIGKILL after ``timeout_s``); data is kept."""
        proc = self._proc
        if proc is None:
            return
        stop_process(proc, timeout_s)
        self._paused = False

    def kill(self) -> None:
        """SIGKILL the process (a crash); data written so far is kept."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(10.0)
        self._paused = False

    def restart(self) -> ZooKeeperServer:
        """Stop and start again on the same port with the same data."""
        self.stop()
        return self.start()

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing is answered."""
        if not self.running:
            raise RuntimeError("ZooKeeper is not running")
        assert self._proc is not None
        os.kill(self._proc.pid, signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """Undo `pause` (SIGCONT)."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGCONT)
        self._paused = False

    def close(self) -> None:
        """Stop the process and remove the working directory if it was a temporary one."""
        if self._closed:
            return
        self.stop()
        self._closed = True
        self._finalizer.detach()
        if self._owns_workdir:
            shutil.rmtree(self._workdir, ignore_errors=True)

    # -------------------------------------------------------------------------- sessions

    def expire_session(self, session_id: int, password: bytes, timeout_s: float = 10.0) -> bool:
        """End a live session the way the server ends an expired one.

        Connects with the session's id and password -- the server then moves the session to
        this connection and drops its owner's connection -- and closes it in the same write:
        the server deletes the session's ephemeral nodes (firing watches) before replying.
        The owner learns that its session expired when it reconnects. Returns False if the
        session was already gone.
        """
        if len(password) != _PASSWORD_LEN:
            raise ValueError("a ZooKeeper session password has 16 bytes")
        return (
            _session_handshake(
                self.address,
                session_id,
                password,
                timeout_ms=self.min_session_timeout_ms,
                io_timeout_s=timeout_s,
            )
            is not None
        )

    def log_tail(self, max_bytes: int = 4000) -> str:
        try:
            data = self.log_path.read_bytes()
        except OSError:
            return "(no log)"
        return data[-max_bytes:].decode(errors="replace")

    def __repr__(self) -> str:
        state = "paused" if self._paused else ("running" if self.running else "stopped")
        return f"ZooKeeperServer({self.connect_string}, {state}, pid={self.pid})"
