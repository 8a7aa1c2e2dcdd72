"""Readiness (`/readyz`): a broker is ready when

1. it has started (recovery done, listeners serving requests);
2. it is registered: its `/brokers/ids/<id>` node exists on a live coordination session (not
   mid-renewal after an expiry);
3. it has metadata from a controller (an UpdateMetadata naming a controller reached it);
4. it is caught up: every partition it follows whose leader is alive lists it in the ISR.
   ISR membership is the leader's verdict that this replica fetched up to the leader's log end
   within `replica.lag.time.max.ms` (Kafka's rule), so a restarted broker becomes ready when
   its leaders take it back into their ISRs. Partitions without a live leader are left out:
   nothing to catch up with.

Liveness (`/healthz`) is only: the process answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wherry.observability.sources import BrokerSources


@dataclass(frozen=True, slots=True)
class Readiness:
    ready: bool
    reasons: tuple[str, ...] = ()
    lagging: tuple[str, ...] = field(default=())

    def text(self) -> str:
        if self.ready:
            return "ready\n"
        return "not ready: " + "; ".join(self.reasons) + "\n"


def readiness(src: BrokerSources, *, max_listed: int = 20) -> Readiness:
    reasons: list[str] = []
    if not src.started():
        reasons.append("not started")
    elif not src.registered():
        reasons.append("not registered in the coordination store")
    cache = src.cache
    if cache.controller_id is None or cache.controller_id < 0:
        reasons.append("no metadata from a controller yet")
    rm = src.replica_manager()
    lagging: list[str] = []
    if rm is not None:
        for tp, part in list(rm.partitions.items()):
            if part.is_leader:
                continue
            st = cache.partition(tp.topic, tp.partition)
            if st is None or st.leader < 0 or st.leader not in cache.brokers:
                continue
            if src.broker_id not in st.isr:
                lagging.append(f"{tp.topic}-{tp.partition}")
    if lagging:
        shown = ", ".join(sorted(lagging)[:max_listed])
        more = f" and {len(lagging) - max_listed} more" if len(lagging) > max_listed else ""
        reasons.append(
            f"{len(lagging)} followed partition(s) not in their ISR "
            f"(not caught up within replica.lag.time.max.ms={src.replica_lag_time_max_ms}): "
            f"{shown}{more}"
        )
    return Readiness(not reasons, tuple(reasons), tuple(sorted(lagging)))
