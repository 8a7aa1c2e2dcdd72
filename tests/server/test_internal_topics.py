"""A coordinator places its keys on its internal topic's stored partition count once the topic
exists, whatever its setting says (`adopt_stored_partition_count`)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest

from wherry.coordination import paths
from wherry.coordination.store import NoNodeError
from wherry.server.internal_topics import adopt_stored_partition_count


class _Store:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics

    async def get(self, path: str) -> tuple[bytes, Any]:
        for name, n in self.topics.items():
            if path == paths.topic_path(name):
                assignment = paths.TopicAssignment(uuid.UUID(int=1), {p: [0] for p in range(n)})
                return assignment.to_json(), None
        raise NoNodeError(path)


class _Coordinator:
    partition_count = 50


def _adopt(store: _Store, coordinator: _Coordinator) -> None:
    asyncio.run(
        adopt_stored_partition_count(
            store, "__t", coordinator, "t.num.partitions", "[C]"  # type: ignore[arg-type]
        )
    )


def test_the_stored_count_wins_and_a_difference_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordinator = _Coordinator()
    with caplog.at_level(logging.INFO, "wherry.server.internal_topics"):
        _adopt(_Store({"__t": 3}), coordinator)
    assert coordinator.partition_count == 3
    assert "[C] __t has 3 partitions (t.num.partitions is 50)" in caplog.messages


def test_no_topic_keeps_the_setting_and_an_equal_count_logs_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    coordinator = _Coordinator()
    with caplog.at_level(logging.INFO, "wherry.server.internal_topics"):
        _adopt(_Store({}), coordinator)
        _adopt(_Store({"__t": 50}), coordinator)
    assert coordinator.partition_count == 50
    assert not caplog.messages
