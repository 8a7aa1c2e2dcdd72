"""The topics the brokers keep for themselves (Kafka's internal topics): the consumer groups'
offsets, the transactions' state and the share groups' state."""

from __future__ import annotations

from typing import Final

INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state",
                                    "__share_group_state"})
