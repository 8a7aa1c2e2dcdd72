"""Console entry point (`wherry`, `python -m wherry`).

kio imports `hypothesis` at import time, when it is installed, only to register test
strategies for its types; that costs ~0.3 s of every broker start. The command-line process
never uses hypothesis, so it is kept out here (tests import `wherry.cli.main` directly and are
unaffected).
"""

from __future__ import annotations

import sys


def main() -> None:
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from wherry.cli.main import main as cli_main

    cli_main()
