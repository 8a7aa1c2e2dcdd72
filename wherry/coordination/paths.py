"""Node layout of the metadata store and the JSON records kept in it.

The layout and JSON follow Kafka's ZooKeeper layout (``kafka.zk.ZkData``) so that the data is
familiar to anyone who has inspected a Kafka cluster in ZooKeeper:

==========================================  ====================================================
path                                        content
==========================================  ====================================================
``/cluster/id``                             `encode_cluster_id` ``{"version":"1","id":...}``
``/controller``            (ephemeral)      `ControllerInfo` ``{"version":1,"brokerid":..}``
``/controller_epoch``                       `encode_controller_epoch`: the decimal epoch
``/brokers/ids/<id>``      (ephemeral)      `BrokerRegistration`
``/brokers/topics/<topic>``                 `TopicAssignment` ``{"version":2,"partitions":..}``
``/brokers/topics/<t>/partitions/<p>/state``  `PartitionState` ``{"version":1,"leader":..}``
``/config/topics/<topic>``                  `encode_config` ``{"version":1,"config":{..}}``
``/config/brokers/<id>``, ``/<default>``    `encode_config`
``/config/users/<sanitized user>``          `encode_config`: SCRAM credentials (and quotas)
``/config/changes/config_change_<seq>``     change notifications (sequential)
``/admin/delete_topics/<topic>``            empty; marks a topic for deletion
``/admin/reassign_partitions``              `encode_reassignment` (legacy reassignment request)
``/admin/preferred_replica_election``       `encode_partition_list` (legacy election request)
``/isr_change_notification/isr_change_<seq>``  ISR change notifications (sequential)
``/log_dir_event_notification/log_dir_event_<seq>``  `encode_log_dir_event` ``{"version":1,
                                            "broker":..,"event":1}``: a broker's log dir
                                            failed (sequential)
==========================================  ====================================================

A partition state's ZooKeeper data version (`Stat.version`) is Kafka's partition epoch and is
what conditional updates of the state node check; it is not part of the JSON.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote_plus

from wherry.common.record import frozen_record
from wherry.coordination.store import CreateOp, MetadataStore, NodeExistsError

if TYPE_CHECKING:
    import uuid

__all__ = [
    "ADMIN",
    "ADMIN_DELETE_TOPICS",
    "ADMIN_PREFERRED_REPLICA_ELECTION",
    "ADMIN_REASSIGN_PARTITIONS",
    "BROKERS",
    "BROKER_IDS",
    "BROKER_SEQID",
    "BROKER_TOPICS",
    "CLUSTER",
    "CLUSTER_ID",
    "CONFIG",
    "CONFIG_BROKERS",
    "CONFIG_CHANGES",
    "CONFIG_CHANGE_PREFIX",
    "CONFIG_CLIENTS",
    "CONFIG_TOPICS",
    "CONFIG_USERS",
    "CONTROLLER",
    "CONTROLLER_EPOCH",
    "DEFAULT_ENTITY",
    "ISR_CHANGE_NOTIFICATION",
    "ISR_CHANGE_PREFIX",
    "LATEST_PRODUCER_ID_BLOCK",
    "LOG_DIR_EVENT_NOTIFICATION",
    "LOG_DIR_EVENT_PREFIX",
    "PERSISTENT_PATHS",
    "BrokerRegistration",
    "ControllerInfo",
    "PartitionState",
    "TopicAssignment",
    "broker_config_entity",
    "broker_config_path",
    "broker_path",
    "decode_cluster_id",
    "decode_config",
    "decode_controller_epoch",
    "decode_log_dir_event",
    "decode_partition_list",
    "decode_reassignment",
    "delete_topic_path",
    "desanitize",
    "encode_cluster_id",
    "encode_config",
    "encode_controller_epoch",
    "encode_log_dir_event",
    "encode_partition_list",
    "encode_reassignment",
    "ensure_persistent_paths",
    "format_topic_id",
    "notify_config_change",
    "parse_topic_id",
    "partition_path",
    "partition_state_path",
    "sanitize",
    "topic_config_path",
    "topic_partitions_path",
    "topic_path",
    "user_config_entity",
    "user_config_path",
]

# ------------------------------------------------------------------------------------ layout

CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"  # client-id quotas; a user's are under /config/users/<u>/clients
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"
DEFAULT_ENTITY = "<default>"
ADMIN = "/admin"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
ADMIN_REASSIGN_PARTITIONS = "/admin/reassign_partitions"
ADMIN_PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "/isr_change_notification/isr_change_"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "/log_dir_event_notification/log_dir_event_"
LOG_DIR_FAILURE_EVENT = 1  # Kafka's LogDirEventNotificationHandler.LogDirFailureEvent

PERSISTENT_PATHS: tuple[str, ...] = (
    BROKER_IDS,
    BROKER_TOPICS,
    BROKER_SEQID,
    CONFIG_TOPICS,
    CONFIG_BROKERS,
    CONFIG_CHANGES,
    ADMIN_DELETE_TOPICS,
    ISR_CHANGE_NOTIFICATION,
    LATEST_PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    CLUSTER,
)
"""Persistent containers every cluster has (Kafka's ``ZkData.PersistentZkPaths``)."""


def _name(name: str) -> str:
    if not name or "/" in name or name in (".", "..") or "\x00" in name:
        raise ValueError(f"invalid node name: {name!r}")
    return name


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{int(broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{_name(topic)}"


def topic_partitions_path(topic: str) -> str:
    return f"{topic_path(topic)}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{topic_partitions_path(topic)}/{int(partition)}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{partition_path(topic, partition)}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{_name(topic)}"


def broker_config_path(broker_id: int | None) -> str:
    """``/config/brokers/<id>``, or the cluster-wide default entity for ``None``."""
    return f"{CONFIG_BROKERS}/{DEFAULT_ENTITY if broker_id is None else int(broker_id)}"


def broker_config_entity(broker_id: int | None) -> str:
    """A broker config change notification's ``entity_path``: ``brokers/<id>`` or
    ``brokers/<default>``."""
    return f"brokers/{DEFAULT_ENTITY if broker_id is None else int(broker_id)}"


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user (or client id) as a node name, URL-encoded as Java's
    URLEncoder does (letters, digits, `.`, `-`, `_` kept), with `%20` for a space and `%2A`
    for `*`. The names `.` and `..` are no node's names: their dots are encoded too (`%2E`),
    which `desanitize` reads back."""
    sanitized = quote(name, safe="").replace("~", "%7E")
    if sanitized in (".", ".."):
        return sanitized.replace(".", "%2E")
    return sanitized


def desanitize(name: str) -> str:
    return unquote_plus(name)


def user_config_path(user: str) -> str:
    """``/config/users/<sanitized user>``."""
    return f"{CONFIG_USERS}/{_name(sanitize(user))}"


def user_config_entity(user: str) -> str:
    """A user config change notification's ``entity_path``: ``users/<sanitized user>``."""
    return f"users/{sanitize(user)}"


async def notify_config_change(store: MetadataStore, entity_path: str) -> None:
    """Tell every broker that an entity's configs changed: a sequential
    ``/config/changes/config_change_<seq>`` node, ``{"version":2,"entity_path":...}``
    (Kafka's ZK config-change notification)."""
    await store.create(
        CONFIG_CHANGE_PREFIX,
        _dumps({"version": 2, "entity_path": entity_path}),
        sequential=True,
        make_parents=True,
    )


def delete_topic_path(topic: str) -> str:
    return f"{ADMIN_DELETE_TOPICS}/{_name(topic)}"


async def ensure_persistent_paths(
    store: MetadataStore, extra: Mapping[str, bytes] | None = None
) -> None:
    """Create the `PERSISTENT_PATHS` containers that do not exist yet (idempotent), and the
    `extra` nodes with their data where missing (a first start's cluster id): in one
    transaction with their parents (one fsync of the embedded store on a first start, one
    round trip to ZooKeeper), or, when another broker created some meanwhile, one at a time."""
    extra = extra or {}
    missing: dict[str, bytes] = {}  # parents first
    for path in (*PERSISTENT_PATHS, *extra):
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            node = "/" + "/".join(parts[:i])
            if node not in missing and await store.exists(node) is None:
                missing[node] = extra.get(node, b"")
    if not missing:
        return
    try:
        await store.multi([CreateOp(node, data) for node, data in missing.items()])
        return
    except NodeExistsError:
        pass
    for path in (*PERSISTENT_PATHS, *extra):
        if await store.exists(path) is None:
            try:
                await store.create(path, extra.get(path, b""), make_parents=True)
            except NodeExistsError:
                pass  # created concurrently by another broker


# ------------------------------------------------------------------------------------ JSON


def _dumps(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _loads(data: bytes, what: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"malformed {what} JSON: {data[:200]!r}") from e
    if not isinstance(obj, dict):
        raise ValueError(f"malformed {what} JSON (not an object): {data[:200]!r}")
    return obj


def _field(obj: Mapping[str, Any], key: str, what: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        raise ValueError(f"{what} JSON lacks {key!r}") from None


def _zero_uuid() -> uuid.UUID:
    """Kafka's ``Uuid.ZERO_UUID``: "no topic id" (`uuid`, and the `platform` module it
    imports, are imported with the first topic id: a start reads none before it answers)."""
    import uuid

    return uuid.UUID(int=0)


def format_topic_id(topic_id: uuid.UUID) -> str:
    """Kafka's textual Uuid form: URL-safe base64 of the 16 bytes, unpadded (22 chars)."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


def parse_topic_id(text: str) -> uuid.UUID:
    """Parse Kafka's base64 form (or, leniently, the canonical hex UUID form)."""
    import uuid

    if len(text) == 22:
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"invalid topic id: {text!r}") from e
        if len(raw) == 16:
            return uuid.UUID(bytes=raw)
    try:
        return uuid.UUID(text)
    except ValueError:
        raise ValueError(f"invalid topic id: {text!r}") from None


@frozen_record(slots=True)
class ListenerEndpoint:
    """One advertised listener of a broker: its name, address and security protocol."""

    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener}://{host}:{self.port}"


def _parse_endpoint(text: str, protocols: dict[str, str]) -> ListenerEndpoint:
    listener, sep, hostport = str(text).partition("://")
    if not sep:
        raise ValueError(f"endpoint {text!r} is not LISTENER://host:port")
    host, _, port_text = hostport.rpartition(":")
    return ListenerEndpoint(
        listener, host.strip("[]"), int(port_text), protocols.get(listener, listener)
    )


@frozen_record(slots=True)
class BrokerRegistration:
    """A broker's ephemeral registration at ``/brokers/ids/<broker_id>``.

    Encoded as Kafka's version-5 broker JSON (host, port, endpoints with the
    listener_security_protocol_map, rack, ...). ``host``/``port`` are the broker's first
    endpoint, ``endpoints`` all of them (one PLAINTEXT endpoint at host:port when none is
    given); ``address(listener)`` is where to reach it on a listener. ``broker_id`` and
    ``epoch`` are wherry additions (Kafka derives the id from the path and the epoch from the
    node's ``czxid``); decoding falls back to the ``broker_id`` argument and ``epoch=-1``.
    """

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    epoch: int = -1
    endpoints: tuple[ListenerEndpoint, ...] = ()

    def __post_init__(self) -> None:
        if not self.endpoints:
            default = (ListenerEndpoint("PLAINTEXT", self.host, self.port),)
            object.__setattr__(self, "endpoints", default)

    def address(self, listener: str | None) -> tuple[str, int]:
        """(host, port) on `listener`; the first endpoint when it is None or absent."""
        for ep in self.endpoints:
            if ep.listener == listener:
                return ep.host, ep.port
        return self.host, self.port

    def to_json(self, *, timestamp_ms: int = 0) -> bytes:
        endpoints = self.endpoints
        # Kafka's host/port fields hold the PLAINTEXT endpoint (null/-1 without one).
        plain = next((e for e in endpoints if e.security_protocol == "PLAINTEXT"), None)
        obj: dict[str, Any] = {
            "version": 5,
            "host": plain.host if plain is not None else None,
            "port": plain.port if plain is not None else -1,
            "endpoints": [str(e) for e in endpoints],
            "listener_security_protocol_map": {e.listener: e.security_protocol for e in endpoints},
            "jmx_port": -1,
            "features": {},
            "timestamp": str(timestamp_ms),
            "broker_id": self.broker_id,
            "epoch": self.epoch,
        }
        if self.rack is not None:
            obj["rack"] = self.rack
        return _dumps(obj)

    @classmethod
    def from_json(cls, data: bytes, *, broker_id: int | None = None) -> BrokerRegistration:
        obj = _loads(data, "broker registration")
        bid = obj.get("broker_id", broker_id)
        if bid is None:
            raise ValueError("broker registration JSON lacks 'broker_id' and none was given")
        protocols = {
            str(k): str(v) for k, v in (obj.get("listener_security_protocol_map") or {}).items()
        }
        endpoints = tuple(_parse_endpoint(e, protocols) for e in obj.get("endpoints") or [])
        if endpoints:
            host, port = endpoints[0].host, endpoints[0].port
        else:
            host, port = str(obj.get("host") or ""), int(obj.get("port", -1))
            if not host or port == -1:
                raise ValueError("broker registration JSON has neither host/port nor endpoints")
        return cls(
            broker_id=int(bid),
            host=str(host),
            port=int(port),
            rack=obj.get("rack"),
            epoch=int(obj.get("epoch", -1)),
            endpoints=endpoints,
        )


@frozen_record(slots=True)
class TopicAssignment:
    """``/brokers/topics/<topic>``: topic id and partition -> replica list (Kafka version 2).

    While a partition is being reassigned (KIP-455) its replica list is the full set (the
    original replicas plus the target ones) and ``adding`` / ``removing`` name the replicas
    being added and removed; both are empty otherwise."""

    topic_id: uuid.UUID
    partitions: dict[int, list[int]]
    adding: dict[int, list[int]] = field(default_factory=dict)
    removing: dict[int, list[int]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return _dumps(
            {
                "version": 2,
                "partitions": {str(p): list(r) for p, r in sorted(self.partitions.items())},
                "adding_replicas": {str(p): list(r) for p, r in sorted(self.adding.items()) if r},
                "removing_replicas": {
                    str(p): list(r) for p, r in sorted(self.removing.items()) if r
                },
                "topic_id": format_topic_id(self.topic_id),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> TopicAssignment:
        """Decode; a missing ``topic_id`` (pre-2.8 Kafka data) decodes as the zero UUID."""
        obj = _loads(data, "topic assignment")
        tid = obj.get("topic_id")
        return cls(
            topic_id=_zero_uuid() if tid is None else parse_topic_id(str(tid)),
            partitions=_replica_map(obj, "partitions"),
            adding=_replica_map(obj, "adding_replicas"),
            removing=_replica_map(obj, "removing_replicas"),
        )


def _replica_map(obj: Mapping[str, Any], key: str) -> dict[int, list[int]]:
    raw = obj.get(key) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"topic assignment {key!r} is not an object")
    return dict(sorted((int(p), [int(b) for b in r]) for p, r in raw.items()))


@frozen_record(slots=True)
class PartitionState:
    """``/brokers/topics/<t>/partitions/<p>/state``: leader and ISR (Kafka version 1)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    controller_epoch: int

    def to_json(self) -> bytes:
        return _dumps(
            {
                "controller_epoch": self.controller_epoch,
                "leader": self.leader,
                "version": 1,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> PartitionState:
        obj = _loads(data, "partition state")
        what = "partition state"
        return cls(
            leader=int(_field(obj, "leader", what)),
            leader_epoch=int(_field(obj, "leader_epoch", what)),
            isr=[int(b) for b in _field(obj, "isr", what)],
            controller_epoch=int(_field(obj, "controller_epoch", what)),
        )


@frozen_record(slots=True)
class ControllerInfo:
    """``/controller`` (ephemeral): the active controller ``{"version":1,"brokerid":..}``."""

    broker_id: int
    timestamp_ms: int = 0

    def to_json(self) -> bytes:
        return _dumps(
            {"version": 1, "brokerid": self.broker_id, "timestamp": str(self.timestamp_ms)}
        )

    @classmethod
    def from_json(cls, data: bytes) -> ControllerInfo:
        obj = _loads(data, "controller")
        return cls(
            broker_id=int(_field(obj, "brokerid", "controller")),
            timestamp_ms=int(obj.get("timestamp", 0)),
        )


def encode_controller_epoch(epoch: int) -> bytes:
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ValueError(f"malformed controller epoch: {data[:50]!r}") from e


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(_field(_loads(data, "cluster id"), "id", "cluster id"))


def encode_config(config: Mapping[str, str]) -> bytes:
    """Entity config (``/config/topics/<t>``, ``/config/brokers/<id>``): string values."""
    return _dumps({"version": 1, "config": {k: str(v) for k, v in sorted(config.items())}})


def decode_config(data: bytes) -> dict[str, str]:
    if not data:
        return {}
    config = _loads(data, "config").get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("config JSON 'config' is not an object")
    return {str(k): str(v) for k, v in config.items()}


def _partition_entries(data: bytes, what: str) -> list[dict[str, Any]]:
    obj = _loads(data, what)
    entries = obj.get("partitions")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{what} JSON 'partitions' is not a list of objects")
    return entries


def encode_reassignment(targets: Mapping[tuple[str, int], list[int]]) -> bytes:
    """``/admin/reassign_partitions`` (Kafka's legacy format, version 1)."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r)}
                for (t, p), r in sorted(targets.items())
            ],
        }
    )


def decode_reassignment(data: bytes) -> dict[tuple[str, int], list[int]]:
    what = "partition reassignment"
    out: dict[tuple[str, int], list[int]] = {}
    for e in _partition_entries(data, what):
        replicas = _field(e, "replicas", what)
        if not isinstance(replicas, list):
            raise ValueError(f"{what} JSON 'replicas' is not a list")
        out[(str(_field(e, "topic", what)), int(_field(e, "partition", what)))] = [
            int(b) for b in replicas
        ]
    return out


def encode_partition_list(partitions: Iterable[tuple[str, int]]) -> bytes:
    """``/admin/preferred_replica_election`` (Kafka's format, version 1)."""
    return _dumps(
        {
            "version": 1,
            "partitions": [{"topic": t, "partition": p} for t, p in sorted(set(partitions))],
        }
    )


def decode_partition_list(data: bytes) -> list[tuple[str, int]]:
    what = "preferred replica election"
    return [
        (str(_field(e, "topic", what)), int(_field(e, "partition", what)))
        for e in _partition_entries(data, what)
    ]


def encode_log_dir_event(broker_id: int) -> bytes:
    """A log dir failure notification's data (Kafka's LogDirEventNotificationSequenceZNode)."""
    return json.dumps(
        {"version": 1, "broker": int(broker_id), "event": LOG_DIR_FAILURE_EVENT},
        separators=(",", ":"),
    ).encode()


def decode_log_dir_event(data: bytes | None) -> int | None:
    """The broker of a log dir failure notification; None when it is not one."""
    try:
        d = json.loads(data or b"")
        if int(d.get("event", LOG_DIR_FAILURE_EVENT)) != LOG_DIR_FAILURE_EVENT:
            return None
        return int(d["broker"])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
