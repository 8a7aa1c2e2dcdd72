"""The (topic, partition) pair that names one partition log."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["TopicPartition"]


class TopicPartition(NamedTuple):
    """A topic partition; `str(tp)` is Kafka's directory name `<topic>-<partition>`."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        """The name of the partition's directory inside a log dir."""
        return f"{self.topic}-{self.partition}"

    @classmethod
    def parse(cls, name: str) -> TopicPartition:
        """Parse `<topic>-<partition>` (topic names may contain '-'); raises ValueError."""
        topic, sep, partition = name.rpartition("-")
        if not sep or not topic or not partition.isdigit():
            raise ValueError(f"not a topic-partition directory name: {name!r}")
        return cls(topic, int(partition))
