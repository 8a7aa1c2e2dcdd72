"""A loopback TCP relay that can simulate a network partition for the clients behind it.

`TcpProxy` listens on ``127.0.0.1`` and relays every accepted connection to a target address,
in one background thread. `partition` black-holes the relay: bytes in either direction are
swallowed and new connections are accepted but not relayed, so both ends see silence, as
with a cable pulled (no reset, no close). `heal` ends the partition: connections made or cut
off during it are closed (both ends then notice) and relaying resumes for new connections.
`reset` closes every current connection at once (both ends see the close).
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading

from wherry.common.closeable import Startable

__all__ = ["TcpProxy"]

_CHUNK = 65536


class _Link:
    """One client connection and (when relayed) its upstream connection."""

    __slots__ = ("client", "stale", "upstream")

    def __init__(self, client: socket.socket, upstream: socket.socket | None) -> None:
        self.client: socket.socket | None = client
        self.upstream = upstream
        self.stale = upstream is None  # made or cut off during a partition

    def peer(self, sock: socket.socket) -> socket.socket | None:
        return self.upstream if sock is self.client else self.client


class TcpProxy(Startable):
    """Relay ``127.0.0.1:<port>`` -> ``target``; see the module docstring."""

    def __init__(self, target: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0):
        self.target = target
        self._sel = selectors.DefaultSelector()
        self._listener = socket.create_server((host, port))
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._lock = threading.Lock()
        self._links: dict[socket.socket, _Link] = {}
        self._partitioned = False
        self._pending: list[tuple[str, threading.Event]] = []
        self._thread: threading.Thread | None = None
        self._stopped = False

    # -------------------------------------------------------------------------- public

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def connect_string(self) -> str:
        host, port = self.address
        return f"{host}:{port}"

    @property
    def partitioned(self) -> bool:
        return self._partitioned

    @property
    def connection_count(self) -> int:
        with self._lock:
            return len({id(link) for link in self._links.values()})

    def start(self) -> TcpProxy:
        if self._thread is None:
            self._sel.register(self._listener, selectors.EVENT_READ)
            self._sel.register(self._wake_r, selectors.EVENT_READ)
            self._thread = threading.Thread(target=self._run, name="wherry-tcp-proxy", daemon=True)
            self._thread.start()
        return self

    def partition(self) -> None:
        """Black-hole every current and future connection until `heal`."""
        self._command("partition")

    def heal(self) -> None:
        """Close connections affected by the partition; relay new connections again."""
        self._command("heal")

    def reset(self) -> None:
        """Close every current connection (both ends see the close)."""
        self._command("reset")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._command("stop")
            self._thread.join(10.0)
        self._close_all()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()
        self._sel.close()

    # -------------------------------------------------------------------------- the thread

    def _command(self, name: str) -> None:
        """Run a command in the relay thread and wait until it is done."""
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("TcpProxy is not running")
        done = threading.Event()
        with self._lock:
            self._pending.append((name, done))
        self._wake_w.send(b"\0")
        if not done.wait(10.0):
            raise TimeoutError(f"TcpProxy did not run {name!r}")

    def _run(self) -> None:
        while True:
            for key, _ in self._sel.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is self._wake_r:
                    if self._handle_commands():
                        return
                elif sock is self._listener:
                    self._accept()
                else:
                    self._relay(sock)

    def _handle_commands(self) -> bool:
        with contextlib.suppress(BlockingIOError):
            self._wake_r.recv(_CHUNK)
        with self._lock:
            commands, self._pending = self._pending, []
        stop = False
        for name, _ in commands:
            match name:
                case "partition":
                    self._partitioned = True
                    for link in list(self._links.values()):
                        link.stale = True
                case "heal":
                    self._partitioned = False
                    for link in list(self._links.values()):
                        if link.stale:
                            self._close_link(link)
                case "reset":
                    for link in list(self._links.values()):
                        self._close_link(link)
                case "stop":
                    stop = True
        for _, done in commands:
            done.set()
        return stop

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        client.setblocking(True)  # sends below are small, to loopback peers that read
        upstream: socket.socket | None = None
        if not self._partitioned:
            try:
                upstream = socket.create_connection(self.target, timeout=5.0)
            except OSError:
                client.close()
                return
            upstream.setblocking(True)
        link = _Link(client, upstream)
        with self._lock:
            self._links[client] = link
            if upstream is not None:
                self._links[upstream] = link
        self._sel.register(client, selectors.EVENT_READ)
        if upstream is not None:
            self._sel.register(upstream, selectors.EVENT_READ)

    def _relay(self, sock: socket.socket) -> None:
        link = self._links.get(sock)
        if link is None:
            return
        try:
            data = sock.recv(_CHUNK)
        except OSError:
            data = b""
        if not data:
            if link.stale:
                self._close_side(link, sock)  # the other end hears nothing
            else:
                self._close_link(link)
            return
        peer = link.peer(sock)
        if link.stale or peer is None:
            return  # black-holed
        try:
            peer.sendall(data)
        except OSError:
            self._close_link(link)

    def _close_side(self, link: _Link, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._sel.unregister(sock)
        with self._lock:
            self._links.pop(sock, None)
        sock.close()
        if sock is link.client:
            link.client = None
        elif sock is link.upstream:
            link.upstream = None

    def _close_link(self, link: _Link) -> None:
        for sock in (link.client, link.upstream):
            if sock is not None:
                self._close_side(link, sock)

    def _close_all(self) -> None:
        with self._lock:
            links = {id(link): link for link in self._links.values()}
        for link in links.values():
            for sock in (link.client, link.upstream):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
        with self._lock:
            self._links.clear()
