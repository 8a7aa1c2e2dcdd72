"""The group APIs advertise only versions kio can parse (and the broker tours them all e2e)."""

from __future__ import annotations

import pytest

from wherry.protocol.codec import kio_version_range
from wherry.server.handlers import SUPPORTED_VERSIONS

GROUP_APIS = [8, 9, 10, 11, 12, 13, 14, 15, 16, 42, 47]


@pytest.mark.parametrize("key", GROUP_APIS)
def test_group_api_versions_are_kios(key: int) -> None:
    assert SUPPORTED_VERSIONS[key] == kio_version_range(key)
