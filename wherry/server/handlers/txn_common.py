"""What the transaction handlers share: Kafka's per-version error rewrite and the coordinator
calls awaited."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["client_error"]


def client_error(error: ErrorCode, version: int, first_fenced_version: int = 2) -> ErrorCode:
    """PRODUCER_FENCED is new in these APIs' version 2 (InitProducerId's 4): older clients get
    INVALID_PRODUCER_EPOCH, as KafkaApis answers them."""
    if error == ErrorCode.producer_fenced and version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return error
