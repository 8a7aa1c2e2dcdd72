"""`wherry server`'s click-free fast path (`cli/serve.py`): it takes exactly what click's
`server` command takes, with the same values, and hands anything else back to click."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from wherry.cli.main import server
from wherry.cli.serve import SERVER_OPTIONS, parse_server_args

REPO = Path(__file__).resolve().parents[2]


def _click_values(args: list[str]) -> tuple[Path | None, dict[str, Any]] | None:
    try:
        ctx = server.make_context("server", list(args))
    except click.exceptions.Exit:  # --help
        return None
    except click.UsageError:
        return None
    params = dict(ctx.params)
    return params.pop("properties"), params


def _cases(props: Path) -> list[list[str]]:
    return [
        [],
        ["--listeners", "PLAINTEXT://127.0.0.1:0", "--log-dirs", "/tmp/x"],
        ["--listeners=PLAINTEXT://127.0.0.1:0", "--log-dirs=", "--broker-id", "7"],
        ["--broker-id", " 12 "],
        ["--broker-id", "1_0"],
        ["--override", "a=b", "--override=c=d=e", "--override", "f"],
        ["--zookeeper", "127.0.0.1:2181/chroot", "--advertised-listeners", "X://h:1"],
        ["--log-level", "debug", "--log-format", "json"],
        ["--log-level=WARNING", "--log-format=text", "--log-format", "json"],
        [str(props), "--broker-id", "3"],
        ["--listeners", "a", "--listeners", "b"],  # the last one counts
        # click refuses (or answers) these: the fast path must hand them back.
        ["--help"],
        ["-h"],
        ["--broker-id", "x"],
        ["--broker-id"],
        ["--log-format", "yaml"],
        ["--log-format", "JSON"],
        ["--no-such-option", "1"],
        ["missing.properties"],
        [str(props), str(props)],
        [str(props.parent)],
    ]


def test_fast_path_takes_what_click_takes_with_the_same_values(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text("broker.id=3\n")
    for args in _cases(props):
        fast = parse_server_args(args)
        if fast is None:
            continue  # handed to click, which answers as it always did
        assert fast == _click_values(args), args
    # Each declared option is click's too, and the fast path knows each of click's options.
    click_flags = {o for p in server.params for o in p.opts if o.startswith("--")}
    assert {o.flag for o in SERVER_OPTIONS} == click_flags - {"--help"}


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["--broker-id", "x"], True),
        (["--log-format", "yaml"], True),
        (["--no-such-option"], True),
        (["--help"], False),
    ],
)
def test_click_refuses_what_the_fast_path_hands_back(
    tmp_path: Path, args: list[str], refused: bool
) -> None:
    assert parse_server_args(args) is None
    assert (_click_values(args) is None) is True
    done = subprocess.run(
        [sys.executable, "-m", "wherry", "server", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=_env(),
    )
    if refused:
        assert done.returncode == 2, done
        assert "Error:" in done.stderr and "Usage:" in done.stderr, done.stderr
    else:
        assert done.returncode == 0 and "--broker-id INTEGER" in done.stdout, done


def test_config_errors_are_reported_by_click(tmp_path: Path) -> None:
    """A bad override or config makes the fast path hand over: click's message, exit 2 / 1."""
    for args, code, text in (
        (["--override", "nokeyvalue"], 2, "is not KEY=VALUE"),
        (["--listeners", "FOO://127.0.0.1:0", "--override", "http.listeners="], 1, "FOO"),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "wherry", "server", "--log-dirs", str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env=_env(),
        )
        assert done.returncode == code, done
        assert "Error:" in done.stderr and text in done.stderr, done.stderr


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(REPO)}


@pytest.mark.parametrize(
    ("args", "http"),
    [
        ([], "http://127.0.0.1:9644"),
        (["--listeners", "PLAINTEXT://127.0.0.1:0"], "http://127.0.0.1:0"),
        (["--override", "log.retention.ms=5", "--broker-id", "3"], "http://127.0.0.1:9644"),
    ],
)
def test_the_default_http_listener_is_the_config_as_if_given_last(
    tmp_path: Path, args: list[str], http: str
) -> None:
    """The default `http.listeners` is added to the parsed config: the same config (every
    field, `raw` included) as a command line that sets it, the setting last in `raw`."""
    from wherry.cli.serve import server_config

    props = tmp_path / "server.properties"
    props.write_text("num.partitions=2\nlog.dirs=/tmp/d\n")
    for properties in (None, props):
        parsed = parse_server_args([*([str(properties)] if properties else []), *args])
        assert parsed is not None
        given = parse_server_args(
            [*([str(properties)] if properties else []), *args, "--override",
             f"http.listeners={http}"]
        )
        assert given is not None
        cfg, explicit = server_config(*parsed), server_config(*given)
        assert cfg == explicit and list(cfg.raw)[-1] == "http.listeners"
        assert [(e.host, e.port) for e in cfg.http_listeners] == [
            ("127.0.0.1", int(http.rsplit(":", 1)[1]))
        ]
