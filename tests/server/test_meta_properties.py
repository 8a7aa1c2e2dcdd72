"""meta.properties: checked before the listeners are bound, written (first start) after."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from wherry.server.meta_properties import (
    check_meta_properties,
    read_meta_properties,
    write_meta_properties,
)


def test_missing_files_are_reported_then_written(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    write_meta_properties([a], "c1", 3)
    assert check_meta_properties([a, b], "c1", 3) == [b]
    write_meta_properties([b], "c1", 3)
    assert check_meta_properties([a, b], "c1", 3) == []
    assert read_meta_properties(b / "meta.properties") == {
        "version": "0",
        "broker.id": "3",
        "cluster.id": "c1",
    }


@pytest.mark.parametrize(
    ("cluster_id", "broker_id", "message"),
    [("other", 3, "cluster id other doesn't match"), ("c1", 4, "broker.id 4 doesn't match")],
)
def test_another_cluster_or_broker_is_refused(
    tmp_path: Path, cluster_id: str, broker_id: int, message: str
) -> None:
    write_meta_properties([tmp_path], "c1", 3)
    with pytest.raises(RuntimeError, match=message):
        check_meta_properties([tmp_path], cluster_id, broker_id)


def test_a_broker_writes_it_on_its_first_start_and_refuses_another_brokers_dir(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, broker_id=1).start()
    try:
        props = read_meta_properties(data / "meta.properties")  # written before "ready"
        assert props["broker.id"] == "1" and props["cluster.id"]
    finally:
        assert broker.stop() == 0
    other = BrokerProcess(data, broker_id=2, start_timeout_s=30)
    with pytest.raises(RuntimeError, match="did not start") as failed:
        other.start()
    assert "broker.id 2 doesn't match" in str(failed.value)
