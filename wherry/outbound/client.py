"""`RequestClient`: Kafka requests to one peer and their decoded answers, over a connection it
opens when it has none (Kafka's NetworkClient, cut down to one request in flight).

Each call takes the next correlation id (the counter outlives connections, so a request resent
on a new connection never reuses an id), encodes the request with `protocol.codec`, sends it,
reads the answer frame and decodes it, checking that it answers this request. Any failure on
the way drops the connection, so a late answer can never be read as the next one's; the next
call opens a new one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from wherry.outbound.connection import Connect, FrameTransport
from wherry.protocol.codec import decode_response, encode_request

_MAX_CORRELATION_ID = 0x7FFFFFFF


class RequestError(ConnectionError):
    """No usable answer to a request: the connection could not be opened, was lost or timed
    out, or the answer was unreadable or answered another request. The connection has been
    dropped; calling again opens a new one."""


class RequestClient:
    """Requests to one peer, one at a time (concurrent calls wait their turn)."""

    def __init__(self, connect: Connect, *, client_id: str | None, peer: str) -> None:
        """`connect` opens a connection to the peer (e.g. an `OutboundConnection`'s
        `connect`); `peer` names the peer in error messages."""
        self.client_id = client_id
        self.peer = peer
        self._connect = connect
        self._transport: FrameTransport | None = None
        self._correlation_id = 0
        self._lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._transport.connected

    async def call(
        self,
        api_key: int,
        api_version: int,
        body: Any,
        *,
        encode: Callable[[int, str | None], bytes] | None = None,
        decode: Callable[[bytes | memoryview, int], Any] | None = None,
    ) -> Any:
        """Send one request and return the decoded answer: a kio response entity, or the
        `interbroker` response dataclass for LeaderAndIsr, StopReplica and UpdateMetadata.

        Raises RequestError when no usable answer comes back, whatever the cause (OSError,
        TimeoutError, `ResponseDecodeError`, or a plugged-in transport's own error, chained);
        a body the version cannot carry raises the encoder's error (`InterbrokerEncodeError`,
        ...) instead, and nothing is sent. `encode(correlation_id, client_id)`, when given,
        builds the frame instead of the generic encoder (and `body` is not used);
        `decode(frame, correlation_id)`, when given, reads the answer instead of the generic
        decoder (it must check the correlation id and raise on an unreadable frame)."""
        async with self._lock:
            self._correlation_id = (self._correlation_id + 1) & _MAX_CORRELATION_ID
            correlation_id = self._correlation_id
            if encode is not None:
                frame = encode(correlation_id, self.client_id)
            else:
                frame = encode_request(
                    api_key, api_version, correlation_id, body, client_id=self.client_id
                )
            try:
                transport = self._transport
                if transport is None or not transport.connected:
                    self.close()
                    transport = self._transport = await self._connect()
                raw = await transport.request(frame)
                if decode is not None:
                    return decode(raw, correlation_id)
                _, response = decode_response(
                    api_key, api_version, raw, expect_correlation_id=correlation_id
                )
                return response
            except Exception as e:  # lost, timed out, unreadable: whatever came after encoding
                self.close()
                raise RequestError(
                    f"API key {api_key} v{api_version} to {self.peer}: {str(e) or type(e).__name__}"
                ) from e
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Drop the connection at once (a call made later opens a new one)."""
        transport, self._transport = self._transport, None
        if transport is not None:
            transport.abort()
