"""A request frame decoded, through its handler, to the encoded response: the one request
path of every broker (`Broker.handle_frame`, and the simulator's brokers).

`handle_frame` is that path whole: the SASL exchange first on a SASL listener
(`sasl_gate.py`), a client's request held until the broker has its first metadata
(`metadata_gate.py`), then the frame decoded and served.

A handler's `Parked` result (an acks=all Produce appended, its answer waiting for the ISR)
becomes a `network.Deferred`: the connection handles its next request meanwhile and sends
this answer in its turn. Errors a handler raises close the connection with a log line.
With client quotas, the answer is recorded against them first (`client_quotas.throttle`):
it carries the throttle time and the connection is muted for it."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, NamedTuple

import wherry.protocol.codec as codec
from wherry.observability.request_stats import FETCH_KEY, RequestStats, request_name
from wherry.protocol.codec import Request
from wherry.protocol.response_parts import ResponsePart, encode_response_parts
from wherry.runtime.busy_time import BusyTimed
from wherry.runtime.parking import Parked
from wherry.security.principal import KafkaPrincipal, Session
from wherry.server.handlers import SUPPORTED_VERSIONS, handler_for
from wherry.server.handlers.api_versions import unsupported_version_response
from wherry.server.handlers.group_common import CLIENT_HOST, CONNECTION_ID, client_host_of
from wherry.server.network import CloseConnection, ConnectionInfo, Deferred
from wherry.server.request_session import REQUEST_MUTE, REQUEST_SESSION

if TYPE_CHECKING:
    from wherry.server.metadata_gate import MetadataGate
    from wherry.server.sasl_gate import SaslGate
    from wherry.server.services import BrokerServices

log = logging.getLogger("wherry.server.broker")

Answer = bytes | list[ResponsePart] | None

_SESSION_ATTR = "dispatch.session"


class _ConnectionSession(NamedTuple):
    """A connection's request session, kept while its principal is the one it was made for."""

    principal: KafkaPrincipal
    host: str  # "/host", as `client_host_of` gives it
    session: Session


def decode_frame(frame: memoryview) -> Request | bytes:
    """The request a frame holds; for an API version this broker does not serve, the
    UNSUPPORTED_VERSION answer to send instead. An unreadable frame closes the connection."""
    try:
        req = codec.decode_request(frame, SUPPORTED_VERSIONS)
    except codec.RequestDecodeError as e:
        raise CloseConnection(f"cannot parse request: {e}") from e
    if isinstance(req, codec.UnsupportedVersion):
        return codec.encode_response(
            req.api_key, 0, req.correlation_id, unsupported_version_response()
        )
    return req


async def handle_frame(
    broker: BrokerServices,
    sasl_gate: SaslGate,
    metadata_gate: MetadataGate,
    conn: ConnectionInfo,
    frame: memoryview,
    stats: RequestStats,
    prefix: str,
) -> Answer | Deferred:
    """A request frame of `conn` through the gates, then decoded and served."""
    sasl = sasl_gate.authenticator(conn)
    if sasl is not None and sasl.raw_token_mode:
        return sasl_gate.raw_token(conn, sasl, frame)
    if metadata_gate.holds(frame):  # a client's request before the first metadata
        await metadata_gate.wait()
    req = decode_frame(frame)
    if isinstance(req, bytes):  # an unsupported version's answer
        return req
    if sasl is not None and sasl_gate.in_exchange(sasl, req):
        return sasl_gate.sasl_request(conn, sasl, req)
    sasl_gate.check_authenticated(sasl, req)
    return await serve(broker, conn, req, stats, prefix)


async def serve(
    broker: BrokerServices, conn: ConnectionInfo, req: Request, stats: RequestStats, prefix: str
) -> Answer | Deferred:
    """A decoded request of `conn` through its handler, with the request's session (who sent
    it, from where, on which listener) set for the handler and the authorizer."""
    # The same for every request of the connection until its principal changes (SASL)
    cached = conn.attrs.get(_SESSION_ATTR)
    if not isinstance(cached, _ConnectionSession) or cached.principal is not conn.principal:
        host = client_host_of(conn.peer)
        cached = _ConnectionSession(
            conn.principal,
            host,
            Session(conn.principal, host[1:], conn.listener, conn.security_protocol),
        )
        conn.attrs[_SESSION_ATTR] = cached
    CLIENT_HOST.set(cached.host)
    CONNECTION_ID.set(conn.id)
    REQUEST_SESSION.set(cached.session)
    REQUEST_MUTE.set(conn.mute)
    return await dispatch(broker, req, stats, prefix)


async def dispatch(
    broker: BrokerServices, req: Request, stats: RequestStats, prefix: str
) -> Answer | Deferred:
    """`req` through its handler; `stats` observe its time, `prefix` starts log lines."""
    started = time.perf_counter()
    work = handler_for(req.api_key)(broker, req)
    timed = None
    if broker.client_quotas.request.enabled:  # the handler's own time, not its waits
        work = timed = BusyTimed(work)
    answer = await _answer(broker, req, work, stats, prefix, started, timed)
    if isinstance(answer, Parked):  # done but for the answer: the connection goes on
        return Deferred(_parked(broker, req, answer, stats, prefix, started, timed))
    return answer


async def _parked(
    broker: BrokerServices,
    req: Request,
    parked: Parked[Any],
    stats: RequestStats,
    prefix: str,
    started: float,
    timed: BusyTimed[Any] | None,
) -> Answer:
    answer = await _answer(broker, req, parked.answer, stats, prefix, started, timed)
    return None if isinstance(answer, Parked) else answer


async def _answer(
    broker: BrokerServices,
    req: Request,
    work: Awaitable[Any],
    stats: RequestStats,
    prefix: str,
    started: float,
    timed: BusyTimed[Any] | None,
) -> Answer | Parked[Any]:
    """`work`'s body (a handler's, or a parked answer's) encoded; a `Parked` as it is. The
    request's time is observed once its answer is there."""
    body: Any = None
    try:
        body = await work
    except CloseConnection:
        raise
    except Exception as e:
        log.exception(
            "%s error handling API key %d v%d from %s",
            prefix,
            req.api_key,
            req.api_version,
            req.client_id,
        )
        raise CloseConnection(f"internal error handling API key {req.api_key}") from e
    finally:
        if not isinstance(body, Parked):
            stats.observe(
                request_name(
                    req.api_key, follower=req.api_key == FETCH_KEY and _from_follower(req)
                ),
                (time.perf_counter() - started) * 1000,
            )
    if isinstance(body, Parked):
        return body
    quotas = broker.client_quotas
    if quotas.enabled:  # `timed`: the handler's time (before its answer was parked)
        body, encoded, delay_ms = quotas.throttle(
            req, body, timed.busy_ns if timed else 0, quotas.now_ms(), _from_follower(req)
        )
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        if encoded is not None:
            return encoded
    if body is None:
        return None
    if req.api_key != FETCH_KEY:  # what `encode_response_parts` does for them, directly
        return codec.encode_response(req.api_key, req.api_version, req.correlation_id, body)
    # Fetch records may be file regions: network.py sends them from the files
    return encode_response_parts(req.api_key, req.api_version, req.correlation_id, body)


def _from_follower(req: Request) -> bool:
    """A Fetch from a follower (Kafka's FetchFollower) rather than a consumer."""
    if req.api_key != FETCH_KEY:
        return False
    state = getattr(req.body, "replica_state", None)
    rid = state.replica_id if state is not None else getattr(req.body, "replica_id", -1)
    return int(rid) >= 0
