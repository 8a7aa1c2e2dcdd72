"""Config validation like Kafka's (issue 17, item 3): bad values refuse to start with one line
naming the key; unknown keys get one warning in Kafka's words and the broker still starts.
Each bad config is checked twice: `BrokerConfig.from_props` directly, and `wherry server` as a
subprocess (bounded wait, nothing bound)."""

from __future__ import annotations

import ast
import inspect
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from wherry.server import config as config_module
from wherry.server.config import BrokerConfig, BrokerConfigError
from wherry.server.config_keys import is_known, unknown_keys, unused_warning, warn_unused

# (flags or overrides for `wherry server`, the key the line must name, a phrase of the line)
BAD: list[tuple[list[str], str, str]] = [
    (["--listeners", "PLAINTEXT://:70000"], "listeners", "out of range (0-65535)"),
    (["--listeners", "PLAINTEXT://127.0.0.1:99999"], "listeners", "out of range"),
    (["--broker-id", "-5"], "broker.id", "Invalid value -5 for configuration broker.id"),
    (["--override", "node.id=-1"], "node.id", "Value must be at least 0"),
    (["--override", "broker.id=abc"], "broker.id", "Not a number of type INT"),
    (["--override", "log.cleanup.policy=bogus"], "log.cleanup.policy", "String must be one of"),
    (["--override", "compression.type=brotli"], "compression.type", "String must be one of"),
    (["--override", "log.message.timestamp.type=Now"], "log.message.timestamp.type",
     "String must be one of"),
    (["--override", "num.partitions=many"], "num.partitions", "Not a number of type INT"),
    (["--override", "num.partitions=0"], "num.partitions", "Value must be at least 1"),
    (["--override", "log.retention.hours=x"], "log.retention.hours", "Not a number"),
    (["--override", "default.replication.factor=0"], "default.replication.factor",
     "Value must be at least 1"),
    (["--override", "auto.create.topics.enable=yes"], "auto.create.topics.enable",
     "either true or false"),
    (["--override", "replica.fetch.max.bytes=1MB"], "replica.fetch.max.bytes", "Not a number"),
    (["--override", "offsets.topic.replication.factor=0"], "offsets.topic.replication.factor",
     "Value must be at least 1"),
    (["--override", "authorizer.class.name=com.example.Auth"], "authorizer.class.name",
     "Invalid value com.example.Auth"),
    (["--listeners", "PLAINTEXT://0.0.0.0:0"], "listeners", "nonroutable meta-address"),
    # what listener_security.py checks, through the same path
    (["--listeners", "FOO://127.0.0.1:0"], "listener.security.protocol.map", "listener FOO"),
    (["--override", "listener.security.protocol.map=PLAINTEXT:TLS"],
     "listener.security.protocol.map", "unknown security protocol TLS"),
    (["--listeners", "SASL_PLAINTEXT://127.0.0.1:0"], "sasl.enabled.mechanisms", "GSSAPI"),
]


def _props(args: list[str]) -> dict[str, str]:
    flags = {"--listeners": "listeners", "--broker-id": "broker.id"}
    props: dict[str, str] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        if flag == "--override":
            k, v = value.split("=", 1)
            props[k] = v
        else:
            props[flags[flag]] = value
    return props


@pytest.mark.parametrize(("args", "key", "phrase"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_config_is_refused_by_from_props(args: list[str], key: str, phrase: str) -> None:
    props = _props(args)
    if key == "sasl.enabled.mechanisms":  # checked with the key stores, when the broker starts
        from wherry.server.listener_security import SecurityConfigError, broker_security

        cfg = BrokerConfig.from_props(props)
        with pytest.raises(SecurityConfigError) as sec:
            broker_security(cfg.raw, cfg.listeners, cfg.advertised)
        message = str(sec.value)
    else:
        with pytest.raises(BrokerConfigError) as info:
            BrokerConfig.from_props(props)
        message = str(info.value)
    assert "\n" not in message
    assert key in message and phrase in message, message


@pytest.mark.parametrize(("args", "key", "phrase"), BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_config_refuses_to_start_the_server(
    tmp_path: Path, args: list[str], key: str, phrase: str
) -> None:
    cmd = [sys.executable, "-m", "wherry", "server", "--log-dirs", str(tmp_path / "d")]
    if "--listeners" not in args:
        cmd += ["--listeners", "PLAINTEXT://127.0.0.1:0"]
    proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=30,
                          stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode != 0
    assert "ready on" not in proc.stdout
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    assert lines[0].startswith("Error: ") and key in lines[0] and phrase in lines[0], lines[0]
    assert not (tmp_path / "d").exists()  # refused before anything was written


def test_unknown_keys_one_warning_in_kafkas_words() -> None:
    props = {"log.retention.hour": "5", "num.partitions": "3", "foo.bar": "1",
             "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "x",
             "listener.name.ssl.ssl.keystore.location": "/k", "log.retention.hours": "5"}
    assert unknown_keys(props) == ["foo.bar", "log.retention.hour"]
    assert unused_warning(["log.retention.hour"]) == (
        "These configurations '[log.retention.hour]' were supplied but are not used yet.")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger("test.config.unused")
    logger.addHandler(Keep())
    warn_unused(props, logger)
    warn_unused({"num.partitions": "1"}, logger)  # nothing unknown: nothing logged
    assert [(r.levelno, r.getMessage()) for r in records] == [(logging.WARNING, (
        "These configurations '[foo.bar, log.retention.hour]' were supplied but are not "
        "used yet."))]


def test_every_key_the_broker_reads_is_known() -> None:
    """The dotted names in BrokerConfig.from_props, the fetchers' keys, the security keys and
    the topic configs' broker synonyms are all known; Kafka's shipped server.properties too."""
    source = inspect.getsource(config_module.BrokerConfig.from_props)
    read = {n.value for n in ast.walk(ast.parse(source.strip().replace("\n    ", "\n")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and n.value.count(".") >= 1 and n.value.replace(".", "").replace("_", "").isalnum()
            and n.value == n.value.lower() and " " not in n.value}
    assert {"broker.id", "offsets.topic.replication.factor", "log.dirs"} <= read
    assert [k for k in sorted(read) if not is_known(k)] == []
    for key in ("replica.fetch.max.bytes", "log.retention.hours", "log.roll.hours",
                "compression.type", "message.max.bytes", "min.insync.replicas",
                "unclean.leader.election.enable", "ssl.keystore.location", "sasl.jaas.config",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                "listener.name.internal.sasl.enabled.mechanisms", "super.users",
                "allow.everyone.if.no.acl.found", "authorizer.class.name", "http.listeners",
                "num.network.threads", "transaction.state.log.replication.factor"):
        assert is_known(key), key
    shipped = Path(__file__).parents[2] / "config" / "server.properties"
    assert unknown_keys(config_module.read_properties(shipped)) == []
    commented = {line[1:].split("=", 1)[0] for line in shipped.read_text().splitlines()
                 if re.match(r"#[a-z][a-z0-9._-]*=", line)}
    assert "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config" in commented
    assert [k for k in sorted(commented) if not is_known(k)] == []


def test_unknown_keys_warn_and_the_server_still_starts(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data", overrides=["log.retention.hour=5", "foo.bar=1"]).start()
    try:
        text = b.log_text()
    finally:
        assert b.stop() == 0
    warnings = [ln for ln in text.splitlines() if "were supplied but are not used yet" in ln]
    assert len(warnings) == 1, text
    assert "WARNING These configurations '[foo.bar, log.retention.hour]'" in warnings[0]
