"""Topics named by name or by id (KIP-516) in Produce, Fetch and OffsetCommit.

A request's partitions are answered grouped by the key the request used for their topic: the
topic id when the topic was named by id only, else the name.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from wherry.replication.metadata_cache import MetadataCache

__all__ = ["TopicKey", "resolve_topic", "topic_responses"]

TopicKey: TypeAlias = str | uuid.UUID


def resolve_topic(
    cache: MetadataCache, name: str | None, topic_id: uuid.UUID | None
) -> tuple[TopicKey, str | None]:
    """``(key, name)`` of a request topic; the name is ``None`` for an unknown topic id."""
    if name is None and topic_id is not None:
        return topic_id, cache.topic_name(topic_id)
    return name or "", name


def topic_responses(
    partitions_by_key: Mapping[TopicKey, list[dict[str, Any]]],
    *,
    name_field: str,
    partitions_field: str,
    no_topic_id: uuid.UUID | None,
) -> list[dict[str, Any]]:
    """One response topic per key: its name or id (the other is ``None`` / ``no_topic_id``)."""
    return [
        {
            name_field: key if isinstance(key, str) else None,
            "topic_id": key if isinstance(key, uuid.UUID) else no_topic_id,
            partitions_field: parts,
        }
        for key, parts in partitions_by_key.items()
    ]
