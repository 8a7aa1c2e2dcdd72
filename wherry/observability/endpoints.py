"""`http.listeners`: the HTTP endpoints of the metrics and console listener, parsed.

Apart from `service.py` (which imports the Prometheus client, the collector and the console),
so reading a broker's configuration costs none of that.
"""

from __future__ import annotations

from wherry.common.record import frozen_record

CONFIG_KEY = "http.listeners"


class HttpListenerError(ValueError):
    """Why a value of `http.listeners` is refused (the reason only: the config's reader
    prefixes Kafka's `Invalid value V for configuration K: `)."""


@frozen_record(slots=True)
class HttpEndpoint:
    host: str
    port: int

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}"


def parse_http_listeners(value: str) -> tuple[HttpEndpoint, ...]:
    """`http://HOST:PORT[,http://HOST:PORT]` → endpoints; empty: none (no HTTP listener)."""
    out: list[HttpEndpoint] = []
    for item in (v.strip() for v in value.split(",")):
        if not item:
            continue
        scheme, sep, rest = item.partition("://")
        if not sep or scheme.lower() != "http":
            raise HttpListenerError(_reason(value, item, "expected http://HOST:PORT (only http "
                                                          "is supported)"))
        host, colon, port = rest.rstrip("/").rpartition(":")
        if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise HttpListenerError(_reason(value, item, "the port must be a number from 0 to "
                                                          "65535"))
        out.append(HttpEndpoint(host.strip("[]") or "127.0.0.1", int(port)))
    return tuple(out)


def _reason(value: str, item: str, why: str) -> str:
    """`why`, naming the bad listener when the value holds several."""
    return why if item == value.strip() else f"{item}: {why}"
