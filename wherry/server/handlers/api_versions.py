"""ApiVersions (key 18): advertise exactly the APIs and versions this broker serves, and from
v3 the features (KIP-584): `transaction.version` supported 0-2 and finalized at the broker's
`transaction.version` (a level of 0 is not finalized, as in Kafka). A client that sees level 2
finalized runs transactions v2 (KIP-890)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from wherry.protocol import api_versions_codec
from wherry.protocol.api_versions_codec import Features
from wherry.server.handlers.versions import SUPPORTED_VERSIONS

API_VERSIONS_KEY = api_versions_codec.API_VERSIONS_KEY

if TYPE_CHECKING:

    from wherry.protocol.codec import Request
    from wherry.protocol.response_cache import KeyedAnswer
    from wherry.server.services import BrokerServices

TRANSACTION_VERSION_FEATURE = "transaction.version"
SUPPORTED_TRANSACTION_VERSIONS = (0, 2)
DEFAULT_TRANSACTION_VERSION = 2  # `transaction.version`'s default (server/config.py)
FINALIZED_FEATURES_EPOCH = 0  # the levels come from the configuration, never change at runtime
# The early answer's error codes, without kio's (imported once the listeners are bound)
NONE: Final = 0
UNSUPPORTED_VERSION: Final = 35


def features_of(transaction_version: int) -> Features:
    """The features a broker with this `transaction.version` advertises."""
    lo, hi = SUPPORTED_TRANSACTION_VERSIONS
    finalized = (
        ((TRANSACTION_VERSION_FEATURE, transaction_version, transaction_version),)
        if transaction_version > 0
        else ()
    )
    return Features(((TRANSACTION_VERSION_FEATURE, lo, hi),), FINALIZED_FEATURES_EPOCH, finalized)


def _feature_fields(features: Features, version: int) -> dict[str, Any]:
    return {
        "supported_features": [
            {"name": n, "min_version": a, "max_version": b}
            for n, a, b in features.supported_for(version)
        ],
        "finalized_features_epoch": features.finalized_epoch,
        "finalized_features": [
            {"name": n, "max_version_level": a, "min_version_level": b}
            for n, a, b in features.finalized
        ],
    }


def api_keys() -> list[dict[str, int]]:
    return [
        {"api_key": k, "min_version": lo, "max_version": hi}
        for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    ]


def unsupported_version_response() -> Mapping[str, Any]:
    """The v0 answer to an ApiVersions version we do not know (KIP-511)."""
    from kio.schema.errors import ErrorCode

    return {"error_code": ErrorCode.unsupported_version, "api_keys": api_keys()}


def early_answer(
    frame: bytes | memoryview, features: Features | None = None
) -> bytes | None:
    """The answer to an ApiVersions request frame from the hand-written codec (no kio: the
    start answers it before the kio codec is imported); None when that codec leaves the frame
    to the kio path (`Broker.handle_frame`), whose answer with the same `features` it
    otherwise equals byte for byte. `features` None: those of the default
    `transaction.version`."""
    if features is None:
        features = features_of(DEFAULT_TRANSACTION_VERSION)
    req = api_versions_codec.read_request(frame, SUPPORTED_VERSIONS[API_VERSIONS_KEY])
    if req is None:
        return None
    keys = [(k, lo, hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    lo, hi = SUPPORTED_VERSIONS[API_VERSIONS_KEY]
    if lo <= req.api_version <= hi:
        return api_versions_codec.encode_response(
            req.api_version, req.correlation_id, NONE, keys, features=features
        )
    return api_versions_codec.encode_response(
        0, req.correlation_id, UNSUPPORTED_VERSION, keys
    )


def answer(features: Features, version: int) -> dict[str, Any]:
    """The v`version` answer's fields (the kio path)."""
    from kio.schema.errors import ErrorCode

    return {
        "error_code": ErrorCode.none,
        "api_keys": api_keys(),
        "throttle_time": 0,
        **_feature_fields(features, version),
    }


@functools.lru_cache(maxsize=32)
def _kept_answer(transaction_version: int, version: int) -> KeyedAnswer:
    """The answer for this `transaction.version` and ApiVersions version, built once (the
    response cache, with uuid, is imported after the start, as the kio path that asks)."""
    from wherry.protocol.response_cache import KeyedAnswer

    return KeyedAnswer(answer(features_of(transaction_version), version))


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    return _kept_answer(broker.config.transaction_version, req.api_version)
