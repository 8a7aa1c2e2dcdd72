"""A broker's metadata-store session kept: an expired session is replaced and handed on,
a failed re-registration is retried, an expiry before the start is done or after the stop
is left alone, and a simulated broker's late notice of the expiry is waited out."""

from __future__ import annotations

import asyncio

from tests.store_sessions import EmbeddedSessions
from wherry.coordination.store import MetadataStore, SessionState
from wherry.server.store_session import StoreSession


class Owner:
    """What a broker hands its session: a record of what was done with it."""

    def __init__(self, sessions: EmbeddedSessions, *, failures: int = 0) -> None:
        self.sessions = sessions
        self.started = True
        self.failures = failures
        self.events: list[str] = []
        self.new: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        self.events.append("open")
        return await self.sessions.new_session()

    async def on_new(self, store: MetadataStore) -> None:
        if self.failures:
            self.failures -= 1
            self.events.append("register failed")
            raise RuntimeError("Broker id 1 is already registered")
        self.events.append("registered")
        self.new.append(store)

    async def before(self) -> None:
        self.events.append("stop listeners")

    def keeper(self, **kw: object) -> StoreSession:
        return StoreSession(self.open, self.on_new, self.before, lambda: self.started,
                            "[Broker id=1]", **kw)  # type: ignore[arg-type]


async def until(cond: object, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.01)


def test_an_expired_session_is_replaced_and_handed_on() -> None:
    async def run() -> None:
        sessions = EmbeddedSessions()
        owner = Owner(sessions, failures=1)
        keeper = owner.keeper()
        first = await keeper.open()
        assert keeper.connected and keeper.renewals == 0
        await sessions.expire(first)
        await until(lambda: keeper.renewals == 1)
        assert owner.events == ["open", "stop listeners", "open", "register failed",
                                "stop listeners", "open", "registered"]
        assert keeper.store is owner.new[0] and keeper.store is not first
        assert keeper.store.state is SessionState.CONNECTED and keeper.connected
        # The new session is watched as well.
        await sessions.expire(keeper.store)
        await until(lambda: keeper.renewals == 2)
        await keeper.stop()
        await sessions.aclose()

    asyncio.run(run())


def test_no_renewal_before_the_start_or_after_the_stop() -> None:
    async def run() -> None:
        sessions = EmbeddedSessions()
        owner = Owner(sessions)
        owner.started = False
        keeper = owner.keeper()
        first = await keeper.open()
        await sessions.expire(first)  # a broker still starting fails its start instead
        await asyncio.sleep(0.1)
        assert owner.events == ["open"] and not keeper.renewing and not keeper.connected

        owner.started = True
        keeper = owner.keeper()
        second = await keeper.open()
        await keeper.stop()
        await sessions.expire(second)
        await asyncio.sleep(0.1)
        assert owner.events == ["open", "open"] and keeper.renewals == 0
        await sessions.aclose()

    asyncio.run(run())


def test_a_late_notice_is_waited_out_and_a_kill_cancels_the_renewal() -> None:
    async def run() -> None:
        sessions = EmbeddedSessions()
        owner = Owner(sessions)
        keeper = owner.keeper(notice_delay_s=lambda: 0.3)
        first = await keeper.open()
        await sessions.expire(first)
        await asyncio.sleep(0.1)
        assert keeper.renewing and owner.events == ["open"]  # not noticed yet
        await until(lambda: keeper.renewals == 1)

        await sessions.expire(keeper.store)
        await asyncio.sleep(0.1)
        keeper.abandon()  # killed before it noticed: nothing more happens
        await asyncio.sleep(0.4)
        assert keeper.renewals == 1 and not keeper.renewing
        assert owner.events == ["open", "stop listeners", "open", "registered"]
        await sessions.aclose()

    asyncio.run(run())
