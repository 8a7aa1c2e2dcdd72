"""Producer id allocation in blocks claimed from the metadata store (Kafka's ZK-mode
ProducerIdManager): each broker claims 1000 ids at a time with a conditional write on
`/latest_producer_id_block`, so ids are unique across brokers and restarts."""

from __future__ import annotations

import json

from wherry.coordination import paths
from wherry.coordination.store import BadVersionError, MetadataStore, NodeExistsError, NoNodeError

BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, broker_id: int, store: MetadataStore) -> None:
        self.broker_id = broker_id
        self.store = store
        self._next = 0
        self._end = -1  # inclusive end of the current block

    async def next_id(self) -> int:
        if self._next > self._end:
            await self._claim_block()
        pid = self._next
        self._next += 1
        return pid

    async def _claim_block(self) -> None:
        while True:
            try:
                data, stat = await self.store.get(paths.LATEST_PRODUCER_ID_BLOCK)
            except NoNodeError:
                data, stat = b"", None
            start = int(json.loads(data)["block_end"]) + 1 if data else 0
            block = json.dumps(
                {
                    "version": 1,
                    "broker": self.broker_id,
                    "block_start": str(start),
                    "block_end": str(start + BLOCK_SIZE - 1),
                }
            ).encode()
            try:
                if stat is None:
                    await self.store.create(paths.LATEST_PRODUCER_ID_BLOCK, block)
                else:
                    await self.store.set(
                        paths.LATEST_PRODUCER_ID_BLOCK, block, version=stat.version
                    )
            except (BadVersionError, NodeExistsError):
                continue  # another broker claimed a block; read again
            self._next, self._end = start, start + BLOCK_SIZE - 1
            return
