"""The broker's client quotas (Kafka's QuotaManagers): the three managers, fed from the
metadata store at start and by config-change notifications, and what a request's answer
does with them (`throttle`, called by `dispatch.py` once the handler is done).

Per request, as Kafka's KafkaApis does: a Produce records its request's bytes, a consumer's
Fetch the bytes of its answer, and every request its handler time (as a percentage of one
thread, KIP-124); follower fetches and the inter-broker APIs are exempt. The answer carries
the largest throttle time in `throttle_time_ms`, is sent at once, and then the connection
reads nothing for that long (KIP-219); a Produce before v6 or a Fetch before v8, whose client
does not throttle itself, has its answer held back for that long too, as Kafka does.

A Fetch that finds its client already over a quota is answered without records (Kafka's
throttled response; its bytes are taken back), so the consumer fetches them again after the
throttle. One that takes a client within its quota over it is answered with its records and
throttled for them, as a Produce is: Kafka empties it too, which never delivers a batch larger
than what the quota's window allows, and costs a client a round trip per window. Within a
fetch session the records always go out, the session's news being already taken.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import TYPE_CHECKING, Any

from wherry.quotas.entities import QuotaEntity
from wherry.quotas.manager import ClientQuotaManager, QuotaType
from wherry.quotas.store import entity_of_path, load_all_quotas, quota_values, read_entity_config
from wherry.server.request_session import REQUEST_MUTE, current_session

if TYPE_CHECKING:
    from wherry.coordination.store import MetadataStore
    from wherry.protocol.codec import Request
    from wherry.protocol.response_parts import ResponsePart
    from wherry.runtime.clock import Clock
    from wherry.server.config import BrokerConfig

log = logging.getLogger(__name__)

PRODUCE_KEY, FETCH_KEY = 0, 1
# Kafka's cluster actions (and the share coordinator's own APIs): never throttled
EXEMPT_KEYS = frozenset({4, 5, 6, 7, 27, 56, 83, 84, 85, 86, 87})
# The first version whose client throttles itself on `throttle_time_ms` (KIP-219)
PRE_KIP219_VERSIONS = {PRODUCE_KEY: 6, FETCH_KEY: 8}
_NANOS_TO_PERCENT = 100.0 / 1e9


class ClientQuotas:
    def __init__(
        self, now_ms: Callable[[], int], *, samples: int = 11, window_ms: int = 1000
    ) -> None:
        """`now_ms`: the monotonic clock the rates are measured on (read for metrics)."""
        self.now_ms = now_ms
        self.managers: dict[QuotaType, ClientQuotaManager] = {
            t: ClientQuotaManager(t, samples=samples, window_ms=window_ms) for t in QuotaType
        }
        self.produce = self.managers[QuotaType.PRODUCE]
        self.fetch = self.managers[QuotaType.FETCH]
        self.request = self.managers[QuotaType.REQUEST]
        self.entities: dict[QuotaEntity, dict[str, float]] = {}
        self.enabled = False  # any quota at all (read for every request)


    @classmethod
    def of(cls, config: BrokerConfig, clock: Clock) -> ClientQuotas:
        """A broker's: `quota.window.num` samples of `quota.window.size.seconds`."""
        return cls(clock.monotonic_ms, samples=config.quota_window_num,
                   window_ms=config.quota_window_size_seconds * 1000)

    # -- configuration -------------------------------------------------------------------------
    def set_entity(self, entity: QuotaEntity, values: Mapping[str, float]) -> None:
        """An entity's quotas as now stored (empty: none)."""
        if values:
            self.entities[entity] = dict(values)
        else:
            self.entities.pop(entity, None)
        for t, manager in self.managers.items():
            manager.update_quota(entity, values.get(t.value))
        self.enabled = any(m.enabled for m in self.managers.values())

    async def load_all(self, store: MetadataStore) -> None:
        for entity in list(self.entities):
            self.set_entity(entity, {})
        for entity, values in (await load_all_quotas(store)).items():
            self.set_entity(entity, values)

    async def apply_change(self, store: MetadataStore, entity_path: str) -> bool:
        """A `users/...` or `clients/...` notification: that entity reloaded. False for
        other entities."""
        entity = entity_of_path(entity_path)
        if entity is None:
            return False
        config, _ = await read_entity_config(store, entity)
        values = quota_values(config)
        self.set_entity(entity, values)
        log.info("applied client quota change for %s: %s", entity_path, values or "none")
        return True

    # -- per request ---------------------------------------------------------------------------
    def fetch_max_bytes(self, req: Request) -> int | None:
        """What a consumer's Fetch may return at most under its quota (one window's worth);
        None: no bound."""
        if not self.fetch.enabled:
            return None
        bound = self.fetch.max_value_in_window(_user(), req.client_id or "")
        return None if bound is None else max(1, int(bound))

    def throttle(
        self,
        req: Request,
        body: Mapping[str, Any] | None,
        handler_ns: int,
        now_ms: int,
        follower: bool,
    ) -> tuple[Mapping[str, Any] | None, bytes | list[ResponsePart] | None, int]:
        """Record the request against its quotas; the body to answer (with its
        `throttle_time`), for a consumer's Fetch its answer already encoded (None: encode the
        body), and how long to hold the answer back (ms): a Produce before v6 or a Fetch
        before v8 comes from a client that does not throttle itself, and Kafka delays its
        answer. The connection is muted for the throttle time."""
        if req.api_key in EXEMPT_KEYS or follower:
            return body, None, 0
        user, client_id = _user(), req.client_id or ""
        throttle_ms = self.request.record(user, client_id, handler_ns * _NANOS_TO_PERCENT,
                                          now_ms)
        encoded: bytes | list[ResponsePart] | None = None
        if req.api_key == PRODUCE_KEY:
            throttle_ms = max(throttle_ms,
                              self.produce.record(user, client_id, req.size_bytes, now_ms))
        elif req.api_key == FETCH_KEY and isinstance(body, Mapping) and self.fetch.enabled:
            from wherry.protocol.response_parts import encode_response_parts

            # Encoding puts placeholders in place of file regions: kept to encode again.
            records = [(p, p.get("records")) for t in body.get("responses", ())
                       for p in t.get("partitions", ())]
            encoded = encode_response_parts(req.api_key, req.api_version, req.correlation_id,
                                            body)
            size = _answer_size(encoded)
            over = throttle_ms > 0 or self.fetch.over_quota(user, client_id, now_ms)
            throttle_ms = max(throttle_ms, self.fetch.record(user, client_id, size, now_ms))
            if throttle_ms > 0:
                if over and not body.get("session_id"):  # Kafka's throttled answer: no records
                    self.fetch.unrecord(user, client_id, size, now_ms)
                    _close_regions(encoded)
                    body = {**body, "responses": []}
                else:
                    for part, data in records:
                        part["records"] = data
                encoded = None  # encoded again with its throttle time
        if throttle_ms <= 0:
            return body, encoded, 0
        if isinstance(body, Mapping):
            body = {**body, "throttle_time": throttle_ms}
        REQUEST_MUTE.get()(throttle_ms)
        before_kip219 = PRE_KIP219_VERSIONS.get(req.api_key, -1) > req.api_version
        return body, encoded, throttle_ms if before_kip219 else 0

    # -- metrics -------------------------------------------------------------------------------
    def snapshot(self) -> list[tuple[QuotaType, str, str, float, float]]:
        """(type, user, client id, rate, average throttle ms) of every client recorded."""
        now_ms = self.now_ms()
        out: list[tuple[QuotaType, str, str, float, float]] = []
        for t, manager in self.managers.items():
            for (user, client_id), rate, throttle in manager.snapshot(now_ms):
                out.append((t, user, client_id, rate, throttle))
        return out


def _user() -> str:
    """The quota user of the request: its principal's name (`ANONYMOUS` unauthenticated)."""
    return current_session().principal.name


def _answer_size(encoded: bytes | Sequence[Sized]) -> int:
    if isinstance(encoded, bytes):
        return len(encoded)
    return sum(len(part) for part in encoded)


def _close_regions(encoded: bytes | Sequence[Any]) -> None:
    if isinstance(encoded, bytes):
        return
    for part in encoded:
        close = getattr(part, "close", None)
        if close is not None and not isinstance(part, bytes):
            close()
