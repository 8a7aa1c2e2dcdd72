"""Headless Chromium driven over the DevTools protocol (its websocket, `websockets`' sync
client), for the console test: started with `--remote-debugging-port=0` in its own profile
directory (the port read from `DevToolsActivePort`), every wait bounded, stopped by its PID."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "headless_shell"):
        found = shutil.which(name)
        if found:
            return found
    return None


class Chromium:
    def __init__(self, binary: str, profile: Path, *, start_timeout_s: float = 30.0) -> None:
        self.binary = binary
        self.profile = profile
        self.start_timeout_s = start_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self._ws: ClientConnection | None = None
        self._stack = contextlib.ExitStack()
        self._next_id = 0

    def __enter__(self) -> Chromium:
        self.profile.mkdir(parents=True, exist_ok=True)
        log = (self.profile / "chromium.log").open("wb")
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--headless",
                "--no-sandbox",  # tests may run as root
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--metrics-recording-only",
                "--window-size=1400,1000",
                f"--user-data-dir={self.profile}",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        try:
            self._attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _attach(self) -> None:
        marker = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited: {self.log_tail()}")
            with contextlib.suppress(OSError, ValueError, IndexError):
                self.port = int(marker.read_text().splitlines()[0])
                targets = json.loads(
                    urllib.request.urlopen(
                        f"http://127.0.0.1:{self.port}/json/list", timeout=2
                    ).read()
                )
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    self._ws = self._stack.enter_context(
                        connect(pages[0]["webSocketDebuggerUrl"], open_timeout=10,
                                max_size=64 << 20)
                    )
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"chromium not ready: {self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self) -> str:
        try:
            return (self.profile / "chromium.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def close(self) -> None:
        self._ws = None
        with contextlib.suppress(Exception):
            self._stack.close()
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)

    # --- the protocol ----------------------------------------------------------------------
    def send(self, method: str, timeout_s: float = 20.0, **params: Any) -> dict[str, Any]:
        ws = self._ws
        assert ws is not None
        self._next_id += 1
        mid = self._next_id
        ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to {method} within {timeout_s} s")
            msg = json.loads(ws.recv(timeout=left))
            if msg.get("id") == mid:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result

    def navigate(self, url: str) -> None:
        self.send("Page.enable")
        self.send("Page.navigate", url=url)

    def evaluate(self, expression: str) -> Any:
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"page error: {r['exceptionDetails']}")
        return r.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout_s: float = 15.0) -> Any:
        """Until `expression` is truthy in the page; returns its value."""
        deadline = time.monotonic() + timeout_s
        last: Any = None
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError):
                last = self.evaluate(expression)
                if last:
                    return last
            time.sleep(0.1)
        raise TimeoutError(f"{expression!r} still {last!r} after {timeout_s} s")

    def set_viewport(self, width: int, height: int) -> None:
        """The page's viewport (`innerWidth` x `innerHeight`), whatever the window's size."""
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def screenshot(self, path: Path, *, viewport_only: bool = False) -> Path:
        """The whole page, or with `viewport_only` what a user sees without scrolling."""
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": not viewport_only}
        if not viewport_only:
            size = self.send("Page.getLayoutMetrics")["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": size["height"], "scale": 1}
        data = self.send("Page.captureScreenshot", **params)
        path.write_bytes(base64.b64decode(data["data"]))
        return path
