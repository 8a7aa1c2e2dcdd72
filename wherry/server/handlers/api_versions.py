"""ApiVersions (key 18): advertise exactly the APIs and versions this broker serves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.protocol import api_versions_codec
from wherry.server.handlers.versions import SUPPORTED_VERSIONS

API_VERSIONS_KEY = api_versions_codec.API_VERSIONS_KEY

if TYPE_CHECKING:
    from wherry.protocol.codec import Request
    from wherry.server.services import BrokerServices


def api_keys() -> list[dict[str, int]]:
    return [
        {"api_key": k, "min_version": lo, "max_version": hi}
        for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
    ]


def unsupported_version_response() -> Mapping[str, Any]:
    """The v0 answer to an ApiVersions version we do not know (KIP-511)."""
    return {"error_code": ErrorCode.unsupported_version, "api_keys": api_keys()}


def early_answer(frame: bytes | memoryview) -> bytes | None:
    """The answer to an ApiVersions request frame from the hand-written codec (no kio: the
    start answers it before the kio codec is imported); None when that codec leaves the frame
    to the kio path (`Broker.handle_frame`), whose answer it otherwise equals byte for byte."""
    req = api_versions_codec.read_request(frame, SUPPORTED_VERSIONS[API_VERSIONS_KEY])
    if req is None:
        return None
    keys = [(k, lo, hi) for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())]
    lo, hi = SUPPORTED_VERSIONS[API_VERSIONS_KEY]
    if lo <= req.api_version <= hi:
        return api_versions_codec.encode_response(
            req.api_version, req.correlation_id, ErrorCode.none, keys
        )
    return api_versions_codec.encode_response(
        0, req.correlation_id, ErrorCode.unsupported_version, keys
    )


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    return {"error_code": ErrorCode.none, "api_keys": api_keys(), "throttle_time": 0}
