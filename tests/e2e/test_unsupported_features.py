"""What was once not built keeps working with real clients (issue 17, item 4).

KIP-848 consumer groups are built now (tests/e2e/test_kip848_consumer_group.py), so is
Transactions (tests/e2e/test_transactions.py); idempotent producers keep working.
"""

from __future__ import annotations

import uuid

from confluent_kafka import Producer

from tests.broker_process import BrokerProcess


def test_idempotent_producer_still_works(broker: BrokerProcess) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    topic = f"t-{uuid.uuid4().hex[:10]}"
    delivered: list[object] = []
    p.produce(topic, b"v", on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(15) == 0
    assert delivered == [None]
