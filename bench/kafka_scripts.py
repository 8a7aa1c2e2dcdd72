"""Kafka's command-line scripts served by wherry's tools.

Test suites written for Apache Kafka (librdkafka's among them) call `$KAFKA_PATH/bin/kafka-acls.sh`,
`kafka-configs.sh` and `kafka-topics.sh`. `write_scripts(bin_dir)` puts three small shell scripts
with those names in `bin_dir`; each runs `python -m bench.kafka_scripts TOOL ARGS...`, which
translates Kafka's arguments to the matching `wherry` command and runs it in the same process
(exit status passed through):

* `kafka-acls.sh ARGS` -> `wherry acls ARGS` (same options);
* `kafka-configs.sh ARGS` -> `wherry configs ARGS`, with Kafka's shortcuts `--topic T`,
  `--broker N`, `--broker-defaults` spelled out as `--entity-type/--entity-name/--entity-default`;
* `kafka-topics.sh --create|--alter|--delete|--describe|--list ARGS` ->
  `wherry topics create|alter|delete|describe|list ARGS`.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

TOOLS = {"kafka-acls.sh": "acls", "kafka-configs.sh": "configs", "kafka-topics.sh": "topics"}

_TOPIC_ACTIONS = {
    "--create": "create",
    "--alter": "alter",
    "--delete": "delete",
    "--describe": "describe",
    "--list": "list",
}


class UsageError(ValueError):
    """Arguments the translation cannot map to a wherry command."""


def _topics(args: Sequence[str]) -> list[str]:
    actions = [a for a in args if a in _TOPIC_ACTIONS]
    if len(actions) != 1:
        raise UsageError("kafka-topics.sh needs exactly one of " + ", ".join(_TOPIC_ACTIONS))
    rest = [a for a in args if a not in _TOPIC_ACTIONS]
    return ["topics", _TOPIC_ACTIONS[actions[0]], *rest]


def _configs(args: Sequence[str]) -> list[str]:
    out = ["configs"]
    it = iter(args)
    for arg in it:
        if arg in ("--topic", "--broker"):
            name = next(it, None)
            if name is None:
                raise UsageError(f"{arg} needs a value")
            kind = "topics" if arg == "--topic" else "brokers"
            out += ["--entity-type", kind, "--entity-name", name]
        elif arg == "--broker-defaults":
            out += ["--entity-type", "brokers", "--entity-default"]
        else:
            out.append(arg)
    return out


def translate(tool: str, args: Sequence[str]) -> list[str]:
    """The `wherry` arguments (after `python -m wherry`) for Kafka's `tool` called with `args`."""
    if tool == "acls":
        return ["acls", *args]
    if tool == "configs":
        return _configs(args)
    if tool == "topics":
        return _topics(args)
    raise UsageError(f"unknown tool {tool!r}")


def write_scripts(bin_dir: Path, python: str = sys.executable) -> list[Path]:
    """Write kafka-acls.sh, kafka-configs.sh and kafka-topics.sh (executable) into `bin_dir`.

    They run this module with `python`; the caller's environment must let it import `bench` and
    `wherry` (PYTHONPATH)."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for script, tool in TOOLS.items():
        path = bin_dir / script
        path.write_text(
            "#!/bin/sh\n"
            f"# {script} served by wherry {tool}\n"
            f'exec {shlex.quote(python)} -m bench.kafka_scripts {tool} "$@"\n'
        )
        path.chmod(0o755)
        written.append(path)
    return written


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m bench.kafka_scripts acls|configs|topics ARGS...", file=sys.stderr)
        return 2
    try:
        wherry_args = translate(argv[0], argv[1:])
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # wherry's command line in this process: one interpreter start per call, as the suites
    # time these calls against their test timeouts.
    from wherry.cli.entry import main as wherry_main

    sys.argv = ["wherry", *wherry_args]
    try:
        wherry_main()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
