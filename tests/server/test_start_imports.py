"""What `wherry server` with its defaults (the HTTP listener with the console on) imports before
its Kafka listener is bound, and what an idle broker holds.

The start's speed and memory are measured by the bench (`bench/run.py --only f`, rows f1 and
f2); these tests guard the import graph that makes them, without timing: a real broker runs
in a child process (the console entry, as `wherry server` runs it) and writes its
`sys.modules` when its Kafka listener is bound and, once it is ready, when asked.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from wherry.server.startup import HttpStart
from wherry.testing.cluster import stop_process

REPO = Path(__file__).resolve().parents[2]

# Not before the Kafka listener is bound: the HTTP listener and the console, the password
# encoder (only with a password config), importlib.resources (the console's page).
NOT_AT_BIND = (
    "wherry.observability.service",
    "wherry.observability.http_server",
    "wherry.observability.sources",
    "wherry.observability.readiness",
    "wherry.observability.events",
    "wherry.security.password_encoder",
    "importlib.resources",
    "prometheus_client",
)
# Not in an idle broker (started, no request, no scrape): what the first scrape of /metrics,
# the first compressed batch or the console's page bring, and what the crc32c package's
# `__init__` would (importlib.metadata and its email, zipfile, csv, argparse).
NOT_WHEN_IDLE = (
    "prometheus_client",
    "wherry.observability.collector",
    "cramjam",
    "crc32c._cli",
    "importlib.metadata",
    "email",
    "zipfile",
    "argparse",
    "csv",
    "importlib.resources",
    "wherry.security.password_encoder",
)

_CHILD = """
import json, os, sys, threading, time
out = sys.argv[1]
def dump(path):
    while True:
        try:
            names = sorted(n for n, m in list(sys.modules.items()) if m is not None)
            break
        except RuntimeError:  # changed size meanwhile
            pass
    with open(path + ".tmp", "w") as f:
        json.dump(names, f)
    os.replace(path + ".tmp", path)
def dump_on_request():
    while not os.path.exists(out + ".req"):
        time.sleep(0.02)
    dump(out)
threading.Thread(target=dump_on_request, daemon=True).start()
import wherry.server.startup as startup
_log_bound = startup.log_bound
def log_bound(ports):
    dump(out + ".bind")
    _log_bound(ports)
startup.log_bound = log_bound
sys.argv = ["wherry", *sys.argv[2:]]
from wherry.cli.entry import main
main()
"""


def _matching(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules for p in names if m == p or m.startswith(p + "."))


def _wait_for(path: Path, lines: list[str], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path.name}:\n" + "".join(lines)
        time.sleep(0.02)


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def test_defaults_bind_the_kafka_listener_before_the_console_and_stay_lean(
    tmp_path: Path,
) -> None:
    out = tmp_path / "modules.json"
    cmd = [
        sys.executable, "-c", _CHILD, str(out), "server",
        "--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(tmp_path / "data"),
    ]  # no http.listeners: the default one (on a port the OS chooses, as the Kafka one is)
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "metrics and console on " in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(60) and proc.poll() is None, "not ready:\n" + "".join(lines)
        url = next(ln for ln in lines if "console on " in ln).split("console on ")[1].split()[0]
        at_bind = set(json.loads((tmp_path / "modules.json.bind").read_text()))
        assert "wherry.server.broker" in at_bind and "uvloop" in at_bind
        early = _matching(at_bind, NOT_AT_BIND)
        assert not early, f"imported before the Kafka listener was bound: {early}"

        (tmp_path / "modules.json.req").touch()
        _wait_for(out, lines)
        idle = set(json.loads(out.read_text()))
        assert {"wherry.observability.service", "wherry.observability.events"} <= idle
        assert "crc32c._crc32c" in idle  # the extension, without its package's __init__
        held = _matching(idle, NOT_WHEN_IDLE)
        assert not held, f"held by an idle broker: {held}"

        # ... and the HTTP listener answers as ever, /metrics included (built now)
        assert _get(f"{url}/healthz") == (200, b"ok\n")
        status, metrics = _get(f"{url}/metrics")
        assert status == 200
        assert b"kafka_server_replicamanager_underreplicatedpartitions" in metrics
        assert b"process_resident_memory_bytes" in metrics
        status, page = _get(f"{url}/")
        assert status == 200 and page.lstrip().lower().startswith(b"<!doctype html>")
    finally:
        stop_process(proc, 30.0)


def test_crc32c_is_the_packages_without_its_init() -> None:
    code = (
        "import sys\n"
        "from wherry.common.crc32c import crc32c\n"
        "assert 'crc32c' not in sys.modules and 'importlib.metadata' not in sys.modules\n"
        "assert crc32c(b'123456789') == 0xE3069283  # the CRC-32C check value\n"
        "assert crc32c(b'6789', crc32c(b'12345')) == 0xE3069283  # continued\n"
        "import crc32c as package  # a later import of the package: the same extension\n"
        "assert package.crc32c is crc32c\n"
        "assert package.crc32c(b'abc') == crc32c(bytearray(b'abc')) == crc32c(memoryview(b'abc'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr


def test_compression_imports_cramjam_with_the_first_compressed_batch() -> None:
    code = (
        "import sys, gzip\n"
        "from wherry.protocol import compression, records\n"
        "assert 'cramjam' not in sys.modules\n"
        "data = b'wherry ' * 1000\n"
        "assert compression.decompress(compression.GZIP, gzip.compress(data)) == data\n"
        "assert 'cramjam' in sys.modules\n"
        "for codec in (compression.SNAPPY, compression.LZ4, compression.ZSTD):\n"
        "    packed = compression.compress(codec, data)\n"
        "    assert compression.decompress(codec, packed) == data, codec\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("recovery_s", [0.0, 0.3])
def test_http_start_waits_for_the_bind_unless_the_start_is_long(recovery_s: float) -> None:
    """A quick start brings the HTTP listener up once asked (after the Kafka bind); one still
    short of its bind after the grace brings it up meanwhile (a long log recovery)."""

    async def run() -> list[str]:
        events: list[str] = []

        async def start_http() -> None:
            events.append("http")

        http = HttpStart(start_http, grace_s=0.1)
        await asyncio.sleep(recovery_s)  # the start before the bind
        events.append("bind")
        await http.started()
        await http.started()  # once only
        http.cancel()  # stopping after: nothing to undo
        return events

    events = asyncio.run(run())
    assert events == (["bind", "http"] if recovery_s < 0.1 else ["http", "bind"])


def test_http_start_cancelled_by_a_failed_start_never_starts() -> None:
    async def run() -> list[str]:
        events: list[str] = []

        async def start_http() -> None:
            events.append("http")

        HttpStart(start_http, grace_s=0.05).cancel()
        await asyncio.sleep(0.15)
        return events

    assert asyncio.run(run()) == []
