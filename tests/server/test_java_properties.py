"""`.properties` files as Java's Properties.load reads them: Latin-1 bytes, `\\uXXXX` escapes,
line continuations, `=`/`:`/blank separators, `#`/`!` comments; and a broker started from a
file holding a Latin-1 byte and `\\uXXXX` escapes uses the values they spell."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from wherry.common.java_properties import PropertiesError, decode_properties, parse_properties
from wherry.server.config import BrokerConfigError, read_properties


def test_latin1_bytes_and_unicode_escapes() -> None:
    data = (
        b"# caf\xe9 comment\n"
        b"name=caf\xe9\n"  # one Latin-1 byte: U+00E9
        b"escaped=caf\\u00e9 \\u20ac \\u00E9\n"  # escapes beyond Latin-1 too (the euro sign)
        b"k\\u00e9y = v\n"  # in a key as well
    )
    assert decode_properties(data) == {"name": "café", "escaped": "café € é", "kéy": "v"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("a\t=\t1", {"a": "1"}),
        ("a = 1 ", {"a": "1 "}),  # trailing blanks belong to the value
        ("   a=1", {"a": "1"}),  # leading blanks are not
        ("a==1", {"a": "=1"}),  # one separator, then the value
        ("a= :1", {"a": ":1"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("a\\=b=c", {"a=b": "c"}),  # an escaped separator belongs to the key
        ("a\\ b=c", {"a b": "c"}),
        ("a\\:b c", {"a:b": "c"}),
        ("# c\n! c\n  # c\n\n \t\f\na=1", {"a": "1"}),
        ("a=x\\\n    y\\\n  z", {"a": "xyz"}),  # continuations drop the next lines' blanks
        ("a=x\\\\\nb=y", {"a": "x\\", "b": "y"}),  # an even number of backslashes: no join
        ("a=x\\\n# not a comment", {"a": "x# not a comment"}),
        ("# comment \\\na=1", {"a": "1"}),  # a comment never goes on
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("a=\\t\\n\\r\\f\\q\\\\", {"a": "\t\n\r\fq\\"}),
        ("a=1\na=2", {"a": "2"}),
        ("a=x\\", {"a": "x"}),  # a continuation at the end of the file
    ],
)
def test_java_syntax(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


@pytest.mark.parametrize("bad", ["a=\\u12", "a=\\u12G4", "\\uZZZZ=1"])
def test_malformed_unicode_escape(bad: str) -> None:
    with pytest.raises(PropertiesError, match="malformed"):
        parse_properties(bad)


def test_read_properties_trims_values_and_names_errors(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_bytes(b"broker.id = 3  \nlog.dirs=/data/caf\xe9\n")
    assert read_properties(path) == {"broker.id": "3", "log.dirs": "/data/café"}
    with pytest.raises(BrokerConfigError, match="does not exist"):
        read_properties(tmp_path / "missing")
    with pytest.raises(BrokerConfigError, match="is a directory"):
        read_properties(tmp_path)
    path.write_bytes(b"a=\\u00\n")
    with pytest.raises(BrokerConfigError, match=f"properties file {path}: line 1: malformed"):
        read_properties(path)


def test_broker_starts_from_a_latin1_file_with_unicode_escapes(tmp_path: Path) -> None:
    # The log dir's name is spelled with a Latin-1 byte and a \u escape, over a continued line.
    data = tmp_path / "données-\u00e9t\u00e9"
    props = tmp_path / "server.properties"
    props.write_bytes(
        b"# Serveur de caf\xe9\n"
        b"! another comment\n"
        b"broker.id : 0\n"
        b"log.dirs = " + str(tmp_path).encode() + b"/donn\xe9es-\\\n"
        b"    \\u00e9t\\u00e9\n"
        b"num.partitions 2\n"
    )
    # Started from the file alone (no --log-dirs), so the file says where the data goes.
    cmd = [sys.executable, "-m", "wherry", "server", str(props), "--listeners",
           "PLAINTEXT://127.0.0.1:0", "--override", "http.listeners="]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    watchdog = threading.Timer(60, proc.kill)  # bounded, whatever the output
    watchdog.start()
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if "ready on" in line or len(lines) > 500:
                break
        output = "".join(lines)
        assert "ready on" in output, output
        assert "Traceback" not in output
        assert (data / "meta.properties").is_file(), sorted(p.name for p in tmp_path.iterdir())
    finally:
        watchdog.cancel()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0
