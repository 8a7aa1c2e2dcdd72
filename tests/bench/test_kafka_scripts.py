"""Kafka's kafka-acls.sh / kafka-configs.sh / kafka-topics.sh as the librdkafka suite calls them,
served by wherry's tools (bench/kafka_scripts.py), against a real broker."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from bench.kafka_scripts import UsageError, translate, write_scripts
from bench.librdkafka_suite import overall, parse_numbers, parse_summary
from tests.broker_process import BrokerProcess

REPO = Path(__file__).resolve().parents[2]


def test_translate() -> None:
    assert translate("topics", ["--bootstrap-server", "h:1", "--create", "--topic", "t"]) == [
        "topics", "create", "--bootstrap-server", "h:1", "--topic", "t"]
    assert translate("configs", ["--describe", "--topic", "t"]) == [
        "configs", "--describe", "--entity-type", "topics", "--entity-name", "t"]
    assert translate("configs", ["--alter", "--broker-defaults", "--add-config", "a=1"]) == [
        "configs", "--alter", "--entity-type", "brokers", "--entity-default", "--add-config", "a=1"]
    assert translate("acls", ["--list"]) == ["acls", "--list"]
    with pytest.raises(UsageError):
        translate("topics", ["--create", "--delete", "--topic", "t"])
    with pytest.raises(UsageError):
        translate("configs", ["--broker"])


def test_suite_summary_parsing() -> None:
    out = (
        "\x1b[32m| 0081_admin                               |     PASSED |  12.000s \x1b[0m|\n"
        "| 0022_consume_batch                       |     FAILED |   3.100s | Timed out\n"
        "| 0022_consume_batch_local                 |     PASSED |   0.100s |\n"
        "| 0119_consumer_auth                       |    SKIPPED |   0.000s | needs auth\n"
    )
    summary = parse_summary(out)
    assert summary["0081_admin"] == ("PASSED", "")
    assert overall("0081", summary, 0) == ("PASSED", "")
    assert overall("0022", summary, 1) == ("FAILED", "0022_consume_batch: Timed out")
    assert overall("0119", summary, 0) == ("SKIPPED", "needs auth")
    assert overall("0042", summary, 0)[0] == "SKIPPED"
    assert overall("0042", summary, 1)[0] == "FAILED"
    assert parse_numbers("0098,0001-0003,2") == ["0001", "0002", "0003", "0098"]


@pytest.mark.timeout(120)
def test_scripts_against_a_broker(tmp_path: Path) -> None:
    bin_dir = tmp_path / "kafka" / "bin"
    write_scripts(bin_dir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    broker = BrokerProcess(
        tmp_path / "data",
        overrides=["authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
                   "allow.everyone.if.no.acl.found=true"],
    ).start()
    try:
        b = broker.bootstrap

        def sh(line: str) -> str:
            r = subprocess.run(f"{bin_dir}/{line}", shell=True, env=env, capture_output=True,
                               text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            return r.stdout

        # The calls as librdkafka's tests make them (quoting included).
        sh(f'kafka-topics.sh --bootstrap-server {b} --create --topic "t1" '
           "--replication-factor 1 --partitions 1 --config message.timestamp.type=LogAppendTime")
        sh(f"kafka-topics.sh --bootstrap-server {b} --alter --topic t1 --partitions 4")
        # As 0119: Describe allowed (once a topic has ACLs, nobody is allowed by default), Read
        # denied.
        sh(f"kafka-acls.sh --bootstrap-server {b} --add --allow-principal 'User:*' "
           "--operation Describe --allow-host '*' --topic 't1'")
        sh(f"kafka-acls.sh --bootstrap-server {b} --add --deny-principal 'User:*' "
           "--operation Read --deny-host '*' --topic 't1'")
        admin = AdminClient({"bootstrap.servers": b})
        md = admin.list_topics("t1", timeout=20)
        assert len(md.topics["t1"].partitions) == 4
        any_acl = AclBindingFilter(ResourceType.TOPIC, "t1", ResourcePatternType.LITERAL,
                                   None, None, AclOperation.ANY, AclPermissionType.ANY)
        acls = admin.describe_acls(any_acl).result(timeout=20)
        assert sorted(acls, key=str) == sorted([
            AclBinding(ResourceType.TOPIC, "t1", ResourcePatternType.LITERAL,
                       "User:*", "*", AclOperation.READ, AclPermissionType.DENY),
            AclBinding(ResourceType.TOPIC, "t1", ResourcePatternType.LITERAL,
                       "User:*", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW),
        ], key=str)
        sh(f"kafka-acls.sh --bootstrap-server {b} --remove --force --deny-principal 'User:*' "
           "--operation Read --deny-host '*' --topic 't1'")
        sh(f"kafka-acls.sh --bootstrap-server {b} --remove --force --allow-principal 'User:*' "
           "--operation Describe --allow-host '*' --topic 't1'")
        assert admin.describe_acls(any_acl).result(timeout=20) == []
        assert "message.timestamp.type=LogAppendTime" in sh(
            f"kafka-configs.sh --bootstrap-server {b} --describe --topic t1")
        sh(f"kafka-topics.sh --bootstrap-server {b} --delete --topic t1")
        # A wrong call fails with a non-zero status, as Kafka's script does.
        bad = subprocess.run(f"{bin_dir}/kafka-topics.sh --bootstrap-server {b} --topic t1",
                             shell=True, env=env, capture_output=True, timeout=60)
        assert bad.returncode != 0
    finally:
        broker.stop()
