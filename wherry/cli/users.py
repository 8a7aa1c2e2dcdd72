"""`wherry users`: users' SCRAM credentials, like `kafka-configs --entity-type users`.

    wherry users --bootstrap-server H:P --describe [--entity-name alice]
    wherry users --bootstrap-server H:P --alter --entity-name alice --add-config \\
        'SCRAM-SHA-512=[iterations=8192,password=alice-secret],SCRAM-SHA-256=[password=x]'
    wherry users --bootstrap-server H:P --alter --entity-name alice --delete-config SCRAM-SHA-512
    wherry users --zookeeper H:P --alter --entity-name admin \\
        --add-config 'SCRAM-SHA-256=[password=s]'
    wherry users --zookeeper H:P --zk-config-file server.properties --alter ...

With `--bootstrap-server` the tool uses Describe/AlterUserScramCredentials through
confluent-kafka (`--command-config` holds the client's properties: security.protocol,
sasl.mechanism, sasl.username, ...). With `--zookeeper` it writes the credentials straight into
the metadata store, before any broker runs: Kafka's way to create the inter-broker SCRAM user;
`--zk-config-file` gives it the brokers' ZooKeeper identity and `zookeeper.set.acl`, so what
it creates is protected as the brokers' nodes are (`coordination/zk_acl.py`).
Output is kafka-configs' (`SCRAM credential configs for user-principal 'alice' are
SCRAM-SHA-512=iterations=8192`, `Completed updating config for user alice.`); a failure prints
`Error while executing config command : <message>` and exits with status 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import click
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from wherry.cli.common import (
    AdminService,
    CommandError,
    admin_options,
    exits_on_error,
    parse_kv,
)
from wherry.cli.configs import parse_add_config, parse_delete_config
from wherry.coordination.store import MetadataStore, StoreError
from wherry.coordination.zk_acl import ZkAclConfigError, ZkSecurity, zk_security_from_props
from wherry.security.scram import (
    DEFAULT_ITERATIONS,
    MECHANISMS,
    new_salt,
    salted_password,
)
from wherry.security.scram_store import (
    DescribeResult,
    ScramDeletion,
    ScramUpsertion,
    alter_scram_credentials,
    describe_scram_credentials,
)

_handle_errors = exits_on_error("Error while executing config command : ")
_common_options = admin_options("Overall timeout of each request to the cluster (wherry extra).")

ScramSpec = tuple[str, int, str]  # mechanism, iterations, password


def parse_scram_configs(text: str) -> list[ScramSpec]:
    """`SCRAM-SHA-512=[iterations=8192,password=s],SCRAM-SHA-256=[password=x]` →
    [(mechanism, iterations, password)]; iterations default to 4096."""
    out: list[ScramSpec] = []
    for mechanism, value in parse_add_config(text).items():
        if mechanism not in MECHANISMS:
            raise CommandError(
                f"Invalid config {mechanism} for users: only {', '.join(MECHANISMS)} "
                "credentials are supported"
            )
        fields = parse_kv(value.split(","), f"{mechanism} config")
        unknown = set(fields) - {"iterations", "password"}
        if unknown:
            raise CommandError(f"Invalid {mechanism} config {', '.join(sorted(unknown))}: "
                               "only iterations and password are allowed")
        if not fields.get("password"):
            raise CommandError(f"Invalid {mechanism} config: a password must be specified")
        try:
            iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        except ValueError as e:
            raise CommandError(f"Invalid {mechanism} iterations "
                               f"{fields['iterations']!r}: not a number") from e
        out.append((mechanism, iterations, fields["password"]))
    return out


def parse_scram_deletions(items: Sequence[str]) -> list[str]:
    names = parse_delete_config(items)
    for name in names:
        if name not in MECHANISMS:
            raise CommandError(f"Invalid config {name} for users: only "
                               f"{', '.join(MECHANISMS)} credentials can be deleted")
    return names


def describe_line(user: str, credentials: Sequence[tuple[str, int]]) -> str:
    infos = ", ".join(f"{m}=iterations={i}" for m, i in credentials)
    return f"SCRAM credential configs for user-principal '{user}' are {infos}"


def _check_args(describe: bool, alter: bool, entity_name: str | None, add_config: str | None,
                delete_config: Sequence[str]) -> None:
    if describe == alter:
        raise CommandError("Command must include exactly one action: --describe, --alter")
    if describe and (add_config or delete_config):
        raise CommandError("--add-config and --delete-config can only be used with --alter")
    if alter and not entity_name:
        raise CommandError("An entity name must be specified with --alter of users")
    if alter and not add_config and not delete_config:
        raise CommandError(
            "At least one of --add-config or --delete-config must be specified with --alter"
        )


@click.command("users")
@_common_options
@click.option("--zookeeper", metavar="HOST:PORT[/chroot]",
              help="Write to / read from the metadata store in ZooKeeper directly (no broker).")
@click.option("--zk-config-file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="With --zookeeper: a properties file (the broker's will do) whose "
              "zookeeper.set.acl and zookeeper.digest.username/password the tool uses, so the "
              "nodes it creates get the brokers' ACLs and it can read /config/users.")
@click.option("--describe", is_flag=True, help="List the users' SCRAM credentials.")
@click.option("--alter", is_flag=True, help="Add or delete a user's SCRAM credentials.")
@click.option("--entity-name", help="The user.")
@click.option("--add-config",
              help="SCRAM-SHA-256=[iterations=N,password=P],SCRAM-SHA-512=[password=P]")
@click.option("--delete-config", multiple=True, help="SCRAM-SHA-256,SCRAM-SHA-512")
@_handle_errors
def users(bootstrap_server: str, command_config: Path | None, timeout_ms: int,
          zookeeper: str | None, zk_config_file: Path | None, describe: bool, alter: bool,
          entity_name: str | None, add_config: str | None,
          delete_config: tuple[str, ...]) -> None:
    """Describe or alter users' SCRAM credentials (like kafka-configs --entity-type users)."""
    _check_args(describe, alter, entity_name, add_config, delete_config)
    upserts = parse_scram_configs(add_config) if add_config else []
    deletes = parse_scram_deletions(delete_config)
    if zookeeper is not None:
        asyncio.run(_via_store(zookeeper, describe, entity_name, upserts, deletes,
                               _zk_security(zk_config_file)))
        return
    service = AdminService.connect(bootstrap_server, command_config, timeout_ms)
    if describe:
        _describe_via_broker(service, entity_name)
    else:
        assert entity_name is not None
        _alter_via_broker(service, entity_name, upserts, deletes)


# --------------------------------------------------------------------------------------------
# Through a broker (confluent-kafka)


def _describe_via_broker(service: AdminService, entity_name: str | None) -> None:
    admin = service.admin
    timeout = service.timeout_s
    if entity_name is None:
        fut = admin.describe_user_scram_credentials(request_timeout=timeout)
        assert not isinstance(fut, dict)
        described = service._wait(fut, "describeUserScramCredentials")
    else:
        futs = admin.describe_user_scram_credentials([entity_name], request_timeout=timeout)
        assert isinstance(futs, dict)
        try:
            described = {entity_name: service._wait(
                futs[entity_name], "describeUserScramCredentials")}
        except Exception as e:  # a user without credentials is no error (Kafka prints nothing)
            if "does not exist" in str(e):
                return
            raise
    for user in sorted(described):
        creds = [(MECHANISMS_BY_CODE[int(info.mechanism.value)], int(info.iterations))
                 for info in described[user].scram_credential_infos]
        click.echo(describe_line(user, creds))


MECHANISMS_BY_CODE = {m.type_code: name for name, m in MECHANISMS.items()}


def _alter_via_broker(service: AdminService, user: str, upserts: Sequence[ScramSpec],
                      deletes: Sequence[str]) -> None:
    alterations: list[UserScramCredentialAlteration] = []
    for mechanism, iterations, password in upserts:
        mech = ScramMechanism(MECHANISMS[mechanism].type_code)
        alterations.append(UserScramCredentialUpsertion(
            user, ScramCredentialInfo(mech, iterations), password.encode("utf-8")))
    for mechanism in deletes:
        alterations.append(UserScramCredentialDeletion(
            user, ScramMechanism(MECHANISMS[mechanism].type_code)))
    futs = service.admin.alter_user_scram_credentials(alterations,
                                                      request_timeout=service.timeout_s)
    for fut in futs.values():
        service._wait(fut, "alterUserScramCredentials")
    click.echo(f"Completed updating config for user {user}.")


# --------------------------------------------------------------------------------------------
# Straight into the store (--zookeeper)


def _zk_security(path: Path | None) -> ZkSecurity | None:
    if path is None:
        return None
    from wherry.server.config import read_properties

    try:
        return zk_security_from_props(read_properties(path))
    except ZkAclConfigError as e:
        raise CommandError(f"{path}: {e}") from e


async def _via_store(zookeeper: str, describe: bool, entity_name: str | None,
                     upserts: Sequence[ScramSpec], deletes: Sequence[str],
                     security: ZkSecurity | None = None) -> None:
    from wherry.coordination.zookeeper import ZooKeeperUnavailableError, connect_zookeeper

    try:
        store = await connect_zookeeper(zookeeper, connect_timeout_s=15.0, security=security)
    except ZooKeeperUnavailableError as e:
        raise CommandError(str(e)) from e
    try:
        await _in_store(store, describe, entity_name, upserts, deletes)
    except StoreError as e:
        hint = ""
        if "NoAuth" in str(e):
            hint = (" (the nodes have ZooKeeper ACLs, zookeeper.set.acl: pass the brokers' "
                    "identity with --zk-config-file)")
        raise CommandError(f"{e}{hint}") from e
    finally:
        await store.close()


async def _in_store(store: MetadataStore, describe: bool, entity_name: str | None,
                    upserts: Sequence[ScramSpec], deletes: Sequence[str]) -> None:
    if describe:
        names = None if entity_name is None else [entity_name]
        for r in await describe_scram_credentials(store, names):
            _print_described(r)
        return
    assert entity_name is not None
    upsertions = []
    for mechanism, iterations, password in upserts:
        mech = MECHANISMS[mechanism]
        salt = new_salt()
        upsertions.append(ScramUpsertion(
            entity_name, mech.type_code, iterations, salt,
            salted_password(mech, password, salt, iterations)))
    deletions = [ScramDeletion(entity_name, MECHANISMS[m].type_code) for m in deletes]
    for result in await alter_scram_credentials(store, upsertions, deletions):
        if result.error_code != ErrorCode.none:
            raise CommandError(result.error_message or result.error_code.name)
    click.echo(f"Completed updating config for user {entity_name}.")


def _print_described(r: DescribeResult) -> None:
    if r.credentials:
        click.echo(describe_line(r.user, [(c.mechanism, c.iterations) for c in r.credentials]))
