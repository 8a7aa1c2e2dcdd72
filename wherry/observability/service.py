"""A broker's HTTP listener(s) (`http.listeners`, e.g. `http://127.0.0.1:9644`):

| path | answer |
|---|---|
| `/` | the web console (one self-contained page shipped in the package) |
| `/metrics` | Prometheus text format, this broker's own registry (`collector.py`) |
| `/healthz` | 200 `ok` while the process serves |
| `/readyz` | 200 `ready`, or 503 with the reasons (`readiness.py`) |
| `/events` | server-sent events for the console (`events.py`) |
| `/api/cluster`, `/api/timeline` | the console's data as JSON |
"""

from __future__ import annotations

import json
import logging
from importlib import resources
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from wherry.observability.bind import bind_endpoint
from wherry.observability.collector import broker_registry
from wherry.observability.endpoints import HttpEndpoint
from wherry.observability.events import ConsoleHub
from wherry.observability.http_server import EventStream, HttpRequest, HttpResponse, HttpServer
from wherry.observability.readiness import readiness
from wherry.observability.sources import BrokerSources

log = logging.getLogger(__name__)


def console_page() -> bytes:
    return resources.files("wherry.observability").joinpath("static/console.html").read_bytes()


class ObservabilityServer:
    def __init__(self, src: BrokerSources, endpoints: tuple[HttpEndpoint, ...]) -> None:
        self.src = src
        self.endpoints = endpoints
        self.registry = broker_registry(src)
        self.hub = ConsoleHub(src)
        self.bound: list[tuple[HttpEndpoint, int]] = []
        self._page = console_page()
        self._http = HttpServer(
            {
                "/": self._console,
                "/index.html": self._console,
                "/metrics": self._metrics,
                "/healthz": self._healthz,
                "/readyz": self._readyz,
                "/events": self._events,
                "/api/cluster": self._api_cluster,
                "/api/timeline": self._api_timeline,
            },
            name=f"[Broker id={src.broker_id}] http",
        )

    @property
    def urls(self) -> list[str]:
        """Where the listener is (a busy port moves it, `bind.py`); empty: nowhere."""
        return [ep.url(port) for ep, port in self.bound]

    async def start(self) -> None:
        self.hub.start()
        try:
            for ep in self.endpoints:
                port = await bind_endpoint(
                    self._http.listen, ep, log, f"[Broker id={self.src.broker_id}]"
                )
                if port is not None:
                    self.bound.append((ep, port))
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        await self.hub.stop()
        await self._http.close()

    # --- routes --------------------------------------------------------------------------------
    async def _console(self, _: HttpRequest) -> HttpResponse:
        return HttpResponse(200, self._page, "text/html; charset=utf-8",
                            {"Cache-Control": "no-cache"})

    async def _metrics(self, _: HttpRequest) -> HttpResponse:
        return HttpResponse(200, generate_latest(self.registry), CONTENT_TYPE_LATEST)

    async def _healthz(self, _: HttpRequest) -> HttpResponse:
        return HttpResponse(200, b"ok\n")

    async def _readyz(self, _: HttpRequest) -> HttpResponse:
        r = readiness(self.src)
        return HttpResponse(200 if r.ready else 503, r.text().encode())

    async def _events(self, _: HttpRequest) -> EventStream:
        return EventStream(self.hub.subscribe())

    async def _api_cluster(self, _: HttpRequest) -> HttpResponse:
        await self.hub.remote.refresh()
        return _json(self.hub.view())

    async def _api_timeline(self, _: HttpRequest) -> HttpResponse:
        return _json(list(self.hub.timeline))


def _json(data: Any) -> HttpResponse:
    return HttpResponse(200, json.dumps(data).encode(), "application/json")
