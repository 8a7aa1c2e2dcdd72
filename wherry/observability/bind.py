"""Opening the HTTP listener without ever stopping the broker for it.

Kafka opens no such port, so a console port that is busy (three brokers on one machine all
default to 9644) or unusable must not end a broker's start. A busy port: the listener takes
the next free one of the `NEXT_PORTS` above it and says so in one warning line with its URL
(the brokers of one machine get 9644, 9645, 9646 in the order they start, and each prints
where its console is). No free port there, or any other error binding it: one warning line,
and the broker runs without that listener.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Awaitable, Callable

from wherry.observability.endpoints import CONFIG_KEY, HttpEndpoint

NEXT_PORTS = 20

Listen = Callable[[str, int], Awaitable[int]]


async def bind_endpoint(
    listen: Listen, ep: HttpEndpoint, log: logging.Logger, who: str
) -> int | None:
    """Listen on `ep` (or the next free port above it); the bound port, or None if none."""
    last = min(ep.port + NEXT_PORTS, 65535)
    ports = [ep.port] if ep.port == 0 else list(range(ep.port, last + 1))
    first_error: OSError | None = None
    for port in ports:
        try:
            bound = await listen(ep.host, port)
        except OSError as e:
            first_error = first_error or e
            if e.errno != errno.EADDRINUSE:
                break
            continue
        if port != ep.port:
            log.warning(
                "%s HTTP listener %s (%s) is in use; metrics and console on %s instead",
                who, ep.url(), CONFIG_KEY, ep.url(bound),
            )
        return bound
    if first_error is not None and first_error.errno == errno.EADDRINUSE and len(ports) > 1:
        why = f"it and the next {len(ports) - 1} ports are in use"
    else:
        why = str(first_error)
    log.warning(
        "%s HTTP listener %s (%s) cannot be opened: %s; running without metrics and console",
        who, ep.url(), CONFIG_KEY, why,
    )
    return None
