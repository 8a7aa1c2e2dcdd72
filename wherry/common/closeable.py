"""Context-manager plumbing for things that are closed (or started and stopped) by ``with``.

* `Closeable`: ``with x:`` closes ``x`` on leaving.
* `Startable`: ``with x as y:`` binds ``y = x.start()`` and closes ``x`` on leaving; `close`
  is `stop` unless the class says otherwise.
* `AsyncCloseable`: ``async with x:`` awaits ``x.close()`` on leaving.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncCloseable", "Closeable", "Startable"]


class Closeable:
    """``with x:`` returns ``x`` and calls `close` on leaving."""

    __slots__ = ()

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Startable(Closeable):
    """``with x as y:`` binds ``y = x.start()`` and calls `close` (by default `stop`) on leaving."""

    __slots__ = ()

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()

    def __enter__(self) -> Self:
        return self.start()


class AsyncCloseable:
    """``async with x:`` returns ``x`` and awaits `close` on leaving."""

    __slots__ = ()

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
