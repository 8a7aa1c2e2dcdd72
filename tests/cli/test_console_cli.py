"""`wherry produce` / `wherry consume` against a real broker (plus offline formatter tests)."""

from __future__ import annotations

import re
import time

import pytest
from click.testing import CliRunner, Result
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message

from wherry.cli.common import CommandError
from wherry.cli.console import LineFormat, MessageFormat, parse_offset
from wherry.cli.main import main


def run(*args: str, stdin: bytes | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin, catch_exceptions=False)


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.exit_code, result.stdout, result.stderr)
    return result


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    ok(run("topics", "create", "--bootstrap-server", bootstrap, "--topic", topic,
           "--partitions", str(partitions)))


def produce(bootstrap: str, topic: str, stdin: bytes, *args: str) -> Result:
    return run("produce", "--bootstrap-server", bootstrap, "--topic", topic, *args, stdin=stdin)


def consume(bootstrap: str, topic: str, *args: str) -> Result:
    return run("consume", "--bootstrap-server", bootstrap, "--topic", topic, *args)


def processed(result: Result) -> int:
    match = re.search(r"Processed a total of (\d+) messages", result.stderr)
    assert match is not None, result.stderr
    return int(match.group(1))


# -------------------------------------------------------------------------------------------
# Offline


def test_line_format_key_and_headers() -> None:
    fmt = LineFormat.from_properties({"parse.key": "true", "key.separator": ":"})
    assert fmt.parse(b"k:v:w", 1) == (b"k", b"v:w", [])
    assert fmt.parse(b":v", 1) == (b"", b"v", [])
    with pytest.raises(CommandError, match="No key separator found on line number 7: 'abc'"):
        fmt.parse(b"abc", 7)
    lenient = LineFormat.from_properties({"parse.key": "true", "ignore.error": "true"})
    assert lenient.parse(b"abc", 1) == (None, b"abc", [])

    hdr = LineFormat.from_properties({"parse.headers": "true", "parse.key": "true",
                                      "null.marker": "NULL"})
    assert hdr.parse(b"h1:a,h2:NULL\tkey\tNULL", 1) == (
        b"key", None, [("h1", b"a"), ("h2", None)])
    assert hdr.parse(b"\tk\tv", 1) == (b"k", b"v", [])
    with pytest.raises(CommandError, match="header key separator"):
        hdr.parse(b"bad\tk\tv", 3)

    plain = LineFormat.from_properties({})
    assert plain.parse(b"a\tb", 1) == (None, b"a\tb", [])
    with pytest.raises(CommandError, match="must not be empty"):
        LineFormat.from_properties({"key.separator": ""})


def test_message_format_like_kafka_default_formatter() -> None:
    msg = Message(topic="t", partition=2, offset=41, key=b"k", value=b"v\xff",
                  headers=[("h1", b"x"), ("h2", None)], timestamp=(TIMESTAMP_CREATE_TIME, 1000))
    everything = MessageFormat.from_properties({
        "print.timestamp": "true", "print.partition": "true", "print.offset": "true",
        "print.headers": "true", "print.key": "true", "key.separator": "|"})
    assert everything.format(msg) == (
        "CreateTime:1000|Partition:2|Offset:41|h1:x,h2:null|k|v\ufffd\n")
    assert MessageFormat.from_properties({}).format(msg) == "v\ufffd\n"

    bare = Message(topic="t", partition=0, offset=0, key=None, value=None, headers=None,
                   timestamp=(TIMESTAMP_LOG_APPEND_TIME, 5))
    fmt = MessageFormat.from_properties({"print.key": "true", "print.headers": "true",
                                         "print.timestamp": "true"})
    assert fmt.format(bare) == "LogAppendTime:5\tNO_HEADERS\tnull\tnull\n"
    no_value = MessageFormat.from_properties({"print.key": "true", "print.value": "false"})
    assert no_value.format(msg) == "k"


def test_parse_offset() -> None:
    assert parse_offset("earliest") == -2
    assert parse_offset("latest") == -1
    assert parse_offset("17") == 17
    for bad in ("-3", "soon"):
        with pytest.raises(CommandError, match="incorrect"):
            parse_offset(bad)


def test_argument_errors(unreachable_bootstrap: str) -> None:
    both = consume(unreachable_bootstrap, "t", "--from-beginning", "--offset", "3")
    assert both.exit_code == 1
    assert "cannot be specified together" in both.stderr
    bad = consume(unreachable_bootstrap, "t", "--offset", "soon")
    assert bad.exit_code == 1
    assert "The provided offset value 'soon' is incorrect" in bad.stderr
    bad_prop = produce(unreachable_bootstrap, "t", b"x\n", "--property", "parse.key")
    assert bad_prop.exit_code == 1
    assert '"key=val"' in bad_prop.stderr


def test_produce_to_unreachable_broker_fails(unreachable_bootstrap: str) -> None:
    start = time.monotonic()
    result = produce(unreachable_bootstrap, "t", b"a\nb\n", "--delivery-timeout-ms", "1500")
    assert time.monotonic() - start < 15
    assert result.exit_code == 1
    assert "2 of 2 record(s) could not be delivered" in result.stderr
    assert "Error when sending message to topic t" in result.stderr


def test_consume_from_unreachable_broker_fails(unreachable_bootstrap: str) -> None:
    start = time.monotonic()
    result = consume(unreachable_bootstrap, "t", "--timeout-ms", "2000")
    assert time.monotonic() - start < 10
    assert result.exit_code == 1
    assert (f"Timed out after 2000 ms fetching metadata for topic t from {unreachable_bootstrap}"
            in result.stderr)


# -------------------------------------------------------------------------------------------
# Against the broker


def test_produce_keys_and_headers_then_consume(cli_bootstrap: str, topic_name: str) -> None:
    create_topic(cli_bootstrap, topic_name)
    lines = b"k1:hello\nk2:w\xc3\xb6rld\r\nk3:a:b\n"
    ok(produce(cli_bootstrap, topic_name, lines, "--property", "parse.key=true",
               "--property", "key.separator=:", "--header", "source=cli", "--header", "n=1"))
    result = ok(consume(cli_bootstrap, topic_name, "--from-beginning", "--max-messages", "3",
                        "--property", "print.key=true", "--property", "print.headers=true",
                        "--property", "print.partition=true", "--property", "print.offset=true",
                        "--property", "print.timestamp=true", "--property", "key.separator=|"))
    rows = [line.split("|") for line in result.stdout.splitlines()]
    assert [r[1:] for r in rows] == [
        ["Partition:0", "Offset:0", "source:cli,n:1", "k1", "hello"],
        ["Partition:0", "Offset:1", "source:cli,n:1", "k2", "wörld"],
        ["Partition:0", "Offset:2", "source:cli,n:1", "k3", "a:b"],
    ]
    now_ms = time.time() * 1000
    for r in rows:
        kind, ts = r[0].split(":")
        assert kind == "CreateTime"
        assert abs(int(ts) - now_ms) < 120_000
    assert processed(result) == 3


def test_timeout_offsets_and_latest(cli_bootstrap: str, topic_name: str) -> None:
    create_topic(cli_bootstrap, topic_name)
    ok(produce(cli_bootstrap, topic_name, b"m0\nm1\nm2\n"))

    start = time.monotonic()
    result = ok(consume(cli_bootstrap, topic_name, "--offset", "earliest", "--timeout-ms", "1500"))
    assert result.stdout == "m0\nm1\nm2\n"
    assert processed(result) == 3
    assert time.monotonic() - start < 15

    result = ok(consume(cli_bootstrap, topic_name, "--partition", "0", "--offset", "1",
                        "--timeout-ms", "1000"))
    assert result.stdout == "m1\nm2\n"

    result = ok(consume(cli_bootstrap, topic_name, "--timeout-ms", "1000"))  # default: latest
    assert result.stdout == ""
    assert processed(result) == 0

    result = ok(consume(cli_bootstrap, topic_name, "--from-beginning", "--max-messages", "1"))
    assert result.stdout == "m0\n"
    assert processed(result) == 1


def test_partitions_and_compression(cli_bootstrap: str, topic_name: str) -> None:
    create_topic(cli_bootstrap, topic_name, partitions=3)
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        ok(produce(cli_bootstrap, topic_name, f"{codec}-a\n{codec}-b\n".encode(),
                   "--partition", "2", "--compression-type", codec))
    ok(produce(cli_bootstrap, topic_name, b"p0\n", "--partition", "0", "--acks", "1"))

    result = ok(consume(cli_bootstrap, topic_name, "--partition", "2", "--from-beginning",
                        "--timeout-ms", "1000", "--property", "print.offset=true"))
    assert result.stdout.splitlines() == [
        f"Offset:{i}\t{codec}-{s}"
        for i, (codec, s) in enumerate((c, s) for c in ("none", "gzip", "snappy", "lz4", "zstd")
                                       for s in "ab")]
    result = ok(consume(cli_bootstrap, topic_name, "--from-beginning", "--max-messages", "11",
                        "--timeout-ms", "3000", "--property", "print.partition=true"))
    assert processed(result) == 11
    assert result.stdout.splitlines().count("Partition:0\tp0") == 1

    missing = consume(cli_bootstrap, topic_name, "--partition", "7")
    assert missing.exit_code == 1
    assert "Partition 7 of topic" in missing.stderr


def test_null_values_and_reader_errors(cli_bootstrap: str, topic_name: str) -> None:
    create_topic(cli_bootstrap, topic_name)
    ok(produce(cli_bootstrap, topic_name, b"k:NULL\nNULL:v\n", "--property", "parse.key=true",
               "--property", "key.separator=:", "--property", "null.marker=NULL"))
    result = ok(consume(cli_bootstrap, topic_name, "--from-beginning", "--max-messages", "2",
                        "--property", "print.key=true", "--property", "print.headers=true"))
    assert result.stdout == "NO_HEADERS\tk\tnull\nNO_HEADERS\tnull\tv\n"

    bad = produce(cli_bootstrap, topic_name, b"a:1\nnokey\n", "--property", "parse.key=true",
                  "--property", "key.separator=:")
    assert bad.exit_code == 1
    assert "No key separator found on line number 2: 'nokey'" in bad.stderr


def test_consume_unknown_topic(cli_bootstrap: str, topic_name: str) -> None:
    result = consume(cli_bootstrap, topic_name, "--timeout-ms", "1000")
    assert result.exit_code == 1
    assert f"Topic {topic_name} does not exist" in result.stderr
