"""SCRAM credentials through real brokers (a 2-broker `DevCluster` on one store): confluent-
kafka's Alter/DescribeUserScramCredentials, Kafka's error codes on the wire, the change
notification reaching the other broker's cache, a restart, and `wherry users` (also straight
into ZooKeeper with `--zookeeper`)."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from tests import kafka_wire
from wherry.cli.common import CommandError
from wherry.cli.main import main
from wherry.cli.users import parse_scram_configs
from wherry.coordination import paths
from wherry.security.sasl_client import ScramClient
from wherry.security.scram import ScramServer, mechanism_by_name
from wherry.security.scram_store import ScramCredentialCache
from wherry.testing.cluster import DevCluster, wait_until
from wherry.testing.zookeeper import ZooKeeperServer

ERROR_PREFIX = "Error while executing config command : "


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["users", *args], catch_exceptions=False)


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result.stdout


def logs_in(cache: ScramCredentialCache, mechanism: str, user: str, password: str) -> bool:
    """Does a SCRAM exchange against `cache` succeed?"""
    mech = mechanism_by_name(mechanism)
    assert mech is not None
    server = ScramServer(mech, cache.lookup(mechanism))
    client = ScramClient(mechanism, user, password)
    try:
        token = client.evaluate(server.evaluate(client.initial_response()))
        assert token is not None
        assert client.evaluate(server.evaluate(token)) is None
    except Exception:
        return False
    return server.complete and client.complete


def test_parse_scram_configs() -> None:
    assert parse_scram_configs(
        "SCRAM-SHA-512=[iterations=8192,password=alice-secret],SCRAM-SHA-256=[password=x]"
    ) == [("SCRAM-SHA-512", 8192, "alice-secret"), ("SCRAM-SHA-256", 4096, "x")]
    for bad, message in [("SCRAM-SHA-1=[password=x]", "only SCRAM-SHA-256"),
                         ("SCRAM-SHA-256=[iterations=5000]", "a password must be specified"),
                         ("SCRAM-SHA-256=[password=x,salt=y]", "only iterations and password"),
                         ("SCRAM-SHA-256=[iterations=many,password=x]", "not a number")]:
        with pytest.raises(CommandError, match=message):
            parse_scram_configs(bad)


@pytest.mark.parametrize(("args", "message"), [
    (("--entity-name", "a"), "Command must include exactly one action"),
    (("--describe", "--add-config", "SCRAM-SHA-256=[password=x]"), "can only be used with --alter"),
    (("--alter", "--add-config", "SCRAM-SHA-256=[password=x]"), "An entity name must be specified"),
    (("--alter", "--entity-name", "a"), "At least one of --add-config or --delete-config"),
    (("--alter", "--entity-name", "a", "--delete-config", "PLAIN"), "can be deleted"),
])
def test_bad_arguments(args: tuple[str, ...], message: str) -> None:
    result = run("--bootstrap-server", "127.0.0.1:1", *args)
    assert result.exit_code == 1 and result.stderr.startswith(ERROR_PREFIX), result.stderr
    assert message in result.stderr


# -------------------------------------------------------------------------------------------
# A cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    with DevCluster(tmp_path_factory.mktemp("users") / "cluster", brokers=2,
                    overrides={"auto.leader.rebalance.enable": "false"}) as c:
        c.wait_for_controller()
        yield c


def cache(c: DevCluster, broker: int) -> ScramCredentialCache:
    return c.broker(broker).scram_credentials


def stored(c: DevCluster, user: str) -> dict[str, Any]:
    async def read() -> bytes:
        data, _ = await c.broker(0).store.get(paths.user_config_path(user))
        return data
    return dict(json.loads(c.run(read())))


def test_confluent_alter_describe_and_every_broker_cache(cluster: DevCluster) -> None:
    c = cluster
    user = f"alice-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": c.address(0), "log_level": 0})
    futs = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                     b"alice-secret"),
        UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                     b"alice-256", b"fixed-salt"),
    ], request_timeout=10)
    for f in futs.values():
        assert f.result(15) is None
    described = admin.describe_user_scram_credentials([user], request_timeout=10)[user].result(15)
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]
    everyone = admin.describe_user_scram_credentials(request_timeout=10).result(15)
    assert user in everyone
    # Kafka's node and credential strings; no password anywhere.
    node = stored(c, user)
    assert node["version"] == 1
    assert set(node["config"]) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert node["config"]["SCRAM-SHA-256"].startswith("salt=Zml4ZWQtc2FsdA==,stored_key=")
    assert node["config"]["SCRAM-SHA-512"].endswith(",iterations=8192")
    assert "alice-secret" not in json.dumps(node)
    # Both brokers' caches (broker 1 through the change notification) log the user in.
    for b in (0, 1):
        assert wait_until(lambda b=b: c.call(  # type: ignore[misc]
            lambda: logs_in(cache(c, b), "SCRAM-SHA-512", user, "alice-secret")), 10)
        assert c.call(lambda b=b: logs_in(cache(c, b), "SCRAM-SHA-256", user, "alice-256"))
        assert not c.call(lambda b=b: logs_in(cache(c, b), "SCRAM-SHA-256", user, "wrong"))
    # It survives a restart (loaded from the store at start-up).
    c.stop_broker(1)
    c.start_broker(1)
    assert c.call(lambda: logs_in(cache(c, 1), "SCRAM-SHA-512", user, "alice-secret"))


def alter_body(upsertions: list[dict[str, Any]], deletions: list[dict[str, Any]]
               ) -> dict[str, Any]:
    return {"upsertions": upsertions, "deletions": deletions}


def up(name: str, mechanism: int = 1, iterations: int = 4096) -> dict[str, Any]:
    return {"name": name, "mechanism": mechanism, "iterations": iterations,
            "salt": b"salt", "salted_password": b"x" * 32}


def test_kafka_error_codes_on_the_wire(cluster: DevCluster) -> None:
    boot = cluster.address(0)
    u = f"wire-{uuid.uuid4().hex[:6]}"
    resp = kafka_wire.call(boot, 51, 0, alter_body(
        [up(f"{u}-m0", 0), up(f"{u}-m3", 3), up(f"{u}-few", iterations=4095),
         up(f"{u}-many", iterations=16385), up(""), up(f"{u}-dup"), up(f"{u}-dup"),
         up(f"{u}-ok", 1), up(f"{u}-ok", 2)],
        [{"name": f"{u}-missing", "mechanism": 1}]))
    got = {r.user: (r.error_code, r.error_message) for r in resp.results}
    assert got == {
        f"{u}-m0": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        f"{u}-m3": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        f"{u}-few": (ErrorCode.unacceptable_credential, "Too few iterations"),
        f"{u}-many": (ErrorCode.unacceptable_credential, "Too many iterations"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        f"{u}-dup": (ErrorCode.duplicate_resource,
                     "A user credential cannot be altered twice in the same request"),
        f"{u}-ok": (ErrorCode.none, None),
        f"{u}-missing": (ErrorCode.resource_not_found,
                         "Attempt to delete a user credential that does not exist"),
    }
    resp = kafka_wire.call(boot, 50, 0, {"users": [{"name": f"{u}-ok"}, {"name": f"{u}-none"},
                                                   {"name": f"{u}-x"}, {"name": f"{u}-x"}]})
    got = {r.user: (r.error_code, [(i.mechanism, i.iterations) for i in r.credential_infos])
           for r in resp.results}
    assert got == {f"{u}-ok": (ErrorCode.none, [(1, 4096), (2, 4096)]),
                   f"{u}-none": (ErrorCode.resource_not_found, []),
                   f"{u}-x": (ErrorCode.duplicate_resource, [])}
    # SASL requests on a PLAINTEXT listener: ILLEGAL_SASL_STATE.
    assert kafka_wire.call(boot, 17, 1, {"mechanism": "PLAIN"}).error_code == \
        ErrorCode.illegal_sasl_state
    assert kafka_wire.call(boot, 36, 2, {"auth_bytes": b"\0a\0b"}).error_code == \
        ErrorCode.illegal_sasl_state


def test_users_tool(cluster: DevCluster) -> None:
    c = cluster
    boot = c.address(1)
    user = f"bob *{uuid.uuid4().hex[:4]}"  # sanitized in the store: bob%20%2A...
    out = ok(run("--bootstrap-server", boot, "--alter", "--entity-name", user, "--add-config",
                 "SCRAM-SHA-512=[iterations=8192,password=bob-secret],SCRAM-SHA-256=[password=x]"))
    assert out == f"Completed updating config for user {user}.\n"
    assert paths.user_config_path(user).startswith("/config/users/bob%20%2A")
    out = ok(run("--bootstrap-server", boot, "--describe", "--entity-name", user))
    assert out == (f"SCRAM credential configs for user-principal '{user}' are "
                   "SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n")
    assert f"user-principal '{user}'" in ok(run("--bootstrap-server", boot, "--describe"))
    assert wait_until(lambda: c.call(
        lambda: logs_in(cache(c, 0), "SCRAM-SHA-512", user, "bob-secret")), 10)
    out = ok(run("--bootstrap-server", boot, "--alter", "--entity-name", user,
                 "--delete-config", "SCRAM-SHA-512"))
    assert out == f"Completed updating config for user {user}.\n"
    out = ok(run("--bootstrap-server", boot, "--describe", "--entity-name", user))
    assert out == (f"SCRAM credential configs for user-principal '{user}' are "
                   "SCRAM-SHA-256=iterations=4096\n")
    assert wait_until(lambda: c.call(lambda: cache(c, 0).get("SCRAM-SHA-512", user) is None), 10)
    # Deleting it again: Kafka's RESOURCE_NOT_FOUND, as librdkafka reports it.
    result = run("--bootstrap-server", boot, "--alter", "--entity-name", user,
                 "--delete-config", "SCRAM-SHA-512")
    assert result.exit_code == 1
    assert "Attempt to delete a user credential that does not exist" in result.stderr
    assert ok(run("--bootstrap-server", boot, "--describe", "--entity-name", "nobody")) == ""


def test_users_tool_zookeeper_mode(zookeeper_server: ZooKeeperServer) -> None:
    zk = f"{zookeeper_server.connect_string}/users-{uuid.uuid4().hex[:8]}"
    out = ok(run("--zookeeper", zk, "--alter", "--entity-name", "admin",
                 "--add-config", "SCRAM-SHA-256=[password=admin-secret]"))
    assert out == "Completed updating config for user admin.\n"
    out = ok(run("--zookeeper", zk, "--describe"))
    assert out == ("SCRAM credential configs for user-principal 'admin' are "
                   "SCRAM-SHA-256=iterations=4096\n")
    result = run("--zookeeper", zk, "--alter", "--entity-name", "admin",
                 "--add-config", "SCRAM-SHA-256=[password=x,iterations=100]")
    assert result.exit_code == 1 and result.stderr == f"{ERROR_PREFIX}Too few iterations\n"

    async def load() -> ScramCredentialCache:
        from wherry.coordination.zookeeper import connect_zookeeper
        store = await connect_zookeeper(zk)
        try:
            cache = ScramCredentialCache()
            await cache.load_all(store)
            names = await store.get_children(paths.CONFIG_CHANGES)
            assert names  # the notification brokers would apply
            return cache
        finally:
            await store.close()

    cache_ = asyncio.run(asyncio.wait_for(load(), 30))
    assert logs_in(cache_, "SCRAM-SHA-256", "admin", "admin-secret")
    assert not logs_in(cache_, "SCRAM-SHA-256", "admin", "x")


