"""State-change log merge: the Spark job (`wherry.spark.state_change.merged`) vs the pure merge
(`merge_state_change_logs`), on generated logs.

    python bench/state_change_merge.py                  # 1,000,000 lines over 4 files
    python bench/state_change_merge.py --lines 200000   # smaller

Writes one controller log and three broker logs (in time order, with the real line format:
partition and replica changes and a few non-change lines) to a temp dir, then times, on the same
files, (1) the pure merge in this process and (2) the Spark job in a local Spark (``--master``,
default ``local[2]``) writing the merged, parsed rows as Parquet (every column computed, the
global sort included) and (3) collecting its ``line`` column to the
driver (what the CLI prints). The Spark session is started (and warmed on a small file) before
timing. Prints lines/s of each. Needs ``wherry[spark]`` and Java 17.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import environment


def generate(dirpath: Path, total: int, files: int = 4, seed: int = 1) -> list[Path]:
    rng = random.Random(seed)
    t0 = int(dt.datetime(2025, 11, 22, tzinfo=dt.UTC).timestamp() * 1000)
    paths = []
    per_file = total // files
    for i in range(files):
        path = dirpath / f"n{i}-state-change.log"
        prefix = "[Controller id=0 epoch=3]" if i == 0 else f"[Broker id={i}]"
        ts = t0
        with open(path, "w", encoding="utf-8") as f:
            for n in range(per_file):
                ts += rng.randint(0, 3)
                stamp = dt.datetime.fromtimestamp(ts / 1000, dt.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S.%f")[:-3]
                topic, p = f"topic{n % 50}", n % 12
                k = n % 10
                if k == 9:
                    msg = f"Sent LeaderAndIsr request to broker {n % 3 + 1}"
                elif k == 8:
                    msg = (f"Replica {topic}-{p} replica={n % 3 + 1} OnlineReplica -> "
                           f"OfflineReplica leader=none isr=[]")
                else:
                    msg = (f"Partition {topic}-{p} OfflinePartition -> OnlinePartition "
                           f"leader={n % 3 + 1} leader_epoch={n % 7} isr=[1,2,3] "
                           f"controller_epoch=3 zk_version={n % 5}")
                f.write(f"{stamp}Z INFO {prefix} {msg}\n")
        paths.append(path)
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    from wherry.runtime.state_change_log import merge_state_change_logs
    from wherry.spark.state_change import merged

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    with tempfile.TemporaryDirectory(prefix="wherry-scm-bench-") as tmp:
        d = Path(tmp)
        print(f"generating {args.lines:,} lines ...", file=sys.stderr)
        paths = generate(d, args.lines)
        n = sum(p.read_bytes().count(b"\n") for p in paths)
        mb = sum(p.stat().st_size for p in paths) / 2**20

        t = time.perf_counter()
        pure = merge_state_change_logs(paths)
        pure_s = time.perf_counter() - t

        spark = (SparkSession.builder.master(args.master).appName("scm-bench")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.driver.memory", "2g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        (d / "warm").mkdir()
        warm = generate(d / "warm", 4000, seed=2)
        merged(spark, [str(p) for p in warm]).count()
        t = time.perf_counter()
        merged(spark, [str(p) for p in paths]).write.parquet(str(d / "out.parquet"))
        count_s = time.perf_counter() - t
        count = spark.read.parquet(str(d / "out.parquet")).count()
        t = time.perf_counter()
        collected = [r.line for r in merged(spark, [str(p) for p in paths]).select("line")
                     .toLocalIterator()]
        collect_s = time.perf_counter() - t
        spark.stop()
        if count != len(pure) or len(collected) != len(pure):
            raise SystemExit(f"row counts differ: spark {count}/{len(collected)}, pure {len(pure)}")
        if collected != [r.line for r in pure]:
            raise SystemExit("the Spark merge and the pure merge differ")

    rows = {
        "pure merge": (pure_s, n / pure_s),
        f"spark ({args.master}), to Parquet": (count_s, n / count_s),
        f"spark ({args.master}), lines to driver": (collect_s, n / collect_s),
    }
    print(json.dumps(environment()))
    print(f"{n:,} lines, {mb:.1f} MB, 4 files")
    for name, (s, rate) in rows.items():
        print(f"{name:<34} {s:7.2f} s  {rate:12,.0f} lines/s")
    if args.json:
        args.json.write_text(json.dumps({k: {"s": s, "lines_per_s": r}
                                         for k, (s, r) in rows.items()}, indent=2))


if __name__ == "__main__":
    main()
