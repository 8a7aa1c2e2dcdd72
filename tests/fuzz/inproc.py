"""A broker in this process for the fuzz targets: started on its own event loop, which runs
while an input is handled (`BrokerTargets` drives `Broker.handle_frame` with it).

Listeners: PLAINTEXT and SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), loopback
only, ports chosen by the system; no HTTP listener. The user `alice` (PLAIN, password
`alice-secret`) and `carol` (SCRAM, `carol-secret`) exist, so captured exchanges get as far as
real ones do.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from tests.fuzz.targets import BrokerTargets

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="admin" password="admin-secret" user_alice="alice-secret";'
)


def broker_overrides(log_dir: Path) -> dict[str, str]:
    return {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "log.dirs": str(log_dir),
        "http.listeners": "",
        "group.initial.rebalance.delay.ms": "0",
    }


def start_broker(log_dir: Path, deadline_s: float = 1.0, *, quiet: bool = True) -> tuple[
    Any, asyncio.AbstractEventLoop, BrokerTargets
]:
    """A started broker, its loop and the targets driving it. With `quiet`, the broker's log
    below CRITICAL is off (a fuzzer makes it log every refused input)."""
    from wherry.server.broker import Broker
    from wherry.server.config import load_config

    log_dir.mkdir(parents=True, exist_ok=True)
    cfg = load_config(None, broker_overrides(log_dir))
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    broker = Broker(cfg)
    loop.run_until_complete(asyncio.wait_for(broker.start(), 60))
    loop.run_until_complete(_add_scram_user(broker))
    loop.run_until_complete(asyncio.wait_for(_load_coordinators(broker), 60))
    if quiet:
        logging.disable(logging.ERROR)
    return broker, loop, BrokerTargets(broker, loop, deadline_s)


async def _add_scram_user(broker: Any) -> None:
    """`carol` for both SCRAM mechanisms, through AlterUserScramCredentials as a client would."""
    from wherry.protocol.codec import decode_request, encode_request
    from wherry.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, salted_password
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS
    from wherry.server.network import ConnectionInfo

    salt = b"fuzz-salt-0123456789"
    upsertions = [
        {
            "name": "carol",
            "mechanism": m.type_code,
            "iterations": 4096,
            "salt": salt,
            "salted_password": salted_password(m, "carol-secret", salt, 4096),
        }
        for m in (SCRAM_SHA_256, SCRAM_SHA_512)
    ]
    frame = encode_request(51, 0, 1, {"deletions": [], "upsertions": upsertions})[4:]
    decode_request(frame, SUPPORTED_VERSIONS)  # it must read back
    conn = ConnectionInfo("127.0.0.1:40000", "PLAINTEXT", 1)
    await broker.handle_frame(conn, memoryview(bytearray(frame)))


async def _load_coordinators(broker: Any) -> None:
    """FindCoordinator for a group and a transactional id until both answer: the internal
    topics exist and are loaded before the first input."""
    from wherry.protocol.codec import decode_response, encode_request
    from wherry.server.network import ConnectionInfo

    conn = ConnectionInfo("127.0.0.1:40000", "PLAINTEXT", 2)
    for key_type in (0, 1):
        while True:
            frame = encode_request(10, 3, 2, {"key": "fuzz", "key_type": key_type})[4:]
            answer = await broker.handle_frame(conn, memoryview(bytearray(frame)))
            if decode_response(10, 3, answer[4:])[1].error_code == 0:
                break
            await asyncio.sleep(0.1)


def stop_broker(broker: Any, loop: asyncio.AbstractEventLoop) -> None:
    logging.disable(logging.NOTSET)
    loop.run_until_complete(asyncio.wait_for(broker.stop(controlled=False), 60))
    loop.close()
