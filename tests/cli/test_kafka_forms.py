"""Kafka's option forms: every client tool takes `--bootstrap-server` and `--command-config`;
the state-change merge takes `--logs a,b,c` and `--logs-regex` besides repeated `--logs`; a bad
`--log-level` and a bad `http.listeners` are refused with one line each."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from confluent_kafka.admin import AdminClient, NewTopic

from tests.spark_jvm import stop_spark_jvm
from wherry.cli.common import CommandError
from wherry.cli.main import main
from wherry.cli.serve import LogLevelError, log_level_number
from wherry.cli.state_change_log import parse_time, resolve_logs
from wherry.runtime.state_change_log import STATE_CHANGE_LOG_FILE, merge_state_change_logs

ROOT = Path(__file__).parents[2]
OFFLINE_TOOLS = {"server", "dev", "dump-log", "state-change-log merge"}  # no broker to reach


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(main)
    out: dict[str, click.Command] = {}

    def walk(cmd: click.Command, name: str) -> None:
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                found = cmd.get_command(ctx, sub)
                assert found is not None
                walk(found, f"{name} {sub}".strip())
        else:
            out[name] = cmd

    walk(main, "")
    return out


def _flags(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}


def test_every_client_tool_takes_bootstrap_server_and_command_config() -> None:
    commands = _commands()
    assert {"topics create", "produce", "consume", "verify-replicas", "log-dirs"} <= set(commands)
    for name, cmd in commands.items():
        if name in OFFLINE_TOOLS:
            continue
        assert {"--bootstrap-server", "--command-config"} <= _flags(cmd), name
    # The older spellings stay.
    produce = _flags(commands["produce"])
    assert {"--producer.config", "--producer-config", "--broker-list"} <= produce
    assert {"--consumer.config", "--consumer-config"} <= _flags(commands["consume"])
    assert "--broker-list" in _flags(commands["verify-replicas"])


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "wherry", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          stdin=subprocess.DEVNULL)


def test_console_tools_read_command_config(cli_bootstrap: str, tmp_path: Path) -> None:
    topic = f"forms-{uuid.uuid4().hex[:8]}"
    good = tmp_path / "good.properties"
    good.write_text("linger.ms=0\nclient.id=forms-test\n")
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.client.setting=1\n")
    made = _run("topics", "create", "--bootstrap-server", cli_bootstrap, "--topic", topic)
    assert made.returncode == 0, made.stderr
    p = subprocess.run([sys.executable, "-m", "wherry", "produce", "--bootstrap-server",
                        cli_bootstrap, "--topic", topic, "--command-config", str(good)],
                       input="hello\n", capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    c = _run("consume", "--bootstrap-server", cli_bootstrap, "--topic", topic,
             "--from-beginning", "--max-messages", "1", "--timeout-ms", "30000",
             "--command-config", str(good))
    assert c.returncode == 0 and c.stdout.strip() == "hello", c.stderr
    # The file is read: a setting the client does not know is refused, in one line.
    refused = _run("consume", "--bootstrap-server", cli_bootstrap, "--topic", topic,
                   "--command-config", str(bad), "--max-messages", "1")
    assert refused.returncode == 1
    assert refused.stderr.count("\n") == 1 and "no.such.client.setting" in refused.stderr


def test_verify_replicas_reads_command_config(cli_bootstrap: str, tmp_path: Path) -> None:
    plain = tmp_path / "plain.properties"
    plain.write_text("security.protocol=PLAINTEXT\nclient.id=verify-forms\n")
    ok = _run("verify-replicas", "--bootstrap-server", cli_bootstrap, "--command-config",
              str(plain), "--topics-include", "no-such-topic-.*")
    assert ok.returncode == 0, ok.stderr
    assert "No divergence among 0 partitions" in ok.stdout
    gssapi = tmp_path / "gssapi.properties"
    gssapi.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\n")
    refused = _run("verify-replicas", "--bootstrap-server", cli_bootstrap, "--command-config",
                   str(gssapi))
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        "Error: sasl.mechanism=GSSAPI is not supported here: expected one of PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512"]


# --------------------------------------------------------------------------------------------
# --log-level and http.listeners


def test_log_levels_are_kafkas_names_in_any_case() -> None:
    assert log_level_number("debug") == log_level_number("TRACE") == 10
    assert log_level_number("Warn") == log_level_number("WARNING") == 30
    assert log_level_number("fatal") == 50
    assert log_level_number("OFF") > 50
    with pytest.raises(LogLevelError):
        log_level_number("FOO")


@pytest.mark.parametrize("command", ["server", "dev"])
def test_a_bad_log_level_is_refused_in_one_line(command: str, tmp_path: Path) -> None:
    r = _run(command, "--log-level", "FOO", "--log-dirs" if command == "server" else "--dir",
             str(tmp_path / "d"))
    assert r.returncode != 0
    assert r.stderr.splitlines() == [
        "Error: Invalid value FOO for --log-level: expected one of TRACE, DEBUG, INFO, WARN, "
        "ERROR, FATAL, OFF"]
    assert not (tmp_path / "d").exists()  # refused before anything started


def test_a_bad_http_listener_says_its_prefix_once(tmp_path: Path) -> None:
    r = _run("server", "--override", "http.listeners=garbage", "--log-dirs", str(tmp_path / "d"))
    assert r.returncode != 0
    assert r.stderr.splitlines() == [
        "Error: Invalid value garbage for configuration http.listeners: expected "
        "http://HOST:PORT (only http is supported)"]
    two = _run("server", "--override", "http.listeners=http://127.0.0.1:0,ftp://x:1",
               "--log-dirs", str(tmp_path / "d"))
    assert two.stderr.count("Invalid value") == 1 and "ftp://x:1: expected" in two.stderr


# --------------------------------------------------------------------------------------------
# state-change-log merge: --logs a,b,c and --logs-regex


def _logs(tmp_path: Path, names: list[str]) -> list[Path]:
    files = []
    for i, name in enumerate(names):
        d = tmp_path / name
        d.mkdir()
        f = d / STATE_CHANGE_LOG_FILE
        f.write_text(f"line {i}\n")
        files.append(f.resolve())
    return files


def test_logs_take_comma_lists_repeats_and_regexes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                   ) -> None:
    a, b, c, other = _logs(tmp_path, ["broker-0", "broker-1", "broker-2", "other"])
    assert resolve_logs((f"{a},{b.parent},{c}",)) == [a, b, c]
    assert resolve_logs((str(a), f"{b},{c}")) == [a, b, c]
    assert resolve_logs((), (f"{tmp_path}/broker-.*",)) == [a, b, c]
    # Files matched by name too, and a regex relative to the current directory.
    assert resolve_logs((), (f"{a.parent}/state-change\\.log",)) == [a]
    monkeypatch.chdir(tmp_path)
    assert resolve_logs((str(other),), ("broker-[02]",)) == [other, a, c]
    assert resolve_logs((str(a),), ("broker-0",)) == [a]  # each file once
    with pytest.raises(CommandError, match="No state-change log matches"):
        resolve_logs((), ("nothing-.*",))
    with pytest.raises(CommandError, match="Invalid --logs-regex"):
        resolve_logs((), ("broker-(",))
    with pytest.raises(CommandError, match="No state-change log at"):
        resolve_logs((f"{a},{tmp_path / 'missing'}",))
    with pytest.raises(CommandError, match="Missing required option"):
        resolve_logs((), ())


def test_times_in_kafkas_form_too() -> None:
    iso = parse_time("2025-11-22T00:14:03.123Z", "start")
    assert parse_time("2025-11-22 00:14:03,123", "start") == iso == 1763770443123


def _broker_log(data: Path) -> Path:
    """A real broker's state-change.log: start one, create a topic, stop it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "wherry", "server", "--listeners", "PLAINTEXT://127.0.0.1:0",
         "--log-dirs", str(data), "--override", "http.listeners="],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert proc.stdout is not None
        address = ""
        for line in proc.stdout:
            if m := re.search(r"ready on (\S+)", line):
                address = m.group(1)
                break
        assert address
        admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
        admin.create_topics([NewTopic("merge-forms", 2, 1)])["merge-forms"].result(30)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return data / STATE_CHANGE_LOG_FILE


@pytest.mark.slow
@pytest.mark.spark
def test_merge_cli_with_a_comma_list_and_a_regex(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    source = _broker_log(tmp_path / "data")
    logs = []
    for i in range(3):
        d = tmp_path / "logs" / f"broker-{i}"
        d.mkdir(parents=True)
        (d / STATE_CHANGE_LOG_FILE).write_bytes(source.read_bytes())
        logs.append(d / STATE_CHANGE_LOG_FILE)
    expected = [r.line for r in merge_state_change_logs(logs, topic="merge-forms")]
    assert expected
    from pyspark import SparkContext

    jvm_before = SparkContext._gateway  # a JVM the suite's Spark fixture runs is left alone
    runner = CliRunner()
    try:
        for args in (["--logs", ",".join(map(str, logs))],
                     ["--logs-regex", f"{tmp_path / 'logs'}/broker-.*"],
                     ["--logs", str(logs[0]), "--logs", f"{logs[1]},{logs[2]}"]):
            result = runner.invoke(main, ["state-change-log", "merge", *args, "--topic",
                                          "merge-forms", "--master", "local[1]"],
                                   catch_exceptions=False)
            assert result.exit_code == 0, result.output
            assert result.stdout.splitlines() == expected, args
    finally:
        if jvm_before is None:  # the merge started a JVM in this process: PySpark keeps it
            stop_spark_jvm()
