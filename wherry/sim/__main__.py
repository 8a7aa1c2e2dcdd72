import os
import sys

if os.environ.get("PYTHONHASHSEED") != "0":
    # String hashes order sets of strings; pin them so a seed replays exactly.
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable, "-m", "wherry.sim", *sys.argv[1:]])

from wherry.sim.runner import main

sys.exit(main())
