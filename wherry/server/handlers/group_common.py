"""What the consumer-group handlers share: the client's address as Kafka shows it, the
topics as the group coordinator sees them."""

from __future__ import annotations

from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wherry.group.consumer_coordinator import TopicsImage
    from wherry.replication.metadata_cache import MetadataCache

# The address of the connection whose request is being handled, as Kafka shows it
# (Java's InetAddress.toString(): "/127.0.0.1"). Set per request by the broker.
CLIENT_HOST: ContextVar[str] = ContextVar("client_host", default="/unknown")
# The id of the client connection a request came on (share sessions belong to one)
CONNECTION_ID: ContextVar[int] = ContextVar("connection_id", default=-1)


def client_host_of(peer: str) -> str:
    """`ConnectionInfo.peer` ("host:port") → "/host"."""
    host = peer.rsplit(":", 1)[0] if ":" in peer else peer
    return "/" + host


def topics_image(cache: MetadataCache) -> TopicsImage:
    """The topics with an id, as the consumer-group coordinator sees them."""
    # Imported here: the broker imports this module before the groups are loaded.
    from wherry.group.consumer_coordinator import TopicsImage
    from wherry.group.consumer_group import TopicMeta

    topics: dict[str, TopicMeta] = {}
    for name in cache.topics():
        tid = cache.topic_id(name)
        if tid is None or tid.int == 0:
            continue
        topics[name] = TopicMeta(tid, name, len(cache.partitions(name)))
    return TopicsImage(topics)
