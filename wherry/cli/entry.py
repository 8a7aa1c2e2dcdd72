"""Console entry point (`wherry`, `python -m wherry`).

kio imports `hypothesis` at import time, when it is installed, only to register test
strategies for its types; that costs ~0.3 s of every broker start. The command-line process
never uses hypothesis, so it is kept out here (tests import `wherry.cli.main` directly and are
unaffected).

`wherry server` starts without click (`serve.run_server_fast`: its options are declared once
in `serve.py`, which click's command is built from too); whatever the fast path does not take
exactly (help, errors) goes to click.
"""

from __future__ import annotations

import gc
import sys

# Commands whose start turns the cyclic garbage collector back on once it is done
# (`cli.main._serve_until_signal`).
SERVING_COMMANDS = ("server", "dev")


def main() -> None:
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    # Importing and starting a broker allocates much and frees little: no collections until
    # the start is done (then the survivors are frozen out of later collections).
    gc.disable()
    try:
        if len(sys.argv) > 1 and sys.argv[1] == "server":
            from wherry.cli.serve import run_server_fast

            run_server_fast(sys.argv[2:])  # exits once served; returns for click to answer
        from wherry.cli.main import main as cli_main
    finally:
        if not (len(sys.argv) > 1 and sys.argv[1] in SERVING_COMMANDS):
            gc.enable()
    cli_main()
