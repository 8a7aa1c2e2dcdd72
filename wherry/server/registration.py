"""A broker's registration in the metadata store, as Kafka's KafkaZkClient.registerBroker: an
ephemeral `/brokers/ids/<id>` node of the broker's session holding its endpoints and rack.
The node's creation id (`czxid`) is the broker epoch: the controller's requests carry it, and
a request carrying an older one was meant for an earlier incarnation of the broker.
`wherry server` and the simulated brokers both register here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from wherry.coordination import paths
from wherry.coordination.store import NodeExistsError

if TYPE_CHECKING:
    from wherry.coordination.store import MetadataStore

__all__ = ["register_broker"]


async def register_broker(
    store: MetadataStore,
    broker_id: int,
    endpoints: Sequence[paths.ListenerEndpoint],
    rack: str | None,
    now_ms: int,
) -> int:
    """Register on the session of `store`; the broker epoch. A broker id registered by a live
    session already is refused."""
    first = endpoints[0]
    reg = paths.BrokerRegistration(broker_id, first.host, first.port, rack,
                                   endpoints=tuple(endpoints))
    path = paths.broker_path(broker_id)
    try:
        await store.create(path, reg.to_json(timestamp_ms=now_ms), ephemeral=True,
                           make_parents=True)
    except NodeExistsError as e:
        raise RuntimeError(f"Broker id {broker_id} is already registered") from e
    _, stat = await store.get(path)
    return stat.czxid
