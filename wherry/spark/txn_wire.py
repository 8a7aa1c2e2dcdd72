"""Transaction requests the Kafka clients do not expose, sent by the Spark driver over the wire.

The exactly-once sink's tasks leave their transactions open and hand (transactional id,
producer id, epoch) to the driver, which ends them with EndTxn once Spark commits the batch
(librdkafka cannot end a transaction another process began). ListTransactions shows what is
still open; InitProducerId on an id aborts its open transaction (the fencing a new producer
does). Blocking calls on short-lived PLAINTEXT connections, each bounded in time.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from wherry.protocol.codec import decode_response, encode_request
from wherry.testing.sockets import recv_exact

FIND_COORDINATOR, INIT_PRODUCER_ID, END_TXN, LIST_TRANSACTIONS = 10, 22, 26, 66
_TRANSACTION_KEY_TYPE = 1
_CLOSED = "connection closed by the broker"
# Answers worth asking again (the coordinator is loading, moving, or still writing markers).
_RETRIABLE = {
    ErrorCode.concurrent_transactions,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.request_timed_out,
}


class TxnRequestError(RuntimeError):
    """A transaction request got an answer that is final (fenced, wrong state, ...), or no
    usable answer in time."""


@dataclass(frozen=True, slots=True)
class OpenTransaction:
    transactional_id: str
    producer_id: int
    state: str


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    return host.strip("[]"), int(port)


def call(address: str, api_key: int, version: int, body: dict[str, Any], timeout_s: float) -> Any:
    """One request on a fresh connection to ``host:port``; the decoded answer."""
    with socket.create_connection(_split(address), timeout=timeout_s) as sock:
        sock.sendall(encode_request(api_key, version, 1, body, client_id="wherry-spark"))
        (size,) = struct.unpack(">i", recv_exact(sock, 4, closed=_CLOSED))
        frame = recv_exact(sock, size, closed=_CLOSED)
        _, response = decode_response(api_key, version, frame, expect_correlation_id=1)
        return response


def _coordinator(bootstrap: Iterable[str], transactional_id: str, timeout_s: float) -> str:
    last: Exception | None = None
    for address in bootstrap:
        try:
            r = call(
                address,
                FIND_COORDINATOR,
                3,
                {"key": transactional_id, "key_type": _TRANSACTION_KEY_TYPE},
                timeout_s,
            )
        except OSError as e:
            last = e
            continue
        if r.error_code == ErrorCode.none:
            return f"{r.host}:{r.port}"
        last = TxnRequestError(f"FindCoordinator({transactional_id}): {r.error_code.name}")
    raise TxnRequestError(f"no transaction coordinator found for {transactional_id}: {last}")


def _until_done(what: str, timeout_s: float, attempt: Any) -> None:
    """Run ``attempt(seconds left)`` until it returns None (done), retrying while it returns a
    retriable error code or raises OSError / TxnRequestError(retriable), within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    delay = 0.02
    while True:
        left = max(deadline - time.monotonic(), 0.5)
        error: Exception | str
        try:
            code = attempt(left)
        except (OSError, TxnRequestError) as e:
            error = e
        else:
            if code is None or code == ErrorCode.none:
                return
            if code not in _RETRIABLE:
                raise TxnRequestError(f"{what}: {code.name}")
            error = code.name
        if time.monotonic() + delay > deadline:
            raise TxnRequestError(f"{what} not answered within {timeout_s:.0f} s: {error}")
        time.sleep(delay)
        delay = min(delay * 2, 1.0)


def fence(bootstrap: str, transactional_id: str, *, timeout_s: float) -> None:
    """Abort the open transaction of ``transactional_id`` (if any) and fence its producer, as a
    new producer's InitProducerId does; the id is left with no transaction."""
    servers = [s for s in bootstrap.split(",") if s.strip()]

    def attempt(left: float) -> Any:
        coordinator = _coordinator(servers, transactional_id, left)
        body = {
            "transactional_id": transactional_id,
            "transaction_timeout": 60_000,
            "producer_id": -1,
            "producer_epoch": -1,
        }
        return call(coordinator, INIT_PRODUCER_ID, 3, body, left).error_code

    _until_done(f"InitProducerId({transactional_id})", timeout_s, attempt)


def end_txn(
    bootstrap: str,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    *,
    commit: bool,
    timeout_s: float,
) -> None:
    """Commit (or abort) the open transaction of ``transactional_id`` begun by the producer
    ``producer_id``/``producer_epoch``, waiting out retriable answers. Committing again a
    transaction that is already committed succeeds, as in Kafka; a fenced producer (a later
    attempt took the id over) or a timed-out transaction raises TxnRequestError."""
    servers = [s for s in bootstrap.split(",") if s.strip()]
    body = {
        "transactional_id": transactional_id,
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "committed": commit,
    }

    def attempt(left: float) -> Any:
        coordinator = _coordinator(servers, transactional_id, left)
        return call(coordinator, END_TXN, 3, body, left).error_code

    what = (
        f"EndTxn({'commit' if commit else 'abort'}) of {transactional_id} "
        f"(producer {producer_id}, epoch {producer_epoch})"
    )
    _until_done(what, timeout_s, attempt)


def list_transactions(
    brokers: Iterable[str], *, states: Iterable[str] = (), timeout_s: float = 10.0
) -> list[OpenTransaction]:
    """Every broker's ListTransactions, filtered by state (all states when none given)."""
    out: list[OpenTransaction] = []
    for address in brokers:
        r = call(
            address,
            LIST_TRANSACTIONS,
            0,
            {"state_filters": list(states), "producer_id_filters": []},
            timeout_s,
        )
        if r.error_code != ErrorCode.none:
            raise TxnRequestError(f"ListTransactions on {address}: {r.error_code.name}")
        out.extend(
            OpenTransaction(t.transactional_id, int(t.producer_id), t.transaction_state)
            for t in r.transaction_states
        )
    return out
