"""`replica.selector.class` and `broker.rack` in the broker's config: Kafka's two selectors
accepted, anything else refused at start with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_start_errors import _base, _run
from wherry.replication.replica_selector import LEADER_SELECTOR, RACK_AWARE_SELECTOR
from wherry.server.config import BrokerConfig, BrokerConfigError
from wherry.server.config_keys import is_known


def test_known_selectors_and_rack_read() -> None:
    for name in (RACK_AWARE_SELECTOR, LEADER_SELECTOR):
        cfg = BrokerConfig.from_props({"replica.selector.class": name, "broker.rack": "b"})
        assert (cfg.replica_selector_class, cfg.rack) == (name, "b")
    assert BrokerConfig.from_props({}).replica_selector_class is None
    assert is_known("replica.selector.class") and is_known("broker.rack")


def test_unknown_selector_refused() -> None:
    with pytest.raises(BrokerConfigError, match=r"configuration replica\.selector\.class: Class"):
        BrokerConfig.from_props({"replica.selector.class": "com.example.Nearest"})


def test_unknown_selector_stops_the_start_with_one_line(tmp_path: Path) -> None:
    done = _run([*_base(tmp_path / "logs"), "--override",
                 "replica.selector.class=com.example.Nearest"])
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "Error: Invalid value com.example.Nearest for configuration replica.selector.class: "
        f"Class com.example.Nearest cannot be found (supported: {RACK_AWARE_SELECTOR}, "
        f"{LEADER_SELECTOR})"
    ], done.stderr
