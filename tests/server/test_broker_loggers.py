"""A broker's loggers as Kafka's BROKER_LOGGER config resource (server/broker_loggers.py):
levels described and changed while running, Kafka's checks and words; over the wire with
kafka-python's admin client (confluent-kafka has no such resource type)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from wherry.server import broker_loggers
from wherry.server.broker_loggers import DELETE, SET, LoggerConfigError
from wherry.testing.cluster import DevCluster

NAME = f"wherry.test_loggers_{uuid.uuid4().hex[:6]}"


@pytest.fixture(autouse=True)
def restore_levels() -> Iterator[None]:
    """The loggers are the process's: every level this test changes is put back."""
    loggers = {n: lg.level for n, lg in logging.root.manager.loggerDict.items()
               if isinstance(lg, logging.Logger)}
    root = logging.getLogger().level
    yield
    for n, level in loggers.items():
        logging.getLogger(n).setLevel(level)
    logging.getLogger().setLevel(root)


def test_levels_and_changes() -> None:
    child = logging.getLogger(f"{NAME}.child")
    logging.getLogger(NAME).setLevel(logging.INFO)
    got = dict(broker_loggers.levels())
    assert broker_loggers.levels()[0][0] == "root"
    assert (got[NAME], got[f"{NAME}.child"]) == ("INFO", "INFO")
    assert broker_loggers.levels([NAME, "no.such"]) == [(NAME, "INFO")]

    broker_loggers.apply("0", 0, [(NAME, "DEBUG", SET)])
    assert child.getEffectiveLevel() == logging.DEBUG  # below it, at once
    assert dict(broker_loggers.levels([f"{NAME}.child"])) == {f"{NAME}.child": "DEBUG"}
    broker_loggers.apply("0", 0, [(f"{NAME}.child", "OFF", SET), (NAME, None, DELETE)])
    assert logging.getLogger(NAME).level == logging.NOTSET  # back to its parent's
    assert not child.isEnabledFor(logging.CRITICAL)
    assert dict(broker_loggers.levels([f"{NAME}.child", NAME]))[f"{NAME}.child"] == "OFF"
    # validate_only checks and changes nothing
    broker_loggers.apply("0", 0, [(NAME, "ERROR", SET)], validate_only=True)
    assert logging.getLogger(NAME).level == logging.NOTSET


@pytest.mark.parametrize(("changes", "code", "message"), [
    ([("no.such.logger", "DEBUG", SET)], ErrorCode.invalid_config,
     "Logger no.such.logger does not exist!"),
    ([(NAME, "LOUD", SET)], ErrorCode.invalid_config,
     f"Cannot set the log level of {NAME} to LOUD as it is not a supported log level. "
     "Valid log levels are DEBUG, ERROR, FATAL, INFO, OFF, TRACE, WARN"),
    ([(NAME, "debug", SET)], ErrorCode.invalid_config,
     f"Cannot set the log level of {NAME} to debug as it is not a supported log level. "
     "Valid log levels are DEBUG, ERROR, FATAL, INFO, OFF, TRACE, WARN"),
    ([("root", None, DELETE)], ErrorCode.invalid_request,
     "Removing the log level of the root logger is not allowed"),
    ([(NAME, "DEBUG", 2)], ErrorCode.invalid_request,
     "APPEND operation is not allowed for the BROKER_LOGGER resource"),
    ([(NAME, "DEBUG", 3)], ErrorCode.invalid_request,
     "SUBTRACT operation is not allowed for the BROKER_LOGGER resource"),
    # one bad change refuses the whole resource: the good one before it is not made
    ([(NAME, "DEBUG", SET), ("no.such.logger", "DEBUG", SET)], ErrorCode.invalid_config,
     "Logger no.such.logger does not exist!"),
])
def test_refused_changes(changes: list[tuple[str, str | None, int]], code: ErrorCode,
                         message: str) -> None:
    logging.getLogger(NAME).setLevel(logging.INFO)
    with pytest.raises(LoggerConfigError) as e:
        broker_loggers.apply("0", 0, changes)
    assert (e.value.error_code, e.value.message) == (code, message)
    assert logging.getLogger(NAME).level == logging.INFO


def test_resource_name() -> None:
    assert broker_loggers.resource_problem("0", 0) is None
    assert broker_loggers.resource_problem("", 0) == "Broker id must not be empty"
    assert broker_loggers.resource_problem("x", 0) == "Node id must be an integer, but it is: x"
    assert broker_loggers.resource_problem("2", 0) == (
        "Unexpected broker id, expected 0 but received 2")


def test_over_the_wire(tmp_path: Path) -> None:
    logging.getLogger(NAME).setLevel(logging.INFO)
    with DevCluster(tmp_path / "c", brokers=1) as c:
        c.wait_for_controller()
        admin = KafkaAdminClient(bootstrap_servers=c.bootstrap)
        try:
            described = admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER_LOGGER, "0")])
            entries = described["broker_logger"]["0"]
            assert entries["root"]["config_source"] == "DYNAMIC_BROKER_LOGGER_CONFIG"
            assert entries[NAME]["value"] == "INFO"
            assert not entries[NAME]["read_only"]

            admin.alter_configs(
                [ConfigResource(ConfigResourceType.BROKER_LOGGER, "0", {NAME: "DEBUG"})],
                incremental=True)
            assert logging.getLogger(NAME).level == logging.DEBUG
            admin.alter_configs(
                [ConfigResource(ConfigResourceType.BROKER_LOGGER, "0",
                                {NAME: (AlterConfigOp.DELETE, None)})],
                incremental=True)
            assert logging.getLogger(NAME).level == logging.NOTSET
        finally:
            admin.close()

        # Another broker's loggers, and the legacy AlterConfigs, are refused.
        resp = kafka_wire.call(c.bootstrap, 32, 4, {
            "resources": [{"resource_type": 8, "resource_name": "1",
                           "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
        (res,) = resp.results
        assert (res.error_code, res.error_message) == (
            ErrorCode.invalid_request, "Unexpected broker id, expected 0 but received 1")
        resp = kafka_wire.call(c.bootstrap, 33, 2, {
            "resources": [{"resource_type": 8, "resource_name": "0",
                           "configs": [{"name": NAME, "value": "DEBUG"}]}],
            "validate_only": False})
        (res,) = resp.responses
        assert res.error_code == ErrorCode.invalid_request
        assert logging.getLogger(NAME).level == logging.NOTSET  # unchanged since the DELETE
