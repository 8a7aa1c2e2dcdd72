"""The KIP-73 topic configs `leader.replication.throttled.replicas` and
`follower.replication.throttled.replicas`: a LIST of `partition:broker` or `*`."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from wherry.log.config import TOPIC_CONFIG_KEYS, ConfigError, ConfigType, LogConfig

NAMES = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@pytest.mark.parametrize("name", NAMES)
def test_defaults_and_type(name: str) -> None:
    key = TOPIC_CONFIG_KEYS[name]
    assert key.type is ConfigType.LIST
    assert key.default_str == ""
    assert key.server_name is None
    assert LogConfig().value_of(name) == ""


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("0:1,1:2", ("0:1", "1:2")),
        (" 0:1 , 3:0 ", ("0:1", "3:0")),
        ("*", ("*",)),
        ("", ()),
    ],
)
def test_valid_values(name: str, value: str, parsed: tuple[str, ...]) -> None:
    cfg = LogConfig().with_props({name: value})
    assert getattr(cfg, name.replace(".", "_")) == parsed
    assert cfg.value_of(name) == ",".join(parsed)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("value", ["x", "0:1,*", "*,*", "1:", ":1", "0-1", "0:1:2", "a:b"])
def test_invalid_values_are_invalid_config(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        LogConfig().with_props({name: value})
    assert e.value.error_code == ErrorCode.invalid_config
    assert "must be the literal '*'" in str(e.value)
