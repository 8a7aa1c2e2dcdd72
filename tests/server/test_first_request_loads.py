"""The first request of an API version loads kio's schema modules of that version and its
handler module (tens of ms of module execution). A broker does it in a thread: its event loop
answers the other connections meanwhile, and the request itself is answered once loaded."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

import wherry.protocol.codec as codec
from tests.kafka_wire import connect, encode_request, read_response
from wherry.server.handlers import SUPPORTED_VERSIONS
from wherry.testing.cluster import AsyncDevCluster

_API_VERSIONS = {"client_software_name": "t", "client_software_version": "1"}
_NO_TOPICS = {"topics": []}  # Metadata v1: an empty list asks for no topic


def test_what_a_frame_needs_loaded() -> None:
    metadata_v1 = encode_request(3, 1, _NO_TOPICS)[4:]
    codec._SCHEMAS_LOADED.discard((3, 1))
    assert codec.schemas_to_load(metadata_v1, SUPPORTED_VERSIONS) == (3, 1)
    codec.load_schemas(3, 1)
    assert codec.schemas_to_load(metadata_v1, SUPPORTED_VERSIONS) is None
    # hand-written codecs (LeaderAndIsr, ControlledShutdown), versions not served, runts
    for key in (4, 7):
        assert codec.schemas_to_load(bytes([0, key, 0, 1, 0, 0, 0, 1]), SUPPORTED_VERSIONS) is None
    assert codec.schemas_to_load(bytes([0, 3, 0x7F, 0, 0, 0, 0, 1]), SUPPORTED_VERSIONS) is None
    assert codec.schemas_to_load(bytes([0x7F, 0, 0, 0, 0, 0, 0, 1]), SUPPORTED_VERSIONS) is None
    assert codec.schemas_to_load(b"\0\3", SUPPORTED_VERSIONS) is None


@pytest.mark.timeout(120)
def test_the_loop_answers_others_while_a_first_request_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loaded_in: list[threading.Thread] = []
    loading = threading.Event()
    real_load = codec.load_schemas

    def slow_load(api_key: int, api_version: int) -> None:
        """The real load, and 1 s more (sleeping, as a thread waiting for the GIL would)."""
        loaded_in.append(threading.current_thread())
        loading.set()
        time.sleep(1.0)
        real_load(api_key, api_version)

    def client(bootstrap: str) -> None:
        """In a thread of its own, so that its clock does not wait for the broker's loop."""
        other = connect(bootstrap)
        other.sendall(encode_request(18, 3, _API_VERSIONS, 1))  # loaded before the plant
        read_response(other, 18, 3)
        codec._SCHEMAS_LOADED.discard((3, 1))
        monkeypatch.setattr(codec, "load_schemas", slow_load)
        first = connect(bootstrap)
        first.sendall(encode_request(3, 1, _NO_TOPICS, 2))
        assert loading.wait(10)
        started = time.monotonic()
        other.sendall(encode_request(18, 3, _API_VERSIONS, 3))
        answer = read_response(other, 18, 3)
        waited = time.monotonic() - started
        assert answer.error_code == ErrorCode.none
        assert waited < 0.5, f"ApiVersions waited {waited:.2f} s for another's first load"
        metadata = read_response(first, 3, 1)
        assert metadata.topics == () and [b.node_id for b in metadata.brokers] == [0]
        assert time.monotonic() - started >= 0.5  # it was answered after its load
        # loaded once: the next request of the version goes straight through
        first.sendall(encode_request(3, 1, _NO_TOPICS, 4))
        read_response(first, 3, 1)
        assert len(loaded_in) == 1
        first.close()
        other.close()

    async def main() -> None:
        async with AsyncDevCluster(tmp_path, brokers=1, base_port=0) as cluster:
            await asyncio.to_thread(client, f"127.0.0.1:{cluster.port(0)}")
        assert loaded_in and loaded_in[0] is not loop_thread

    loop_thread = threading.current_thread()
    asyncio.run(main())
