"""The simulated brokers keep their metadata-store sessions as `wherry server` does, with
`server/store_session.py`: a broker whose session the simulation expires notices it a moment
later, opens a new session and registers again (`server/registration.py`). A bug there -- no
renewal, or a renewal that does not register -- is a simulation failure."""

from __future__ import annotations

import pytest

from wherry.coordination.store import MetadataStore
from wherry.server.store_session import StoreSession
from wherry.sim.world import SimOptions, SimResult, run_seed

CI = SimOptions(duration_ms=3_000, settle_ms=2_500)


def first_failure(seeds: int) -> SimResult | None:
    for seed in range(seeds):
        result = run_seed(seed, CI)
        if not result.ok:
            return result
    return None


def test_expired_broker_sessions_are_renewed_by_the_brokers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renewed: list[int] = []
    real_renew = StoreSession._renew

    async def renew(self: StoreSession) -> None:
        await real_renew(self)
        renewed.append(self.renewals)

    monkeypatch.setattr(StoreSession, "_renew", renew)
    assert first_failure(10) is None
    assert max(renewed, default=0) >= 1, "no broker renewed its session in 10 seeds"


@pytest.mark.parametrize("bug", ["no renewal", "no registration"])
def test_a_session_renewal_bug_is_caught(monkeypatch: pytest.MonkeyPatch, bug: str) -> None:
    if bug == "no renewal":
        monkeypatch.setattr(StoreSession, "_on_expired", lambda self: None)
    else:
        real_init = StoreSession.__init__

        def init(self: StoreSession, *args: object, **kwargs: object) -> None:
            real_init(self, *args, **kwargs)  # type: ignore[arg-type]

            async def not_registered(store: MetadataStore) -> None:
                pass

            self._on_new_session = not_registered

        monkeypatch.setattr(StoreSession, "__init__", init)
    failed = first_failure(20)
    assert failed is not None, f"the planted bug ({bug}) went unnoticed for 20 seeds"
    assert failed.violation is not None, failed
