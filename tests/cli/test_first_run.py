"""First run as a new user sees it (issue 17, items 5 and 6): the shipped
config/server.properties starts a broker; a new data dir is not an unclean shutdown; a clean
stop (SIGTERM, Ctrl-C) logs no ERROR; state-change lines stay in state-change.log; --log-format
json; `wherry dev --brokers 3` replicates __consumer_offsets 3 times. Child processes with
bounded waits, stopped by their PID."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from wherry.cli.main import JsonFormatter, dev_defaults
from wherry.testing.metadata_probe import fetch_metadata

SHIPPED = Path(__file__).parents[2] / "config" / "server.properties"
READY_TIMEOUT_S = 30.0


class Child:
    """A `wherry ...` child process whose output is collected line by line."""

    def __init__(self, args: list[str], ready: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wherry", *args], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._ready = threading.Event()
        self._marker = ready
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(READY_TIMEOUT_S) or self.proc.poll() is not None:
            self.kill()
            raise AssertionError("did not start:\n" + "".join(self.lines[-40:]))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if self._marker in line:
                self._ready.set()
        self._ready.set()

    def stop(self, sig: signal.Signals) -> int:
        os.kill(self.proc.pid, sig)
        try:
            return self.proc.wait(30)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def text(self) -> str:
        time.sleep(0.1)  # the pump's last lines
        return "".join(self.lines)


def _server(data: Path, *extra: str) -> Child:
    return Child(["server", str(SHIPPED), "--listeners", "PLAINTEXT://127.0.0.1:0",
                  "--log-dirs", str(data), *extra], ready="ready on")


def _errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if " ERROR " in ln or '"level": "ERROR"' in ln
            or "Traceback" in ln]


def test_shipped_config_fresh_dir_json_logs_then_clean_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = _server(data, "--log-format", "json")
    assert first.stop(signal.SIGTERM) == 0
    records = []
    for line in first.text().splitlines():
        if line.startswith("wherry broker"):  # the ready line on stdout
            continue
        records.append(json.loads(line))  # every log line is one JSON object
    assert records and all({"time", "level", "logger", "message"} <= r.keys() for r in records)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", r["time"])
               for r in records)
    loading = [r["message"] for r in records if r["message"].startswith("loading logs from")]
    assert loading and all("(new log dir)" in m for m in loading), loading
    assert not any("unclean" in r["message"] for r in records)
    assert [r for r in records if r["level"] == "ERROR"] == []
    assert not any("were supplied but are not used yet" in r["message"] for r in records)

    second = _server(data)
    assert second.stop(signal.SIGINT) == 0
    text = second.text()
    assert "(clean shutdown)" in text and "unclean" not in text
    assert _errors(text) == []


def test_json_formatter_carries_the_exception() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        record = logging.LogRecord("wherry.x", logging.ERROR, __file__, 1, "failed %s", ("now",),
                                   sys.exc_info())
    out = json.loads(JsonFormatter().format(record))
    assert out["level"] == "ERROR" and out["logger"] == "wherry.x"
    assert out["message"] == "failed now"
    assert "RuntimeError: boom" in out["exception"]


def test_dev_cluster_of_three_offsets_rf3_state_changes_in_files_ctrl_c_no_error(
    tmp_path: Path,
) -> None:
    assert dev_defaults(1) == {"offsets.topic.replication.factor": "1",
                               "transaction.state.log.replication.factor": "1",
                               "transaction.state.log.min.isr": "1"}
    assert dev_defaults(5) == {"offsets.topic.replication.factor": "3",
                               "transaction.state.log.replication.factor": "3",
                               "transaction.state.log.min.isr": "2"}
    d = tmp_path / "dev"
    dev = Child(["dev", "--brokers", "3", "--base-port", "0", "--dir", str(d),
                 "--override", "group.initial.rebalance.delay.ms=0"],
                ready="wherry dev cluster ready")
    try:
        m = re.search(r"bootstrap servers (\S+),", dev.text())
        assert m is not None
        bootstrap = m.group(1)
        p = Producer({"bootstrap.servers": bootstrap})
        p.produce("first-run", b"x")
        assert p.flush(15) == 0
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": "first-run",
                      "auto.offset.reset": "earliest"})
        try:
            c.subscribe(["first-run"])
            deadline = time.monotonic() + 20
            msg = None
            while msg is None and time.monotonic() < deadline:
                got = c.poll(0.5)
                msg = got if got is not None and got.error() is None else None
            assert msg is not None
            c.commit(asynchronous=False)
        finally:
            c.close()
        view = fetch_metadata(bootstrap.split(",")[0], ["__consumer_offsets"])
        replicas = {len(p.replicas) for p in view.topics["__consumer_offsets"].values()}
        assert replicas == {3}, replicas
    finally:
        rc = dev.stop(signal.SIGINT)
    text = dev.text()
    assert rc == 0, text[-3000:]
    assert _errors(text) == [], _errors(text)
    assert "state_change" not in text  # on the console only at DEBUG
    logs = [d / f"broker-{b}" / "state-change.log" for b in range(3)]
    assert all(f.exists() and f.stat().st_size > 0 for f in logs)
