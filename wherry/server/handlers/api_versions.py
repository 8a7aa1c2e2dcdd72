"""ApiVersions (key 18): advertise exactly the APIs and versions this broker serves."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from wherry.server.handlers.versions import SUPPORTED_VERSIONS

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


async def handle(broker: BrokerServices, req: Request) -> Mapping[str, Any]:
    return {"error_code": ErrorCode.none, "api_keys": api_keys(), "throttle_time": 0}
