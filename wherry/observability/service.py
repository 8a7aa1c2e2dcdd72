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

import asyncio
import functools
import importlib
import json
import logging
from typing import TYPE_CHECKING, Any

from wherry.observability.bind import bind_endpoint
from wherry.observability.endpoints import HttpEndpoint
from wherry.observability.http_server import EventStream, HttpRequest, HttpResponse, HttpServer
from wherry.observability.readiness import readiness
from wherry.observability.sources import BrokerSources

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from wherry.observability.events import ConsoleHub

log = logging.getLogger(__name__)


@functools.cache
def console_page() -> bytes:
    from importlib import resources  # (tempfile, shutil, zipfile...): on the first page only

    return resources.files("wherry.observability").joinpath("static/console.html").read_bytes()


class ObservabilityServer:
    def __init__(self, src: BrokerSources, endpoints: tuple[HttpEndpoint, ...]) -> None:
        self.src = src
        self.endpoints = endpoints
        self.bound: list[tuple[HttpEndpoint, int]] = []
        # The console's hub: built by `complete` (once the broker's Kafka listener is up, so
        # that its imports never delay it) or on first use. The metrics registry (and
        # prometheus_client) on the first scrape: every family is read at scrape time, so it
        # answers the same, and an idle broker nobody scrapes does not hold it.
        self._registry: CollectorRegistry | None = None
        self._hub: ConsoleHub | None = None
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

    @property
    def registry(self) -> CollectorRegistry:
        if self._registry is None:
            from wherry.observability.collector import broker_registry

            self._registry = broker_registry(self.src)
        return self._registry

    @property
    def hub(self) -> ConsoleHub:
        if self._hub is None:
            from wherry.observability.events import ConsoleHub

            self._hub = ConsoleHub(self.src)
            self._hub.start()
        return self._hub

    def complete(self) -> None:
        """Build the console's hub now (the broker calls it once its Kafka listener is up),
        so that the console's timeline starts with the broker; until then only a first
        request to it builds it."""
        _ = self.hub

    async def start(self) -> None:
        """Bind the listener(s): `/healthz` and `/readyz` answer from now on, during the
        broker's log recovery too."""
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
        if self._hub is not None:
            await self._hub.stop()
        await self._http.close()

    # --- routes --------------------------------------------------------------------------------
    async def _console(self, _: HttpRequest) -> HttpResponse:
        return HttpResponse(200, console_page(), "text/html; charset=utf-8",
                            {"Cache-Control": "no-cache"})

    async def _metrics(self, _: HttpRequest) -> HttpResponse:
        if self._registry is None:  # the first scrape: prometheus_client (~20 ms of imports)
            # imported by a worker thread, so that the event loop keeps turning meanwhile
            await asyncio.to_thread(importlib.import_module, "wherry.observability.collector")
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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
