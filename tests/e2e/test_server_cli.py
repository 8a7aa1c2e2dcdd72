"""`wherry server` as a user starts it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.kafka_wire import call


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_defaults_and_graceful_shutdown(tmp_path: Path, sig: signal.Signals) -> None:
    """Every default but the listener (the default, 127.0.0.1:9092, is checked by
    tests/server/test_config.py without binding it: the suite must not take a port a user's
    own broker may be on)."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "wherry", "server",
                             "--listeners", "PLAINTEXT://127.0.0.1:0"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        while "ready on" not in line:
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "server exited"
            assert time.monotonic() - started < 30
        m = re.search(r"wherry broker 0 ready on (127\.0\.0\.1:\d+)$", line.strip())
        assert m is not None, line
        resp = call(m.group(1), 18, 3, {"client_software_name": "t",
                                        "client_software_version": "1"})
        assert resp.error_code == ErrorCode.none
        data = tmp_path / "wherry-data"
        assert (data / "meta.properties").exists()
        assert (data / "__meta" / "metadata.db").exists()
        assert (data / "state-change.log").exists()
        os.kill(proc.pid, sig)
        assert proc.wait(30) == 0
        assert (data / ".kafka_cleanshutdown").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_bad_config_is_a_clear_error(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "wherry", "server", "--override",
                        "num.partitions=zero"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0
    assert "num.partitions" in r.stderr


def test_second_broker_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    from tests.broker_process import BrokerProcess

    a = BrokerProcess(tmp_path / "d").start()
    try:
        r = subprocess.run([sys.executable, "-m", "wherry", "server", "--listeners",
                            "PLAINTEXT://127.0.0.1:0", "--log-dirs", str(tmp_path / "d")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode != 0
        assert "in use" in (r.stdout + r.stderr) or "lock" in (r.stdout + r.stderr).lower()
    finally:
        a.stop()
