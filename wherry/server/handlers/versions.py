"""The API versions this broker serves (what ApiVersions advertises): key → (min, max).

A table apart from the handlers themselves, so the ApiVersions handler can read it without
importing the package that imports it.
"""

from __future__ import annotations

SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 13),
    1: (4, 18),
    2: (1, 11),
    3: (0, 13),
    4: (0, 7),
    5: (0, 4),
    6: (0, 8),
    7: (0, 3),
    8: (2, 10),
    9: (1, 10),
    10: (0, 6),
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 6),
    16: (0, 5),
    17: (0, 1),
    18: (0, 4),
    19: (2, 7),
    20: (1, 6),
    21: (0, 2),
    22: (0, 6),
    23: (2, 4),
    24: (0, 5),
    25: (0, 4),
    26: (0, 5),  # v5: transactions v2 (KIP-890)
    27: (1, 2),  # kio has v1+ (Kafka 3.9: 0-1); v2's transaction_version is not used
    28: (0, 5),  # v5: transactions v2 (KIP-890)
    29: (1, 3),  # kio has v1+; librdkafka sends v1
    30: (1, 3),
    31: (1, 3),
    32: (1, 4),
    33: (0, 2),
    34: (1, 2),  # kio has v1+ (Kafka 3.9: 0-2)
    35: (1, 4),
    36: (0, 2),
    37: (0, 3),
    42: (0, 2),
    43: (0, 2),
    44: (0, 1),
    45: (0, 0),
    46: (0, 0),
    47: (0, 0),
    48: (0, 1),  # client quotas (wherry/quotas/)
    49: (0, 1),
    50: (0, 0),
    51: (0, 0),
    56: (2, 3),
    60: (0, 2),
    61: (0, 0),  # KIP-664 DescribeProducers (kafka-transactions.sh describe-producers)
    65: (0, 0),
    66: (0, 2),
    68: (0, 1),  # KIP-848 consumer groups (group/consumer_coordinator.py)
    69: (0, 1),
    74: (0, 1),  # v0 was ListClientMetricsResources
    75: (0, 0),
    # KIP-932 share groups (coordinator/shares.py); 83-87 are the share coordinator's.
    76: (1, 1),
    77: (1, 1),
    78: (1, 2),
    79: (1, 2),
    83: (0, 0),
    84: (0, 0),
    85: (0, 1),
    86: (0, 0),
    87: (0, 1),
    90: (0, 1),  # share-group offsets admin APIs (server/share_offsets.py)
    91: (0, 0),
    92: (0, 0),
}
