"""Config resources the client libraries cannot name, on the wire: the cluster-wide default
broker entity of `wherry configs --entity-default` and a broker's loggers (`--entity-type
broker-loggers`).

Kafka names the default entity with an empty BROKER resource name, which confluent-kafka and
kafka-python both refuse, and confluent-kafka has no BROKER_LOGGER resource type; so these
calls (IncrementalAlterConfigs v1, DescribeConfigs v4) are sent directly, with the protocol
codec: the default entity's to the first bootstrap broker, a broker's loggers' to that broker.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from typing import Any

from wherry.cli.common import CommandError
from wherry.protocol.codec import ResponseDecodeError, decode_response, encode_request

__all__ = [
    "WireConfig", "alter_default_broker", "alter_resource", "describe_default_broker",
    "describe_resource", "wire_call",
]

BROKER_RESOURCE = 4
BROKER_LOGGER_RESOURCE = 8
INCREMENTAL_ALTER_CONFIGS = (44, 1)
DESCRIBE_CONFIGS = (32, 4)
SOURCE_NAMES = {
    1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}


@dataclass(frozen=True, slots=True)
class WireConfig:
    name: str
    value: str | None
    source: str
    sensitive: bool
    synonyms: tuple[tuple[str, str, str | None], ...]  # (source, name, value)


def wire_call(bootstrap: str, api: tuple[int, int], body: dict[str, Any], timeout_s: float) -> Any:
    host, _, port = bootstrap.split(",")[0].strip().rpartition(":")
    frame = encode_request(api[0], api[1], 1, body, client_id="wherry-configs")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as s:
            s.settimeout(timeout_s)
            s.sendall(frame)
            (size,) = struct.unpack(">i", _recv(s, 4))
            raw = _recv(s, size)
    except (OSError, ValueError) as e:
        raise CommandError(f"Cannot reach the cluster at {bootstrap}: {e}") from e
    try:
        return decode_response(api[0], api[1], raw, expect_correlation_id=1)[1]
    except ResponseDecodeError as e:
        raise CommandError(f"Unreadable answer from {bootstrap}: {e}") from e


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def _check(result: Any) -> None:
    if int(result.error_code):
        raise CommandError(str(result.error_message or f"error code {int(result.error_code)}"))


def alter_resource(address: str, resource_type: int, name: str,
                   ops: list[tuple[str, str | None, int]], timeout_s: float) -> None:
    """IncrementalAlterConfigs of one resource; `ops`: (name, value, operation)."""
    body = {"validate_only": False, "resources": [{
        "resource_type": resource_type, "resource_name": name,
        "configs": [{"name": k, "config_operation": op, "value": v} for k, v, op in ops],
    }]}
    (res,) = wire_call(address, INCREMENTAL_ALTER_CONFIGS, body, timeout_s).responses
    _check(res)


def describe_resource(address: str, resource_type: int, name: str,
                      timeout_s: float) -> list[WireConfig]:
    """DescribeConfigs of one resource, with synonyms."""
    body = {"resources": [{"resource_type": resource_type, "resource_name": name,
                           "configuration_keys": None}],
            "include_synonyms": True, "include_documentation": False}
    (res,) = wire_call(address, DESCRIBE_CONFIGS, body, timeout_s).results
    _check(res)
    return [WireConfig(
        str(c.name), c.value, SOURCE_NAMES.get(int(c.config_source), "UNKNOWN"),
        bool(c.is_sensitive),
        tuple((SOURCE_NAMES.get(int(s.source), "UNKNOWN"), str(s.name), s.value)
              for s in c.synonyms),
    ) for c in res.configs]


def alter_default_broker(bootstrap: str, ops: list[tuple[str, str | None, int]],
                         timeout_s: float) -> None:
    """IncrementalAlterConfigs of the default entity; `ops`: (name, value, operation)."""
    alter_resource(bootstrap, BROKER_RESOURCE, "", ops, timeout_s)


def describe_default_broker(bootstrap: str, timeout_s: float) -> list[WireConfig]:
    return describe_resource(bootstrap, BROKER_RESOURCE, "", timeout_s)
