"""What a plain `wherry server` start imports (issue 15: start ≤ 150 ms, idle RSS ≤ 50 MB).

The speed itself is measured by the bench (`bench/run.py --only f`); these tests guard the
import graph that makes it: a real broker is started in a child process (the console entry,
as `wherry server` runs it) and, once ready, writes its `sys.modules` when asked. Libraries and
packages a start without ZooKeeper, ACLs, HTTP listener or client requests has no use for must
not be among them, and no API's handler or kio schema beyond ApiVersions' is imported before
its API is first called.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from wherry.protocol import codec
from wherry.protocol.codec import decode_response, encode_request
from wherry.server.handlers import HANDLERS, SUPPORTED_VERSIONS
from wherry.testing.cluster import stop_process

REPO = Path(__file__).resolve().parent.parent

# Nothing of these is needed by a broker that uses the embedded store, no authorizer, no
# HTTP listener, and has not yet been asked anything.
FORBIDDEN_PREFIXES = (
    "click",  # `wherry server` starts on the entry's fast path (`cli/serve.py`)
    "wherry.server.authz",  # the authorization rules: first request on
    "wherry.security.acl",
    "kazoo",  # only with --zookeeper
    "confluent_kafka",  # the CLI tools' client; never in the broker
    "kafka",  # kafka-python, same
    "aiokafka",
    "pyspark",
    "rich",
    "prometheus_client",  # the HTTP listener's
    "hypothesis",
    "wherry.coordination.zookeeper",
    "wherry.observability.service",
    "wherry.observability.collector",
    "wherry.security.acl_authorizer",
    "wherry.spark",
    "wherry.sim",
    "wherry.testing",
)
# The CLI: only the entry and the server command (click and the tools are not imported).
CLI_ALLOWED = {"wherry.cli", "wherry.cli.entry", "wherry.cli.serve"}
# Handler modules imported at start: ApiVersions' (the early answer) and the shared helpers.
HANDLERS_ALLOWED = {
    "wherry.server.handlers",
    "wherry.server.handlers.versions",
    "wherry.server.handlers.api_versions",
    "wherry.server.handlers.group_common",
}
# kio's schemas: the headers, the error codes, the index; ApiVersions' once answered.
KIO_SCHEMAS_ALLOWED = {"errors", "index", "request_header", "response_header", "api_versions"}

_CHILD = """
import json, os, sys, threading, time
def dump_on_request(out):  # once the test asks (it creates out + ".req"), write sys.modules
    while not os.path.exists(out + ".req"):
        time.sleep(0.02)
    while True:
        try:
            names = sorted(n for n, m in list(sys.modules.items()) if m is not None)
            break
        except RuntimeError:  # changed size meanwhile
            pass
    with open(out + ".tmp", "w") as f:
        json.dump(names, f)
    os.replace(out + ".tmp", out)
threading.Thread(target=dump_on_request, args=(sys.argv[1],), daemon=True).start()
import wherry.server.startup as startup  # the modules once the listeners are bound, too
_log_bound, _out = startup.log_bound, sys.argv[1]
def log_bound(ports):
    with open(_out + ".bind", "w") as f:
        json.dump(sorted(n for n, m in list(sys.modules.items()) if m is not None), f)
    _log_bound(ports)
startup.log_bound = log_bound
sys.argv = ["wherry", *sys.argv[2:]]
from wherry.cli.entry import main
main()
"""


def _started_broker_modules(
    tmp_path: Path, *args: str, while_ready: Callable[[list[str]], None] | None = None
) -> tuple[set[str], str]:
    """Start `wherry server` (console entry) on a free port; once it is ready, its modules
    (and in `modules.json.bind` those it had when its listeners were bound). `while_ready`,
    given the output lines, runs once they are written, before the broker stops."""
    out = tmp_path / "modules.json"
    cmd = [
        sys.executable,
        "-c",
        _CHILD,
        str(out),
        "server",
        "--listeners",
        "PLAINTEXT://127.0.0.1:0",
        "--log-dirs",
        str(tmp_path / "data"),
        "--override",
        "http.listeners=",
        *args,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=REPO
    )
    lines: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if "ready on " in line:
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    try:
        assert ready.wait(60) and proc.poll() is None, "no ready line:\n" + "".join(lines)
        bootstrap = next(ln for ln in lines if "ready on " in ln).split("ready on ")[1].split()[0]
        (tmp_path / "modules.json.req").touch()
        deadline = time.monotonic() + 30
        while not out.exists():
            assert time.monotonic() < deadline, "no module list:\n" + "".join(lines)
            time.sleep(0.02)
        if while_ready is not None:
            while_ready(lines)
        return set(json.loads(out.read_text())), bootstrap
    finally:
        stop_process(proc, 30.0)


def test_a_started_broker_imports_only_what_it_uses(tmp_path: Path) -> None:
    modules, _ = _started_broker_modules(tmp_path)
    assert "wherry.server.broker" in modules and "uvloop" in modules  # it did start
    forbidden = sorted(
        m for m in modules for p in FORBIDDEN_PREFIXES if m == p or m.startswith(p + ".")
    )
    assert not forbidden, f"imported by a plain start: {forbidden}"
    cli = sorted(m for m in modules if m.startswith("wherry.cli") and m not in CLI_ALLOWED)
    assert not cli, f"CLI tools imported by `wherry server`: {cli}"
    handlers = sorted(
        m
        for m in modules
        if m.startswith("wherry.server.handlers") and m not in HANDLERS_ALLOWED
    )
    assert not handlers, f"handler modules imported before their API was called: {handlers}"
    schemas = sorted(
        m
        for m in modules
        if m.startswith("kio.schema.") and m.split(".")[2] not in KIO_SCHEMAS_ALLOWED
    )
    assert not schemas, f"kio schemas imported before their API was called: {schemas}"


# Imported only once the listeners are bound: the kio codec (ApiVersions is answered by the
# hand-written `protocol.api_versions_codec` until then) and everything `LATE_IMPORTS` names.
NOT_BEFORE_BIND = (
    "kio.serial",
    "kio.index",
    "kio.schema.api_versions",
    "wherry.protocol.codec",
    "kio.schema.errors",  # the early answer writes its two error codes itself; kio's enum of
    "kio.static",  # every error code (and its datetime) comes with the codec
    "wherry.protocol.records",
    "wherry.server.dispatch",
    "wherry.replication.replica_manager",
    "wherry.controller.controller",
    "wherry.group",
    "wherry.txn",
    "wherry.share.partition",
    "wherry.share.config",
    # made on first use, once bound: the broker's metadata cache and its gate, the controller
    # fence, the in-process controller channel, its randomness, the state-change log
    "wherry.replication.metadata_cache",
    "wherry.server.metadata_gate",
    "wherry.replication.controller_requests",
    "wherry.controller",
    "random",
    "wherry.runtime.state_change_log",
    "wherry.coordination.change_notifications",
    # needed by no start before its bind: `uuid` (and the `platform` it imports: a first
    # start's cluster id is made from os.urandom), ZooKeeper's ACL settings (none given), the
    # dynamic config checks (an alter's), the periodic-task scheduler (started last)
    "uuid",
    "platform",
    "wherry.coordination.zk_acl",
    "wherry.server.dynamic_validation",
    "wherry.runtime.scheduler",
)


def test_the_listeners_are_bound_before_the_kio_codec_and_the_rest_are_imported(
    tmp_path: Path,
) -> None:
    from wherry.server.startup import LATE_IMPORTS

    _started_broker_modules(tmp_path)
    at_bind = set(json.loads((tmp_path / "modules.json.bind").read_text()))
    assert "wherry.server.broker" in at_bind and "wherry.protocol.api_versions_codec" in at_bind
    early = sorted(
        m
        for m in at_bind
        for p in (*NOT_BEFORE_BIND, *LATE_IMPORTS)
        if m == p or m.startswith(p + ".")
    )
    assert not early, f"imported before the listeners were bound: {early}"
    assert not any(m.startswith("kio.schema.") and m.count(".") > 3 for m in at_bind), sorted(
        m for m in at_bind if m.startswith("kio.schema.")
    )


def test_zookeeper_support_is_imported_only_with_zookeeper() -> None:
    """The ZooKeeper store and kazoo load on first use, not with the coordination package."""
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import wherry.coordination, wherry.coordination.zk_acl, wherry.server.config\n"
        "assert 'kazoo' not in sys.modules, 'kazoo'\n"
        "from wherry.coordination import connect_zookeeper\n"
        "assert 'kazoo' in sys.modules and callable(connect_zookeeper)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0, done.stderr


def test_every_handler_module_has_its_handler() -> None:
    """The table names modules (imported on first use): each exists and has `handle`."""
    assert HANDLERS.keys() == SUPPORTED_VERSIONS.keys()
    for key, name in HANDLERS.items():
        module = importlib.import_module(f"wherry.server.handlers.{name}")
        assert inspect.iscoroutinefunction(module.handle), (key, name)


def test_codec_interbroker_keys_match_their_codecs() -> None:
    """The codec routes keys 4-7 to codecs it imports on first use; the keys must agree."""
    from wherry.protocol.controlled_shutdown_codec import CONTROLLED_SHUTDOWN_KEY
    from wherry.protocol.interbroker_codec import INTERBROKER_VERSIONS

    assert set(INTERBROKER_VERSIONS) == codec._INTERBROKER_KEYS
    assert CONTROLLED_SHUTDOWN_KEY == codec._CONTROLLED_SHUTDOWN_KEY


def test_late_imports_exist() -> None:
    from wherry.server.startup import LATE_IMPORTS

    for name in LATE_IMPORTS:
        importlib.import_module(name)


def test_api_versions_is_answered_before_the_start_completes(tmp_path: Path) -> None:
    """Listeners are bound after log recovery; until the start completes only ApiVersions is
    answered, every other request waits for it."""
    asyncio.run(_api_versions_before_start(tmp_path))


async def _api_versions_before_start(tmp_path: Path) -> None:
    from wherry.security.scram_store import ScramCredentialCache
    from wherry.server.broker import Broker
    from wherry.server.config import load_config
    from wherry.server.listener_security import broker_security
    from wherry.server.network import ConnectionInfo
    from wherry.server.sasl_gate import SaslGate

    cfg = load_config(
        None,
        {"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(tmp_path), "http.listeners": ""},
    )
    broker = Broker(cfg)  # not started
    broker.security = broker_security(cfg.raw, cfg.listeners, cfg.advertised)
    broker.sasl_gate = SaslGate(broker.security, ScramCredentialCache)
    conn = ConnectionInfo("127.0.0.1:1", "PLAINTEXT", 1)

    api_versions = encode_request(
        18, 3, 7, {"client_software_name": "t", "client_software_version": "1"}
    )
    answer = await asyncio.wait_for(broker.handle_frame(conn, memoryview(api_versions[4:])), 5)
    assert answer is not None
    _, resp = decode_response(18, 3, answer[4:], expect_correlation_id=7)
    assert resp.error_code == ErrorCode.none
    assert {int(k.api_key) for k in resp.api_keys} == set(SUPPORTED_VERSIONS)

    metadata = encode_request(3, 12, 8, {"topics": None, "allow_auto_topic_creation": False})
    waiting = asyncio.ensure_future(broker.handle_frame(conn, memoryview(metadata[4:])))
    await asyncio.sleep(0.2)
    assert not waiting.done()  # held until the start completes
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


# With the defaults' HTTP listener: not before the Kafka listener is bound (the HTTP listener
# and the console; the password encoder, only with a password config; importlib.resources, for
# the console's page; TLS, only for TLS listeners; what applies dynamic configs), and not in
# an idle broker (started, asked nothing, never scraped): what the first scrape of /metrics
# brings, the first compressed batch, the console's page, and what the crc32c package's
# `__init__` would (importlib.metadata, with email, zipfile, csv, argparse: `common/crc32c.py`).
HTTP_NOT_BEFORE_BIND = (
    "prometheus_client",
    "wherry.observability.service",
    "wherry.observability.http_server",
    "wherry.observability.sources",
    "wherry.observability.readiness",
    "wherry.observability.collector",
    "wherry.observability.events",
    "wherry.security.password_encoder",
    "importlib.resources",
    "wherry.server.tls",  # TLS listeners only
    "wherry.server.dynamic_apply",  # the stored dynamic configs, applied once bound
)
NOT_WHEN_IDLE = (
    "prometheus_client",
    "wherry.observability.collector",
    "cramjam",
    "crc32c._cli",
    "importlib.metadata",
    "email",
    "zipfile",
    "argparse",
    "csv",
    "importlib.resources",
    "wherry.security.password_encoder",
    "encodings.idna",  # a resolver's: listeners on an address are bound without one
)


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.status, resp.read()


def _http_answers(lines: list[str]) -> None:
    """The HTTP listener answers as ever: /healthz, /metrics (its registry built now), /."""
    url = next(ln for ln in lines if "console on " in ln).split("console on ")[1].split()[0]
    assert _get(f"{url}/healthz") == (200, b"ok\n")
    status, metrics = _get(f"{url}/metrics")
    assert status == 200
    assert b"kafka_server_replicamanager_underreplicatedpartitions" in metrics
    assert b"process_resident_memory_bytes" in metrics
    status, page = _get(f"{url}/")
    assert status == 200 and page.lstrip().lower().startswith(b"<!doctype html>")


def test_with_the_http_listener_the_kafka_listener_still_comes_first(tmp_path: Path) -> None:
    """The defaults (an HTTP listener with the console): the HTTP listener, the metrics
    registry, prometheus_client and the console's hub are imported only once the Kafka
    listener is bound, so they never delay it (a start that takes long before its bind
    brings the HTTP listener up meanwhile: `startup.HttpStart`); prometheus_client and the
    registry only with the first scrape of /metrics."""
    from wherry.server.startup import LATE_IMPORTS

    snapshots: list[set[str]] = []

    def scrape(lines: list[str]) -> None:  # the idle broker's modules, then scrape
        snapshots.append(set(json.loads((tmp_path / "modules.json").read_text())))
        _http_answers(lines)

    _started_broker_modules(
        tmp_path, "--override", "http.listeners=http://127.0.0.1:0", while_ready=scrape
    )
    at_bind = set(json.loads((tmp_path / "modules.json.bind").read_text()))
    early = sorted(
        m
        for m in at_bind
        for p in (*HTTP_NOT_BEFORE_BIND, *NOT_BEFORE_BIND, *LATE_IMPORTS)
        if m == p or m.startswith(p + ".")
    )
    assert not early, f"imported before the Kafka listener was bound: {early}"
    (idle,) = snapshots
    assert {"wherry.observability.service", "wherry.observability.events"} <= idle  # then
    assert "crc32c._crc32c" in idle  # the extension, without its package's `__init__`
    held = sorted(m for m in idle for p in NOT_WHEN_IDLE if m == p or m.startswith(p + "."))
    assert not held, f"held by an idle broker: {held}"
