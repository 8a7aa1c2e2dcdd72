"""`wherry produce` / `wherry consume`: kafka-console-producer/consumer look-alikes.

Both speak the Kafka protocol through confluent-kafka. Without `--group` the consumer joins no
group: partitions are *assigned* explicitly (a dummy `group.id` is set because librdkafka
requires one; nothing is committed). With `--group G` it subscribes as a member of G, stores the
offset of each record it printed and commits them on exit, so the next run with G continues.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO, cast

import click
from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from wherry.cli.common import (
    CommandError,
    bootstrap_option,
    command_config_option,
    exits_on_error,
    kafka_error_message,
    load_properties_file,
    new_client,
    parse_kv,
)

DEFAULT_METADATA_TIMEOUT_MS = 15_000
DEFAULT_DELIVERY_TIMEOUT_MS = 30_000
_TRUE = frozenset({"true", "yes", "1", "on"})


_handle_errors = exits_on_error("ERROR ")


def _flag(props: Mapping[str, str], name: str, default: bool) -> bool:
    value = props.get(name)
    return default if value is None else value.strip().lower() in _TRUE


def _unescape(text: str) -> str:
    """Separators may be given as `\\t`, `\\n` etc. on the command line (as in Kafka)."""
    return (text.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")
            .replace("\\\\", "\\"))


def _base_config(bootstrap_server: str, config_file: Path | None,
                 properties: tuple[str, ...], what: str) -> dict[str, Any]:
    conf: dict[str, Any] = {
        "bootstrap.servers": bootstrap_server,
        "socket.connection.setup.timeout.ms": 10_000,
        "reconnect.backoff.max.ms": 1000,
        "log_level": 0,
    }
    conf.update(load_properties_file(config_file))
    conf.update(parse_kv(properties, what))
    conf["bootstrap.servers"] = bootstrap_server
    return conf


# --------------------------------------------------------------------------------------------
# Producer


@dataclass(frozen=True, slots=True)
class LineFormat:
    """How a stdin line becomes a record (Kafka's LineMessageReader properties)."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    ignore_error: bool = False
    null_marker: bytes | None = None

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> LineFormat:
        def sep(name: str, default: str) -> bytes:
            return _unescape(props.get(name, default)).encode("utf-8")

        null_marker = props.get("null.marker")
        fmt = cls(
            parse_key=_flag(props, "parse.key", False),
            key_separator=sep("key.separator", "\t"),
            parse_headers=_flag(props, "parse.headers", False),
            headers_delimiter=sep("headers.delimiter", "\t"),
            headers_separator=sep("headers.separator", ","),
            headers_key_separator=sep("headers.key.separator", ":"),
            ignore_error=_flag(props, "ignore.error", False),
            null_marker=_unescape(null_marker).encode("utf-8") if null_marker else None,
        )
        for name, value in (("key.separator", fmt.key_separator),
                            ("headers.delimiter", fmt.headers_delimiter),
                            ("headers.separator", fmt.headers_separator),
                            ("headers.key.separator", fmt.headers_key_separator)):
            if not value:
                raise CommandError(f"{name} must not be empty")
        return fmt

    def _null(self, data: bytes) -> bytes | None:
        return None if self.null_marker is not None and data == self.null_marker else data

    def parse(self, line: bytes, line_number: int
              ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of one line (without its line terminator)."""
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            idx = rest.find(self.headers_delimiter)
            if idx < 0:
                if not self.ignore_error:
                    raise CommandError(f"No headers delimiter found on line number "
                                       f"{line_number}: '{_show(line)}'")
            else:
                raw_headers, rest = rest[:idx], rest[idx + len(self.headers_delimiter):]
                for item in raw_headers.split(self.headers_separator) if raw_headers else []:
                    kidx = item.find(self.headers_key_separator)
                    if kidx < 0:
                        if self.ignore_error:
                            continue
                        raise CommandError(f"No header key separator found in pair "
                                           f"'{_show(item)}' on line number {line_number}")
                    hkey = item[:kidx].decode("utf-8", errors="replace")
                    if self.null_marker is not None and item[:kidx] == self.null_marker:
                        raise CommandError(f"Header keys should not be equal to the null "
                                           f"marker '{_show(self.null_marker)}' as they "
                                           f"can't be null")
                    hval = item[kidx + len(self.headers_key_separator):]
                    headers.append((hkey, self._null(hval)))
        if self.parse_key:
            idx = rest.find(self.key_separator)
            if idx < 0:
                if self.ignore_error:
                    return None, self._null(rest), headers
                raise CommandError(f"No key separator found on line number {line_number}: "
                                   f"'{_show(line)}'")
            return (self._null(rest[:idx]), self._null(rest[idx + len(self.key_separator):]),
                    headers)
        return None, self._null(rest), headers


def _show(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _binary_stdin() -> BinaryIO:
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        raise CommandError("standard input is not available")
    return cast(BinaryIO, buffer)


def read_lines(stream: BinaryIO) -> Iterator[bytes]:
    """Lines of a binary stream without their terminator (`\\n`, `\\r\\n` or `\\r`)."""
    for raw in stream:
        line = raw
        if line.endswith(b"\n"):
            line = line[:-1]
        if line.endswith(b"\r"):
            line = line[:-1]
        yield line


@dataclass(slots=True)
class DeliveryTracker:
    topic: str
    delivered: int = 0
    failed: int = 0
    first_error: str | None = None

    def callback(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        key = msg.key()
        value = msg.value()
        key_desc = "null" if key is None else f"{len(key)} bytes"
        value_desc = "null" if value is None else f"{len(value)} bytes"
        text = err.str()
        if self.first_error is None:
            self.first_error = text
        click.echo(f"ERROR Error when sending message to topic {self.topic} with key: "
                   f"{key_desc}, value: {value_desc} with error: {text}", err=True)


_COMPRESSION = ("none", "gzip", "snappy", "lz4", "zstd")


@click.command()
@bootstrap_option("--broker-list")
@click.option("--topic", required=True, help="The topic to produce to.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Line reader property: parse.key, key.separator, parse.headers, "
                   "headers.delimiter, headers.separator, headers.key.separator, "
                   "ignore.error, null.marker.")
@click.option("--compression-type", "--compression-codec", "compression",
              type=click.Choice(_COMPRESSION), default="none", show_default=True)
@click.option("--acks", "--request-required-acks", "acks", default="-1", show_default=True,
              type=click.Choice(["all", "-1", "0", "1"]), help="Required acks.")
@click.option("--partition", type=click.IntRange(min=0),
              help="Send every record to this partition (wherry extra).")
@click.option("--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="A header added to every record (repeatable).")
@click.option("--producer-property", "--command-property", "producer_properties", multiple=True,
              metavar="KEY=VALUE", help="A producer (librdkafka) config (repeatable).")
@command_config_option("Producer config properties file.", "--producer.config",
                       "--producer-config")
@click.option("--delivery-timeout-ms", type=click.IntRange(min=100),
              default=DEFAULT_DELIVERY_TIMEOUT_MS, show_default=True,
              help="Give up on a record not acknowledged within this time.")
@_handle_errors
def produce(
    bootstrap_server: str, topic: str, properties: tuple[str, ...], compression: str,
    acks: str, partition: int | None, headers: tuple[str, ...],
    producer_properties: tuple[str, ...], command_config: Path | None,
    delivery_timeout_ms: int,
) -> None:
    """Read records from stdin, one per line, and send them to a topic."""
    fmt = LineFormat.from_properties(parse_kv(properties, "property"))
    extra_headers: list[tuple[str, bytes | None]] = []
    for item in headers:
        if "=" not in item:
            raise CommandError(f"Invalid header {item!r}: must be in the format \"key=val\".")
        hk, hv = item.split("=", 1)
        extra_headers.append((hk, hv.encode("utf-8")))
    conf = {
        "client.id": "wherry-console-producer",
        "acks": "all" if acks == "-1" else acks,
        "compression.type": compression,
        "linger.ms": 5,
        "message.timeout.ms": delivery_timeout_ms,
        # Same key → partition mapping as the Java client.
        "partitioner": "murmur2_random",
    }
    conf.update(_base_config(bootstrap_server, command_config, producer_properties,
                             "producer property"))
    producer = new_client(Producer, conf, "producer")
    tracker = DeliveryTracker(topic)
    stdin = _binary_stdin()
    count = 0
    interrupted = False
    try:
        for number, line in enumerate(read_lines(stdin), start=1):
            key, value, hdrs = fmt.parse(line, number)
            all_headers = hdrs + extra_headers
            kwargs: dict[str, Any] = {"key": key, "value": value,
                                      "on_delivery": tracker.callback}
            if all_headers:
                kwargs["headers"] = all_headers
            if partition is not None:
                kwargs["partition"] = partition
            while True:
                try:
                    producer.produce(topic, **kwargs)
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
            producer.poll(0)
    except KeyboardInterrupt:
        interrupted = True
    remaining = producer.flush((delivery_timeout_ms + 5000) / 1000.0)
    if remaining:
        raise CommandError(f"{remaining} of {count} record(s) were still not delivered to "
                           f"topic {topic} after {delivery_timeout_ms} ms")
    if tracker.failed:
        raise CommandError(f"{tracker.failed} of {count} record(s) could not be delivered to "
                           f"topic {topic}: {tracker.first_error}")
    if interrupted:
        sys.exit(130)


# --------------------------------------------------------------------------------------------
# Consumer


@dataclass(frozen=True, slots=True)
class MessageFormat:
    """Kafka's DefaultMessageFormatter properties."""

    print_timestamp: bool = False
    print_key: bool = False
    print_value: bool = True
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    key_separator: str = "\t"
    line_separator: str = "\n"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_literal: str = "null"

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> MessageFormat:
        return cls(
            print_timestamp=_flag(props, "print.timestamp", False),
            print_key=_flag(props, "print.key", False),
            print_value=_flag(props, "print.value", True),
            print_partition=_flag(props, "print.partition", False),
            print_offset=_flag(props, "print.offset", False),
            print_headers=_flag(props, "print.headers", False),
            key_separator=_unescape(props.get("key.separator", "\t")),
            line_separator=_unescape(props.get("line.separator", "\n")),
            headers_separator=_unescape(props.get("headers.separator", ",")),
            headers_key_separator=_unescape(props.get("headers.key.separator", ":")),
            null_literal=props.get("null.literal", "null"),
        )

    def _text(self, data: bytes | str | None) -> str:
        if data is None:
            return self.null_literal
        if isinstance(data, str):
            return data
        return data.decode("utf-8", errors="replace")

    def format(self, msg: Message) -> str:
        columns: list[str] = []
        if self.print_timestamp:
            ts_type, ts = msg.timestamp()
            if ts_type == TIMESTAMP_CREATE_TIME:
                columns.append(f"CreateTime:{ts}")
            elif ts_type == TIMESTAMP_LOG_APPEND_TIME:
                columns.append(f"LogAppendTime:{ts}")
            else:
                columns.append("NO_TIMESTAMP")
        if self.print_partition:
            columns.append(f"Partition:{msg.partition()}")
        if self.print_offset:
            columns.append(f"Offset:{msg.offset()}")
        if self.print_headers:
            raw = msg.headers() or []
            hdrs = list(raw.items()) if isinstance(raw, dict) else list(raw)
            if hdrs:
                columns.append(self.headers_separator.join(
                    f"{k}{self.headers_key_separator}{self._text(v)}" for k, v in hdrs))
            else:
                columns.append("NO_HEADERS")
        if self.print_key:
            columns.append(self._text(msg.key()))
        if self.print_value:
            columns.append(self._text(msg.value()))
            return self.key_separator.join(columns) + self.line_separator
        # Kafka writes no line separator when the value is not printed.
        return self.key_separator.join(columns)


def parse_offset(text: str) -> int:
    match text.strip().lower():
        case "earliest":
            return OFFSET_BEGINNING
        case "latest":
            return OFFSET_END
        case other:
            try:
                value = int(other)
            except ValueError:
                raise CommandError(f"The provided offset value '{text}' is incorrect. Valid "
                                   f"values are 'earliest', 'latest', or a non-negative "
                                   f"long.") from None
            if value < 0:
                raise CommandError(f"The provided offset value '{text}' is incorrect. Valid "
                                   f"values are 'earliest', 'latest', or a non-negative "
                                   f"long.")
            return value


class _Stop:
    def __init__(self) -> None:
        self.requested = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.requested = True


@click.command()
@bootstrap_option()
@click.option("--topic", required=True, help="The topic to consume from.")
@click.option("--partition", type=click.IntRange(min=0),
              help="Only this partition (default: all partitions of the topic).")
@click.option("--offset", "offset_text", default=None,
              help="'earliest', 'latest' (default) or an offset number.")
@click.option("--from-beginning", is_flag=True, help="Same as --offset earliest.")
@click.option("--max-messages", type=click.IntRange(min=1),
              help="Exit after consuming this many messages.")
@click.option("--timeout-ms", type=click.IntRange(min=0),
              help="Exit if no message arrives for this many milliseconds.")
@click.option("--property", "properties", multiple=True, metavar="KEY=VALUE",
              help="Formatter property: print.key, print.value, print.timestamp, "
                   "print.partition, print.offset, print.headers, key.separator, "
                   "line.separator, headers.separator, headers.key.separator, null.literal.")
@click.option("--isolation-level", type=click.Choice(["read_uncommitted", "read_committed"]),
              default="read_uncommitted", show_default=True)
@click.option("--consumer-property", "--command-property", "consumer_properties", multiple=True,
              metavar="KEY=VALUE", help="A consumer (librdkafka) config (repeatable).")
@click.option("--group", default=None,
              help="Join this consumer group (subscribe) and commit the offsets of the records "
                   "printed; a later run with the same group continues after them.")
@command_config_option("Consumer config properties file.", "--consumer.config",
                       "--consumer-config")
@_handle_errors
def consume(
    bootstrap_server: str, topic: str, partition: int | None, offset_text: str | None,
    from_beginning: bool, max_messages: int | None, timeout_ms: int | None,
    properties: tuple[str, ...], isolation_level: str, consumer_properties: tuple[str, ...],
    command_config: Path | None, group: str | None,
) -> None:
    """Print records of a topic to stdout (partitions are assigned unless --group is given)."""
    if group is not None and partition is not None:
        raise CommandError("Options group and partition cannot be specified together.")
    if group is not None and offset_text is not None:
        raise CommandError("Options group and offset cannot be specified together.")
    if group is not None and not group.strip():
        raise CommandError("The group id must not be empty.")
    if from_beginning and offset_text is not None:
        raise CommandError("Options --from-beginning and --offset cannot be specified together.")
    start = OFFSET_BEGINNING if from_beginning else parse_offset(offset_text or "latest")
    fmt = MessageFormat.from_properties(parse_kv(properties, "property"))
    conf: dict[str, Any] = {
        "client.id": "wherry-console-consumer",
        "group.id": "wherry-console-consumer",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "auto.offset.reset": "earliest" if start == OFFSET_BEGINNING else "latest",
        "isolation.level": isolation_level,
    }
    conf.update(_base_config(bootstrap_server, command_config, consumer_properties,
                             "consumer property"))
    if group is not None:
        conf["group.id"] = group
    _consume(conf, topic, partition, start, fmt, max_messages, timeout_ms, group is not None)


def _partitions_of(consumer: Consumer, topic: str, bootstrap: str, timeout_ms: int
                   ) -> list[int]:
    deadline = time.monotonic() + timeout_ms / 1000.0
    last_error = "no metadata"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CommandError(f"Timed out after {timeout_ms} ms fetching metadata for topic "
                               f"{topic} from {bootstrap} ({last_error})")
        try:
            md = consumer.list_topics(topic, timeout=remaining)
        except KafkaException as e:
            last_error = kafka_error_message(e)
            continue
        tmd = md.topics.get(topic)
        if tmd is None:
            raise CommandError(f"Topic {topic} not present in metadata")
        err = tmd.error
        if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise CommandError(f"Topic {topic} does not exist")
        if tmd.partitions:
            return sorted(int(p) for p in tmd.partitions)
        last_error = err.str() if err is not None else "no partitions"
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _consume(conf: dict[str, Any], topic: str, partition: int | None, start: int,
             fmt: MessageFormat, max_messages: int | None, timeout_ms: int | None,
             in_group: bool = False) -> None:
    consumer = new_client(Consumer, conf, "consumer")
    stop = _Stop()
    previous = None
    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not in the main thread
        previous = None
    count = 0
    started = False
    out = sys.stdout
    try:
        metadata_timeout_ms = DEFAULT_METADATA_TIMEOUT_MS
        if timeout_ms is not None:
            metadata_timeout_ms = min(metadata_timeout_ms, max(timeout_ms, 1000))
        parts = _partitions_of(consumer, topic, str(conf["bootstrap.servers"]),
                               metadata_timeout_ms)
        if partition is not None:
            if partition not in parts:
                raise CommandError(f"Partition {partition} of topic {topic} does not exist "
                                   f"(the topic has {len(parts)} partition(s))")
            parts = [partition]
        if in_group:  # committed offsets first, else auto.offset.reset (set from start)
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, p, start) for p in parts])
        started = True
        last_activity = time.monotonic()
        while not stop.requested and (max_messages is None or count < max_messages):
            wait_s = 0.5
            if timeout_ms is not None:
                left = timeout_ms / 1000.0 - (time.monotonic() - last_activity)
                if left <= 0:
                    break
                wait_s = min(wait_s, left)
            msg = consumer.poll(wait_s)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal() or err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                 KafkaError.TOPIC_AUTHORIZATION_FAILED):
                    raise CommandError(f"Error processing message, terminating consumer "
                                       f"process: {err.str()}")
                continue
            out.write(fmt.format(msg))
            out.flush()
            if in_group:
                consumer.store_offsets(msg)
            count += 1
            last_activity = time.monotonic()
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if in_group and count:
            try:
                consumer.commit(asynchronous=False)
            except KafkaException as e:
                click.echo(f"Error: committing offsets: {kafka_error_message(e)}", err=True)
        consumer.close()
        if started:
            click.echo(f"Processed a total of {count} messages", err=True)
