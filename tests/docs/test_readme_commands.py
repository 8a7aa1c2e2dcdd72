"""README's "Using it" section runs as written: every `wherry server` example starts (and stops
cleanly), and every tool command after them exits 0 against the broker of the example above
them. The only rewrites: listener ports become 0 (the OS chooses; the address comes from the
broker's "ready on" line), the examples' `/tmp/...` dirs become the test's own, and the tools'
bootstrap address becomes the address that broker got. Every process is bounded in time and
stopped by its PID."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
READY_TIMEOUT_S = 45.0
STOP_TIMEOUT_S = 30.0
COMMAND_TIMEOUT_S = 90.0
_READY = re.compile(r"ready on (\S+)")
_LISTENER_PORT = re.compile(r"(--listeners PLAINTEXT://127\.0\.0\.1:)(\d+)")
_DEFAULT_PORT = "9092"


def section(markdown: str, title: str) -> str:
    start = markdown.index(f"\n## {title}\n")
    end = markdown.find("\n## ", start + 1)
    return markdown[start:] if end < 0 else markdown[start:end]


def shell_commands(text: str) -> list[str]:
    """The commands of the ```sh blocks, continuation lines joined."""
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        joined = re.sub(r"\\\n\s*", "", block)
        out.extend(line.strip() for line in joined.splitlines() if line.strip())
    return out


def test_the_section_has_commands() -> None:
    commands = shell_commands(section((ROOT / "README.md").read_text(), "Using it"))
    servers = [c for c in commands if c.startswith("wherry server")]
    tools = [c for c in commands if not c.startswith("wherry server")]
    assert len(servers) >= 2 and len(tools) >= 10
    # Every tool command that talks to a broker names the one the server example listens on.
    ports = {m.group(2) for c in servers if (m := _LISTENER_PORT.search(c))}
    for c in tools:
        if re.search(r"\bwherry (topics|produce|consume|groups|reassign|elect)\b", c):
            found = re.findall(r"--bootstrap-server 127\.0\.0\.1:(\d+)", c)
            assert found and set(found) <= ports, c


class _Server:
    """One README `wherry server` example, run with its listener on port 0."""

    def __init__(self, command: str, cwd: Path, env: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.address = ""
        self.proc = subprocess.Popen(
            ["bash", "-c", f"exec {command}"], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._ready = threading.Event()
        threading.Thread(target=self._pump, daemon=True).start()
        if not self._ready.wait(READY_TIMEOUT_S) or not self.address:
            self.kill()
            raise AssertionError(f"{command!r} did not start:\n" + "".join(self.lines[-30:]))

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            if not self.address and (m := _READY.search(line)):
                self.address = m.group(1).split(",")[0]
                self._ready.set()
        self._ready.set()

    def stop(self) -> int:
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT_S)
        finally:
            self.kill()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _server_command(command: str, tmp: Path) -> tuple[str, str]:
    """(the command to run, the port its example listens on)."""
    command = re.sub(r"\s+#.*$", "", command)  # the comment, so that a flag can follow
    command = re.sub(r"/tmp/(\w+)", lambda m: str(tmp / m.group(1)), command)
    command = command.replace("config/server.properties", str(ROOT / "config/server.properties"))
    if m := _LISTENER_PORT.search(command):
        return _LISTENER_PORT.sub(r"\g<1>0", command), m.group(2)
    return f"{command} --listeners PLAINTEXT://127.0.0.1:0", _DEFAULT_PORT


def test_every_command_of_using_it_runs(tmp_path: Path) -> None:
    commands = shell_commands(section((ROOT / "README.md").read_text(), "Using it"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wherry = bin_dir / "wherry"  # this checkout's code, whatever `wherry` is installed
    wherry.write_text(f'#!/bin/sh\nexec {sys.executable} -m wherry "$@"\n')
    wherry.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    servers = [c for c in commands if c.startswith("wherry server")]
    tools = [c for c in commands if not c.startswith("wherry server")]
    running: dict[str, str] = {}  # the example's port -> the address its broker got
    last: _Server | None = None
    try:
        for i, example in enumerate(servers):
            command, port = _server_command(example, tmp_path)
            run_dir = tmp_path / f"server-{i}"
            run_dir.mkdir()
            if last is not None:  # one broker at a time: the examples share ports
                assert last.stop() == 0, "".join(last.lines[-30:])
            last = _Server(command, run_dir, env)
            running[port] = last.address
        assert last is not None
        work = tmp_path / "work"
        work.mkdir()
        for example in tools:
            command = re.sub(r"127\.0\.0\.1:(\d+)",
                             lambda m: running.get(m.group(1), m.group(0)), example)
            command = re.sub(r"/tmp/(\w+)", lambda m: str(tmp_path / m.group(1)), command)
            result = subprocess.run(["bash", "-c", command], cwd=work, env=env,
                                    capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            assert result.returncode == 0, (
                f"{example!r} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        assert last.stop() == 0, "".join(last.lines[-30:])
    finally:
        if last is not None:
            last.kill()
