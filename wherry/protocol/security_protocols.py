"""Constants of the controller's requests that the broker needs before it imports their
dataclasses (`interbroker.py` re-exports them): Kafka's SecurityProtocol ids, which
UpdateMetadata's endpoints carry and the listener settings are checked against, and the
leader a partition being deleted gets."""

from __future__ import annotations

from typing import Final

SECURITY_PROTOCOL_IDS: Final[dict[str, int]] = {
    "PLAINTEXT": 0,
    "SSL": 1,
    "SASL_PLAINTEXT": 2,
    "SASL_SSL": 3,
}

LEADER_DURING_DELETE: Final = -2  # Kafka's LeaderAndIsr.LeaderDuringDelete
