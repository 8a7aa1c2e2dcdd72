"""What a start costs in instructions, load-independent: callgrind from exec to the first
ApiVersions answer (or to the bind).

```sh
python bench/start_instructions.py                        # this tree, bytecode cached
python bench/start_instructions.py --no-bytecode          # nothing of wherry compiled
python bench/start_instructions.py --to bind --broker-tree ../before
```

`wherry server` with its defaults (the console and metrics listener on) in a fresh working
directory (its default data dir, a first start), its Kafka listener on a free loopback port, as
the console entry runs it, under `valgrind --tool=callgrind`. Two hooks, which import nothing:
when the listeners are bound (`startup.log_bound`) the process connects to its own Kafka
listener and sends one ApiVersions v3 request, as a client waiting for the bind would; once the
first answer is written to its transport, the process exits at once (`os._exit`), and
callgrind's count ends there (`--to bind`: it exits at the bind). The HTTP listener's grace
(brought up early when a start takes over 0.5 s) is turned off: under valgrind every start
takes that long. The broker's `wherry` package is copied from the tree without its
`__pycache__`; with bytecode, one untimed start compiles it first; `--no-bytecode` runs with
PYTHONDONTWRITEBYTECODE=1, as an editable install in such an environment does (the standard
library's and the dependencies' bytecode is used either way). PYTHONHASHSEED=0: the count repeats
to ~0.1 % (the free port and temporary names vary). Needs valgrind; ~10 s a run.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Run as `python -c HOOKED server ...`: the console entry with the two hooks (see above).
HOOKED = r"""
import os, sys
EXIT_AT = os.environ["START_COUNT_TO"]
# ApiVersions v3, correlation id 1, client id "bench", software "bench" "1.0"
BODY = b"\x00\x12\x00\x03\x00\x00\x00\x01\x00\x05bench\x00\x06bench\x041.0\x00"
REQUEST = len(BODY).to_bytes(4, "big") + BODY
held = []

def patch(name, module):
    if name == "wherry.server.startup":
        bound = module.log_bound
        def log_bound(ports):
            bound(ports)
            if EXIT_AT == "bind":
                os._exit(0)
            import socket
            client = socket.socket()  # not create_connection: its resolver imports IDNA
            client.connect(("127.0.0.1", ports[0]))
            client.sendall(REQUEST)
            held.append(client)
        module.log_bound = log_bound
        module.HttpStart.__init__.__defaults__ = (1e9,)
    elif name == "wherry.server.network":
        write = module._Connection._write_response
        async def _write_response(self, response):
            await write(self, response)
            answered = isinstance(response, bytes) and response[4:8] == b"\x00\x00\x00\x01"
            os._exit(0 if answered else 3)  # 3: the first answer written is not ours
        module._Connection._write_response = _write_response

class Hooks:
    def find_spec(self, name, path=None, target=None):
        if name not in ("wherry.server.startup", "wherry.server.network"):
            return None
        import _frozen_importlib_external
        spec = _frozen_importlib_external.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            patch(name, module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Hooks())
sys.argv[0] = "wherry"
from wherry.cli.entry import main
main()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(package_root: Path, work: Path, *, bytecode: bool, to: str, out: Path | None) -> None:
    """One `wherry server` start in a fresh directory under `work`, under callgrind when
    `out` names its output file."""
    cwd = Path(tempfile.mkdtemp(dir=work))
    env = dict(os.environ, PYTHONPATH=str(package_root), PYTHONHASHSEED="0", START_COUNT_TO=to)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.pop("PYTHONPYCACHEPREFIX", None)
    if not bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    cmd = [sys.executable, "-c", HOOKED, "server", "--listeners",
           f"PLAINTEXT://127.0.0.1:{free_port()}"]
    if out is not None:
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd]
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    shutil.rmtree(cwd, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"the start failed ({done.returncode}):\n{done.stderr[-2000:]}")


def instructions(callgrind_out: Path) -> int:
    text = callgrind_out.read_text(errors="replace")
    found = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    if found is None:
        raise SystemExit(f"no instruction count in {callgrind_out}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--broker-tree", type=Path, default=REPO,
                        help="the tree whose wherry package starts (default: this one)")
    parser.add_argument("--no-bytecode", action="store_true",
                        help="PYTHONDONTWRITEBYTECODE=1, the package without __pycache__")
    parser.add_argument("--to", choices=("answer", "bind"), default="answer",
                        help="end the count at the first ApiVersions answer or at the bind")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is needed (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="wherry-start-count-") as tmp:
        work = Path(tmp)
        package_root = work / "tree"
        shutil.copytree(args.broker_tree / "wherry", package_root / "wherry",
                        ignore=shutil.ignore_patterns("__pycache__"))
        bytecode = not args.no_bytecode
        if bytecode:
            start(package_root, work, bytecode=True, to=args.to, out=None)  # compiles it
        for i in range(args.runs):
            out = work / f"callgrind.{i}"
            start(package_root, work, bytecode=bytecode, to=args.to, out=out)
            print(f"exec -> {'first ApiVersions answer' if args.to == 'answer' else 'bind'}, "
                  f"{'bytecode cached' if bytecode else 'no bytecode'}: "
                  f"{instructions(out) / 1e6:.1f} M instructions", flush=True)


if __name__ == "__main__":
    main()
