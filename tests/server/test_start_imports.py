"""The pieces that keep a default start lean (the broker-level checks, what a default start
imports before its Kafka listener is bound and what an idle broker holds, are in
tests/test_import_hygiene.py; the speed and memory themselves are the bench's rows f1, f2):
the crc32c extension loaded without its package's `__init__`, cramjam imported with the first
compressed batch, and when the HTTP listener starts (`startup.HttpStart`).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from wherry.server.startup import HttpStart

REPO = Path(__file__).resolve().parents[2]


# In a fresh interpreter: what it has imported is the point.
CRC32C_CHECK = (
    "import sys\n"
    "from wherry.common.crc32c import crc32c\n"
    "assert 'crc32c' not in sys.modules and 'importlib.metadata' not in sys.modules\n"
    "assert crc32c(b'123456789') == 0xE3069283  # the CRC-32C check value\n"
    "assert crc32c(b'6789', crc32c(b'12345')) == 0xE3069283  # continued\n"
    "import crc32c as package  # a later import of the package: the same extension\n"
    "assert package.crc32c is crc32c\n"
    "assert package.crc32c(b'abc') == crc32c(bytearray(b'abc')) == crc32c(memoryview(b'abc'))\n"
)
CRAMJAM_CHECK = (
    "import sys, gzip\n"
    "from wherry.protocol import compression, records\n"
    "assert 'cramjam' not in sys.modules\n"
    "data = b'wherry ' * 1000\n"
    "assert compression.decompress(compression.GZIP, gzip.compress(data)) == data\n"
    "assert 'cramjam' in sys.modules\n"
    "for codec in (compression.SNAPPY, compression.LZ4, compression.ZSTD):\n"
    "    packed = compression.compress(codec, data)\n"
    "    assert compression.decompress(codec, packed) == data, codec\n"
)


@pytest.mark.parametrize(
    "code",
    [CRC32C_CHECK, CRAMJAM_CHECK],
    ids=["crc32c-is-the-packages-without-its-init", "cramjam-with-the-first-compressed-batch"],
)
def test_in_a_fresh_interpreter(code: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("recovery_s", [0.0, 0.3, None])
def test_http_start_waits_for_the_bind_unless_the_start_is_long(recovery_s: float | None) -> None:
    """A quick start brings the HTTP listener up once asked (after the Kafka bind); one still
    short of its bind after the grace brings it up meanwhile (a long log recovery); a start
    that failed first (None: cancelled) never does."""

    async def run() -> list[str]:
        events: list[str] = []

        async def start_http() -> None:
            events.append("http")

        http = HttpStart(start_http, grace_s=0.1)
        if recovery_s is None:
            http.cancel()
            await asyncio.sleep(0.2)
            return events
        await asyncio.sleep(recovery_s)  # the start before the bind
        events.append("bind")
        await http.started()
        await http.started()  # once only
        http.cancel()  # stopping after: nothing to undo
        return events

    expected = {0.0: ["bind", "http"], 0.3: ["http", "bind"], None: []}[recovery_s]
    assert asyncio.run(run()) == expected


def test_a_first_start_writes_its_store_once_before_the_bind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's first start creates its id, the persistent paths and the cluster-level
    `min.insync.replicas` in one transaction (one commit, one fsync) before its listeners are
    bound; a restart writes nothing before them. The cluster-level value is there either way."""
    import wherry.server.broker as broker_module
    from wherry.coordination import paths
    from wherry.coordination.embedded import EmbeddedCoordinator
    from wherry.server.broker import Broker
    from wherry.server.config import load_config

    cfg = load_config(
        None,
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), "http.listeners": "",
         "min.insync.replicas": "2"},
    )

    async def start_once(coordinator: EmbeddedCoordinator) -> tuple[int, int, dict[str, str]]:
        before = coordinator.last_zxid
        at_bind: list[int] = []
        monkeypatch.setattr(broker_module, "log_bound", lambda _: at_bind.append(
            coordinator.last_zxid))
        broker = Broker(cfg, coordinator=coordinator)
        try:
            await asyncio.wait_for(broker.start(), 60)
            data, _ = await broker.store.get(paths.broker_config_path(None))
            return before, at_bind[0], paths.decode_config(data)
        finally:
            await broker.stop(controlled=False)

    async def run() -> list[tuple[int, int, dict[str, str]]]:
        with EmbeddedCoordinator(tmp_path / "meta") as coordinator:
            return [await start_once(coordinator), await start_once(coordinator)]

    first, restart = asyncio.run(run())
    assert first[1] - first[0] == 1, first  # the one transaction
    assert restart[1] == restart[0], restart  # nothing written before the bind
    assert first[2] == restart[2] == {"min.insync.replicas": "2"}


def test_the_console_names_the_state_change_logger_as_its_module_does() -> None:
    """`cli/serve.py` names the state-change logger without importing its module (imported
    once the listeners are bound)."""
    from wherry.cli.serve import STATE_CHANGE_LOGGER
    from wherry.runtime.state_change_log import LOGGER_NAME

    assert STATE_CHANGE_LOGGER == LOGGER_NAME


def test_a_frozen_record_behaves_as_the_frozen_dataclass_it_stands_for() -> None:
    """`common/record.frozen_record` (the start's configuration classes: methods not compiled
    per class) against `dataclass(frozen=True)` on the same class body."""
    import dataclasses

    from wherry.common.record import COMPILE_AFTER, frozen_record

    assert COMPILE_AFTER < 10  # the first pass below makes that many Record instances

    def body() -> dict[str, Any]:
        def __post_init__(self: Any) -> None:
            if self.port < 0:
                raise ValueError("port")

        return {
            "__annotations__": {"host": "str", "port": "int", "tags": "list[str]"},
            "port": 9092,
            "tags": dataclasses.field(default_factory=list),
            "__post_init__": __post_init__,
            "__module__": __name__,
        }

    for slots in (False, True):
        Plain = dataclasses.dataclass(frozen=True, slots=slots)(type("Plain", (), body()))
        Record = frozen_record(slots=slots)(type("Record", (), body()))
        # Record twice: its generic __init__, then (COMPILE_AFTER instances later) its own
        for cls in (Plain, Record, Record):
            a, b = cls("h"), cls(host="h", port=9092)
            assert a == b and a != cls("h", 1) and a != ("h", 9092, [])
            assert a.tags == [] and a.tags is not b.tags
            assert repr(a) == f"{cls.__qualname__}(host='h', port=9092, tags=[])"
            signature = "(host: 'str', port: 'int' = 9092, tags: 'list[str]' = <factory>)"
            assert cls.__doc__ == cls.__name__ + signature  # no docstring: dataclasses' own
            assert cls.__match_args__ == ("host", "port", "tags")  # type: ignore[attr-defined]
            assert [f.name for f in dataclasses.fields(a)] == ["host", "port", "tags"]
            assert dataclasses.asdict(a) == {"host": "h", "port": 9092, "tags": []}
            assert dataclasses.replace(a, port=1) == cls("h", 1)
            assert dataclasses.is_dataclass(a) and hasattr(a, "__dict__") is not slots
            for change in (lambda o: setattr(o, "port", 1), lambda o: delattr(o, "port")):
                with pytest.raises(dataclasses.FrozenInstanceError):
                    change(a)
            with pytest.raises(TypeError):
                hash(a)  # a list field: unhashable, as ever
            assert hash(cls("h", tags=())) == hash(cls("h", tags=()))
            for bad_args in ((), ("h", 1, [], 4)):
                with pytest.raises(TypeError):
                    cls(*bad_args)
            with pytest.raises(TypeError):
                cls("h", nope=1)
            with pytest.raises(ValueError):
                cls("h", -1)  # __post_init__ ran
        assert Record.__init__.__qualname__ == "Record.__init__"  # compiled by now



def test_a_record_behaves_as_the_dataclass_it_stands_for() -> None:
    """`common/record.record` (the start path's mutable holders) against `dataclass` on the
    same class body: built, compared, shown, changed, unhashable, as a dataclass."""
    import dataclasses

    from wherry.common.record import COMPILE_AFTER, record

    def body() -> dict[str, Any]:
        return {
            "__annotations__": {"n": "int", "seen": "list[int]"},
            "seen": dataclasses.field(default_factory=list),
            "__module__": __name__,
        }

    for slots in (False, True):
        Plain = dataclasses.dataclass(slots=slots)(type("Plain", (), body()))
        Record = record(slots=slots)(type("Record", (), body()))
        for cls in (Plain, *[Record] * (COMPILE_AFTER + 2)):
            a = cls(1)
            assert a == cls(n=1, seen=[]) and a != cls(2) and a.seen is not cls(1).seen
            assert repr(a) == f"{cls.__qualname__}(n=1, seen=[])"
            assert cls.__doc__ == f"{cls.__name__}(n: 'int', seen: 'list[int]' = <factory>)"
            a.n += 1
            a.seen.append(a.n)
            assert (a.n, a.seen) == (2, [2]) and dataclasses.astuple(a) == (2, [2])
            assert dataclasses.replace(a, n=5) == cls(5, [2])
            assert dataclasses.is_dataclass(a) and hasattr(a, "__dict__") is not slots
            assert not dataclasses.fields(a)[0].metadata
            with pytest.raises(TypeError):
                hash(a)
            with pytest.raises(TypeError):
                cls()
        assert Record.__init__.__qualname__ == "Record.__init__"  # compiled by now


def test_a_start_syncs_its_own_store_once_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broker with its own embedded store commits the start's writes (a first start's
    cluster id and paths) without an fsync each: still deferred when its listeners are bound,
    made durable after, before meta.properties names the cluster and the start completes."""
    import wherry.server.broker as broker_module
    from wherry.server.broker import Broker
    from wherry.server.config import load_config
    from wherry.server.meta_properties import read_meta_properties

    at_bind: list[int] = []
    real_log_bound = broker_module.log_bound

    def log_bound(ports: Any) -> None:
        coordinator = broker._coordinator
        assert coordinator is not None
        at_bind.append(coordinator._conn.execute("PRAGMA synchronous").fetchone()[0])
        real_log_bound(ports)

    monkeypatch.setattr(broker_module, "log_bound", log_bound)
    data = tmp_path / "data"
    cfg = load_config(
        None,
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(data), "http.listeners": ""},
    )
    broker = Broker(cfg)

    async def run() -> tuple[int, str]:
        await asyncio.wait_for(broker.start(), 60)
        try:
            coordinator = broker._coordinator
            assert coordinator is not None
            return coordinator._conn.execute("PRAGMA synchronous").fetchone()[0], (
                broker.cluster_id
            )
        finally:
            await asyncio.wait_for(broker.stop(), 60)

    synchronous, cluster_id = asyncio.run(run())
    assert at_bind == [0]  # OFF: nothing synced one by one before the bind
    assert synchronous == 2  # FULL once started: the writes so far synced
    assert read_meta_properties(data / "meta.properties")["cluster.id"] == cluster_id
