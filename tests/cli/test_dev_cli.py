"""`wherry dev --brokers 3` as a child process: three brokers answer Metadata alike, SIGTERM
stops them all cleanly. Bounded waits; the process is stopped by its PID."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from click.testing import CliRunner

from wherry.cli.main import main
from wherry.testing.metadata_probe import fetch_metadata

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0
_BROKER_LINE = re.compile(r"wherry broker (\d+) ready on (\S+)( \(controller\))?")


def test_dev_cluster_of_three_serves_metadata_and_stops_on_sigterm(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wherry",
            "dev",
            "--brokers",
            "3",
            "--base-port",
            "0",
            "--dir",
            str(tmp_path / "dev"),
            "--override",
            "num.partitions=2",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "wherry dev cluster ready" in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(READY_TIMEOUT_S) and proc.poll() is None, "".join(lines[-40:])
        brokers = {
            int(m.group(1)): (m.group(2), bool(m.group(3)))
            for m in map(_BROKER_LINE.search, lines)
            if m
        }
        assert sorted(brokers) == [0, 1, 2]
        controllers = [b for b, (_, is_controller) in brokers.items() if is_controller]
        assert len(controllers) == 1
        addresses = {b: address for b, (address, _) in brokers.items()}
        for b, address in addresses.items():
            view = fetch_metadata(address)
            assert view.controller_id == controllers[0], b
            assert {i: f"{h}:{p}" for i, (h, p) in view.brokers.items()} == addresses, b
        # Every broker keeps its own data dir; the store is shared.
        for b in range(3):
            assert (tmp_path / "dev" / f"broker-{b}" / "meta.properties").is_file()
        assert (tmp_path / "dev" / "__meta" / "metadata.db").is_file()

        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(STOP_TIMEOUT_S) == 0
        print(f"stopped in {time.monotonic() - started:.2f} s")
        for b in range(3):
            assert (tmp_path / "dev" / f"broker-{b}" / ".kafka_cleanshutdown").is_file()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_dev_rejects_per_broker_overrides(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main, ["dev", "--dir", str(tmp_path), "--override", "broker.id=7"]
    )
    assert result.exit_code == 1
    assert "set per broker" in result.output


def test_dev_keeps_the_user_default_port() -> None:
    """Users get 9092 (tests pass --base-port 0, and the testing helpers default to 0)."""
    result = CliRunner().invoke(main, ["dev", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "default: 9092" in text and "0: ports chosen by the OS" in text
