import base64
import uuid
from pathlib import Path

import pytest

from wherry.server.config import (
    ZK_SECURITY_KEYS,
    BrokerConfigError,
    Endpoint,
    load_config,
    new_cluster_id,
    parse_listeners,
)
from wherry.server.config_keys import unknown_keys


def test_defaults() -> None:
    cfg = load_config()
    assert cfg.broker_id == 0
    assert cfg.listeners == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert cfg.log_dirs == (Path("wherry-data"),)
    assert cfg.auto_create_topics_enable and cfg.delete_topic_enable


def test_properties_file_and_overrides(tmp_path: Path) -> None:
    f = tmp_path / "server.properties"
    f.write_text("# comment\nbroker.id=3\nlisteners=PLAINTEXT://127.0.0.1:9999\n"
                 "log.dirs=/a,/b\nlog.retention.hours=2\nnum.partitions : 4\n"
                 "advertised.listeners=PLAINTEXT://localhost:9999\n")
    cfg = load_config(f, {"num.partitions": "6", "log.segment.bytes": "4096"})
    assert cfg.broker_id == 3
    assert cfg.log_dirs == (Path("/a"), Path("/b"))
    assert cfg.num_partitions == 6
    assert cfg.advertised[0].host == "localhost"
    assert cfg.log_defaults.retention_ms == 2 * 3_600_000
    assert cfg.log_defaults.segment_bytes == 4096


def test_the_log_managers_checkpoint_intervals_are_read() -> None:
    cfg = load_config(None, {
        "log.flush.offset.checkpoint.interval.ms": "300",
        "log.flush.start.offset.checkpoint.interval.ms": "500",
    })
    assert cfg.log_flush_offset_checkpoint_interval_ms == 300
    assert cfg.log_flush_start_offset_checkpoint_interval_ms == 500
    assert "log.flush.start.offset.checkpoint.interval.ms" not in unknown_keys(cfg.raw)


@pytest.mark.parametrize("props", [
    {"broker.id": "x"},
    {"log.flush.start.offset.checkpoint.interval.ms": "0"},
    {"listeners": "127.0.0.1:9092"},
    {"num.partitions": "0"},
    {"log.segment.bytes": "big"},
    {"auto.create.topics.enable": "maybe"},
])
def test_bad_values_are_clear_errors(props: dict[str, str]) -> None:
    with pytest.raises(BrokerConfigError):
        load_config(None, props)


def test_parse_listeners() -> None:
    assert parse_listeners("plaintext://[::1]:1,EXTERNAL://h:2") == [
        Endpoint("PLAINTEXT", "::1", 1), Endpoint("EXTERNAL", "h", 2)]


def test_zookeeper_security_keys_are_zk_acls_and_each_is_read() -> None:
    from wherry.coordination import zk_acl

    assert ZK_SECURITY_KEYS == (zk_acl.SET_ACL_KEY, zk_acl.USERNAME_KEY, zk_acl.PASSWORD_KEY)
    assert load_config(None, {}).zookeeper_security is None
    cfg = load_config(None, {"zookeeper.digest.username": "u", "zookeeper.digest.password": "p"})
    assert cfg.zookeeper_security is not None and cfg.zookeeper_security.username == "u"
    for key, value in (("zookeeper.set.acl", "true"), ("zookeeper.digest.password", "p")):
        with pytest.raises(BrokerConfigError, match=r"zookeeper\.digest"):
            load_config(None, {key: value})  # one of them alone is refused


def test_a_new_cluster_id_is_a_random_uuids_bytes() -> None:
    ids = {new_cluster_id() for _ in range(200)}
    assert len(ids) == 200
    for cid in ids:
        assert len(cid) == 22 and "=" not in cid
        u = uuid.UUID(bytes=base64.urlsafe_b64decode(cid + "=="))
        assert u.version == 4 and u.variant == uuid.RFC_4122
