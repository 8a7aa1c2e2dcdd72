"""Build the seed corpus (`tests/fuzz/corpus/`): frames real clients send, and one request of
every served API key x version x request-header version.

    python -m tests.fuzz.seed [--out tests/fuzz/corpus] [--no-capture]

Generated: every (API key, version) the broker serves, its default body, with the request
header the version uses and with the other one (v1 <-> v2: the header's tagged fields added or
taken away); the inter-broker requests and responses from their dataclasses; record batches in
every codec; group / transaction / share records; SASL tokens.

Captured: a `wherry server` behind a recording TCP proxy (the broker advertises the proxy's
ports, so every connection goes through it) while confluent-kafka, kafka-python and aiokafka
create topics, produce in every codec (idempotent and transactional too), consume in groups,
and authenticate with PLAIN and SCRAM-SHA-256/512. Requests, SASL exchanges, the record batches
of Produce requests and the responses a broker reads from peers become inputs.

The files are named `<target>-<what>-<hash>`; duplicates and inputs over 16 KiB are dropped.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.fuzz.targets import RESPONSE_APIS, join_frames, make_input, short_hash

MAX_INPUT = 16 * 1024
CORPUS = Path(__file__).parent / "corpus"
_SIZE = struct.Struct(">i")


class Corpus:
    def __init__(self, out: Path) -> None:
        self.out = out
        self.added = 0
        self._seen: set[bytes] = set()
        self._per_kind: dict[str, int] = {}

    def add(self, target: str, what: str, payload: bytes, *, cap: int = 4) -> None:
        data = make_input(target, payload)
        kind = f"{target}-{what}"
        if len(data) > MAX_INPUT or data in self._seen or self._per_kind.get(kind, 0) >= cap:
            return
        self._seen.add(data)
        self._per_kind[kind] = self._per_kind.get(kind, 0) + 1
        (self.out / f"{kind}-{short_hash(data)}").write_bytes(data)
        self.added += 1


# --- generated -------------------------------------------------------------------------------


def swap_header(frame: bytes) -> bytes:
    """The request with the other header version: v2's tagged-field byte after the client id
    removed, or one added for v1."""
    if len(frame) < 10:
        return frame
    (n,) = struct.unpack_from(">h", frame, 8)
    end = 10 + max(n, 0)
    if end < len(frame) and frame[end] == 0:  # assume v2: drop the empty tagged fields
        return frame[:end] + frame[end + 1 :]
    return frame[:end] + b"\0" + frame[end:]


def generated_requests(corpus: Corpus) -> None:
    from wherry.protocol.codec import encode_request
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    for key, (lo, hi) in SUPPORTED_VERSIONS.items():
        for version in range(lo, hi + 1):
            body = _default_body(key, version)
            if body is None:
                continue
            frame = encode_request(key, version, 7, body, client_id="fuzz")[4:]
            corpus.add("request", f"k{key}v{version}", frame)
            corpus.add("request", f"k{key}v{version}-hdr", swap_header(frame))


def _default_body(key: int, version: int) -> Any:
    from wherry.protocol import interbroker as ib

    if key in (4, 5, 6, 7):
        tid = uuid.UUID(int=0x1234)
        endpoint = ib.BrokerEndpoint(0, "127.0.0.1", 9092)
        if key == 4:
            st = ib.LeaderAndIsrPartitionState("t", 0, 1, 0, 3, (0,), 3, (0,))
            return ib.LeaderAndIsrRequest(0, 1, 5, (st,), {"t": tid}, (endpoint,))
        if key == 5:
            return ib.StopReplicaRequest(0, 1, 5, (ib.StopReplicaPartition("t", 0, 3, False),))
        if key == 6:
            ust = ib.UpdateMetadataPartitionState("t", 0, 1, 0, 3, (0,), 3, (0,))
            return ib.UpdateMetadataRequest(0, 1, 5, (ust,), (endpoint,), {"t": tid})
        return ib.ControlledShutdownRequest(0, 5)
    return {}


def generated_responses(corpus: Corpus) -> None:
    from wherry.protocol import interbroker as ib
    from wherry.protocol.codec import encode_response

    bodies: dict[int, Any] = {
        4: ib.LeaderAndIsrResponse(0, (ib.LeaderAndIsrPartitionError("t", 0, 0),)),
        5: ib.StopReplicaResponse(0, (ib.LeaderAndIsrPartitionError("t", 0, 0),)),
        6: ib.UpdateMetadataResponse(0),
        7: ib.ControlledShutdownResponse(0, (ib.RemainingPartition("t", 0),)),
    }
    for index, (key, version) in enumerate(RESPONSE_APIS):
        body = bodies.get(key, {})
        try:
            frame = encode_response(key, version, 7, body)
        except Exception:  # a body the default mapping cannot fill
            continue
        corpus.add("response", f"k{key}v{version}", bytes([index]) + frame[4:])


def generated_records(corpus: Corpus) -> None:
    from wherry.protocol.records import RecordSpec, build_batch, build_control_batch

    specs = [RecordSpec(b"k%d" % i, b"value-%d" % i * 3, headers=(("h", b"v"),)) for i in range(4)]
    for codec in range(5):
        batch = build_batch(specs, compression=codec, timestamp_ms=1_700_000_000_000,
                            producer_id=7, producer_epoch=0, base_sequence=0)
        for fix in (0, 1):
            corpus.add("records", f"codec{codec}", bytes([fix | codec << 1]) + batch)
    control = build_control_batch(commit=True, producer_id=7, producer_epoch=0,
                                  coordinator_epoch=1, timestamp_ms=1_700_000_000_000)
    corpus.add("records", "control", b"\x01" + control)


def generated_tokens(corpus: Corpus) -> None:
    from wherry.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, client_proof, salted_password

    corpus.add("sasl-tokens", "plain", b"\x00" + join_frames([b"\0alice\0alice-secret"]))
    corpus.add("sasl-tokens", "plain-authzid", b"\x00" + join_frames([b"alice\0alice\0x"]))
    for which, mech in ((1, SCRAM_SHA_256), (2, SCRAM_SHA_512)):
        first = b"n,,n=carol,r=abcdefghijklmnop"
        salted = salted_password(mech, "carol-secret", b"fuzz-salt", 4096)
        final = b"c=biws,r=abcdefghijklmnopSERVERNONCE,p=" + __import__("base64").b64encode(
            client_proof(mech, salted, b"n=carol,r=abc")
        )
        corpus.add("sasl-tokens", f"scram{which}", bytes([which]) + join_frames([first, final]))
        ext = b"n,a=carol,n=carol,r=nonce,tokenauth=true"
        corpus.add("sasl-tokens", f"scram{which}-ext", bytes([which]) + join_frames([ext]))


def generated_coordinator(corpus: Corpus) -> None:
    from tests.fuzz.targets import _coordinator_decoders
    from wherry.group import records as gr
    from wherry.txn import records as tr

    names = [d.__module__.rsplit(".", 1)[-1] + "." + d.__name__ for d in _coordinator_decoders()]
    samples: dict[str, list[bytes]] = {
        "records.decode_key": [gr.offset_commit_key("g", "t", 0), gr.group_metadata_key("g")],
        "records.decode_offset_commit_value": [
            gr.encode_offset_commit_value(gr.OffsetCommitValue(5, -1, "meta", 1, -1), v)
            for v in (1, 3)
        ],
        "records.parse_subscription_topics": [gr.encode_subscription(["a", "b"], b"u")],
        "records.decode_value": [
            tr.encode_value(tr.TransactionLogValue(7, 0, 60000, 0, frozenset(), 1, 1))
        ],
    }
    for index, name in enumerate(names):
        for sample in samples.get(name, [b"\x00\x01\x00\x01g\x00\x00"]):
            corpus.add("coordinator", name.replace(".", "_"), bytes([index]) + sample)


# --- captured --------------------------------------------------------------------------------


class RecordingProxy:
    """Listens on loopback; relays each connection to `target` (set once the broker is up) and
    keeps both directions' bytes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.conversations: list[tuple[bytearray, bytearray]] = []
        self._threads: list[threading.Thread] = []
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                assert self.target is not None
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:  # the broker has stopped
                client.close()
                continue
            upstream.settimeout(None)
            conv = (bytearray(), bytearray())
            self.conversations.append(conv)
            self._socks += [client, upstream]
            for src, dst, buf in ((client, upstream, conv[0]), (upstream, client, conv[1])):
                t = threading.Thread(target=self._pump, args=(src, dst, buf), daemon=True)
                t.start()
                self._threads.append(t)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, buf: bytearray) -> None:
        try:
            while data := src.recv(65536):
                buf += data
                dst.sendall(data)
        except OSError:
            pass
        for s in (dst, src):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        self.listener.close()
        for s in self._socks:
            s.close()


def frames_of(stream: bytes | bytearray) -> Iterator[bytes]:
    pos = 0
    while pos + 4 <= len(stream):
        (n,) = _SIZE.unpack_from(stream, pos)
        if n < 0 or pos + 4 + n > len(stream):
            return
        yield bytes(stream[pos + 4 : pos + 4 + n])
        pos += 4 + n


def _run_clients(plain: str, sasl: str, log: Callable[[str], None]) -> None:
    from tests.fuzz import seed_clients

    for name, fn in seed_clients.SESSIONS:
        try:
            fn(plain, sasl)
            log(f"  {name}: done")
        except Exception as e:  # a client that fails still leaves its frames
            log(f"  {name}: {type(e).__name__}: {e}")


def captured(corpus: Corpus, log: Callable[[str], None]) -> None:
    from tests.broker_process import BrokerProcess
    from tests.fuzz.inproc import PLAIN_JAAS

    proxies = [RecordingProxy(), RecordingProxy()]
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(
            Path(tmp),
            listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            overrides=[
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
                "inter.broker.listener.name=PLAINTEXT",
                "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                "advertised.listeners=PLAINTEXT://127.0.0.1:"
                f"{proxies[0].port},SASL_PLAINTEXT://127.0.0.1:{proxies[1].port}",
                "group.initial.rebalance.delay.ms=0",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "offsets.topic.replication.factor=1",
            ],
        ).start()
        try:
            for proxy, address in zip(proxies, broker.addresses, strict=True):
                host, port = address.rsplit(":", 1)
                proxy.target = (host, int(port))
            _run_clients(f"127.0.0.1:{proxies[0].port}", f"127.0.0.1:{proxies[1].port}", log)
        finally:
            broker.stop()
            for proxy in proxies:
                proxy.close()
    for conv in proxies[0].conversations:
        _plaintext_conversation(corpus, conv)
    for conv in proxies[1].conversations:
        _sasl_conversation(corpus, conv)


def _plaintext_conversation(corpus: Corpus, conv: tuple[bytearray, bytearray]) -> None:
    requests = list(frames_of(conv[0]))
    asked: dict[int, tuple[int, int]] = {}
    for frame in requests:
        if len(frame) < 8:
            continue
        key, version, corr = struct.unpack_from(">hhi", frame)
        asked[corr] = (key, version)
        corpus.add("request", f"k{key}v{version}-client", frame, cap=3)
        if key == 0:
            _records_of(corpus, frame)
    index = {api: i for i, api in enumerate(RESPONSE_APIS)}
    for frame in frames_of(conv[1]):
        if len(frame) < 4:
            continue
        api = asked.get(struct.unpack_from(">i", frame)[0])
        if api in index:
            corpus.add("response", f"k{api[0]}v{api[1]}-client", bytes([index[api]]) + frame)


def _records_of(corpus: Corpus, frame: bytes) -> None:
    from wherry.protocol.codec import RequestDecodeError, decode_request
    from wherry.protocol.records import parse_header
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    try:
        req = decode_request(frame, SUPPORTED_VERSIONS)
    except RequestDecodeError:
        return
    for topic in getattr(req.body, "topic_data", ()):
        for part in topic.partition_data:
            records = bytes(part.records or b"")
            if len(records) < 61:
                continue
            codec = parse_header(records).compression
            corpus.add("records", f"client-codec{codec}", bytes([codec << 1]) + records, cap=3)


def _sasl_conversation(corpus: Corpus, conv: tuple[bytearray, bytearray]) -> None:
    frames = list(frames_of(conv[0]))[:6]
    if not frames:
        return
    mech = "x"
    for frame in frames:
        if len(frame) >= 2 and struct.unpack_from(">h", frame)[0] == 17:
            mech = "scram" if b"SCRAM" in frame else "plain"
    corpus.add("sasl", f"exchange-{mech}", join_frames(frames), cap=6)
    _tokens_of(corpus, frames, mech)


def _tokens_of(corpus: Corpus, frames: list[bytes], mech: str) -> None:
    from wherry.protocol.codec import RequestDecodeError, decode_request
    from wherry.server.handlers.versions import SUPPORTED_VERSIONS

    tokens = []
    for frame in frames:
        try:
            req = decode_request(frame, SUPPORTED_VERSIONS)
        except RequestDecodeError:
            continue
        if getattr(req, "api_key", None) == 36:
            tokens.append(bytes(req.body.auth_bytes))
    if tokens:
        which = 0 if mech == "plain" else (2 if any(b"512" in f for f in frames) else 1)
        corpus.add("sasl-tokens", f"client-{mech}", bytes([which]) + join_frames(tokens))


def lean_from_requests(corpus: Corpus) -> None:
    """The Produce and ApiVersions requests of the corpus again, for the hand-written readers."""
    for path in sorted(corpus.out.iterdir()):
        data = path.read_bytes()
        if data[:1] == b"\x00" and data[1:3] in (b"\x00\x00", b"\x00\x12"):
            what = "produce" if data[1:3] == b"\x00\x00" else "api-versions"
            corpus.add("lean", what, data[1:], cap=12)


def build(out: Path, *, capture: bool = True, log: Callable[[str], None] = print) -> int:
    out.mkdir(parents=True, exist_ok=True)
    corpus = Corpus(out)
    generated_requests(corpus)
    generated_responses(corpus)
    generated_records(corpus)
    generated_tokens(corpus)
    generated_coordinator(corpus)
    log(f"generated: {corpus.added} inputs")
    if capture:
        before = corpus.added
        captured(corpus, log)
        log(f"captured: {corpus.added - before} inputs")
    lean_from_requests(corpus)
    return corpus.added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=CORPUS)
    parser.add_argument("--no-capture", action="store_true", help="generated inputs only")
    args = parser.parse_args()
    build(args.out, capture=not args.no_capture)


if __name__ == "__main__":
    main()
