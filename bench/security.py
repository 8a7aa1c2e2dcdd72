"""Security cost benchmark: `python bench/security.py [--quick] [--json PATH]` (bench/README.md).

Produce throughput over SASL_SSL against PLAINTEXT, in one run, against ONE `wherry server`
process that this script starts with both listeners (free loopback ports, a temporary data
dir, stopped by PID): the same broker, the same topic layout, the same confluent-kafka
producer (in a process of its own, `python -m bench.workers cf_produce`), only the listener
differs. The producer connects and fetches metadata (TLS handshake and SASL login included)
before the clock starts, so the rows measure the steady-state cost of TLS on every byte.

  p1, t1, x1   100 B records, acks=1: PLAINTEXT, SASL_SSL, ratio SASL_SSL/PLAINTEXT (rec/s)
  p2, t2, x2   100 B records, acks=all
  p3, t3, x3   1 KiB records, acks=1
  p4, t4, x4   1 KiB records, acks=all

The TLS material is made here with `cryptography` (a project dependency): a self-signed
certificate for 127.0.0.1, which the producer trusts (`ssl.ca.location`) and checks
(librdkafka's default `ssl.endpoint.identification.algorithm=https`). The SASL mechanism is
PLAIN by default (`--mechanism SCRAM-SHA-512`: the user's credential is created through the
PLAINTEXT listener before the runs); the mechanism only costs at login, outside the clock.
PLAINTEXT and SASL_SSL runs alternate, so a drift of the machine hits both sides.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `bench` and `wherry` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (
    REPO_ROOT,
    BenchError,
    Broker,
    create_topic,
    env_line,
    environment,
    finish,
    free_port,
    log,
    print_table,
    run_worker,
    temp_dir,
)

PARTITIONS = 4
USER, PASSWORD = "bench", "bench-secret"
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
Params = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Plan:
    small_records: int
    large_records: int
    repeats: int


FULL = Plan(small_records=1_000_000, large_records=250_000, repeats=3)
QUICK = replace(FULL, small_records=100_000, large_records=25_000, repeats=1)


# ------------------------------------------------------------------------------- TLS material


def make_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1/localhost: (key + chain PEM for the broker's
    `ssl.keystore.type=PEM`, the certificate alone for the client's trust store)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wherry-bench")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    keystore, ca = directory / "broker.pem", directory / "ca.pem"
    keystore.write_bytes(key_pem + cert_pem)
    os.chmod(keystore, 0o600)
    ca.write_bytes(cert_pem)
    return keystore, ca


# ------------------------------------------------------------------------------- the broker


class SecureBroker(Broker):
    """`wherry server` with a SASL_SSL and a PLAINTEXT listener (`bootstrap` is PLAINTEXT's)."""

    def __init__(self, data_dir: Path, keystore: Path, ca: Path, mechanism: str) -> None:
        jaas = {
            "PLAIN": f'{PLAIN_MODULE} required username="{USER}" password="{PASSWORD}" '
            f'user_{USER}="{PASSWORD}";',
            "SCRAM-SHA-512": f'{SCRAM_MODULE} required username="{USER}" password="{PASSWORD}";',
        }
        overrides = [
            "listener.security.protocol.map=SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"sasl.enabled.mechanisms={mechanism}",
            f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config={jaas[mechanism]}",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={keystore}",
            "ssl.client.auth=none",
        ]
        super().__init__(data_dir, overrides)
        self.sasl_port = 0

    def spawn(self, port: int | None = None) -> float:
        self.port, self.sasl_port = port or free_port(), free_port()
        cmd = [
            sys.executable,
            "-m",
            "wherry",
            "server",
            "--listeners",
            f"PLAINTEXT://127.0.0.1:{self.port},SASL_SSL://127.0.0.1:{self.sasl_port}",
            "--log-dirs",
            str(self.data_dir),
            "--override",
            "http.listeners=",  # no HTTP listener (`wherry server` would take 9644)
        ]
        for o in self.overrides:
            cmd += ["--override", o]
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=REPO_ROOT,
        )
        threading.Thread(target=self._pump, daemon=True).start()
        return t0

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"


def add_scram_user(bootstrap: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "wherry",
        "users",
        "--bootstrap-server",
        bootstrap,
        "--alter",
        "--entity-name",
        USER,
        "--add-config",
        f"SCRAM-SHA-512=[password={PASSWORD}]",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    if done.returncode != 0:
        raise BenchError(f"wherry users failed: {done.stdout}{done.stderr}")


# ------------------------------------------------------------------------------- rows


@dataclass
class Row:
    id: str
    name: str
    result: str
    detail: str
    raw: Params


def _produce(
    broker: SecureBroker, conf: Params, topic: str, acks: str, size: int, count: int, repeats: int
) -> Params:
    runs: list[Params] = []
    for _ in range(repeats):
        cpu0 = broker.cpu_seconds()
        r = run_worker(
            "cf_produce",
            {
                "bootstrap": conf["bootstrap.servers"],
                "client_conf": conf,
                "topic": topic,
                "acks": acks,
                "record_bytes": size,
                "count": count,
                "timeout_s": 300,
            },
            timeout_s=360,
        )
        r["broker_cpu_s"] = broker.cpu_seconds() - cpu0
        runs.append(r)
    best = max(runs, key=lambda r: r["rec_s"])
    return {**best, "runs": runs}


def _detail(r: Params) -> str:
    runs = r["runs"]
    head = (
        f"{r['records']:,} records in {r['elapsed_s']:.2f} s"
        if len(runs) == 1
        else f"best of {len(runs)} runs ("
        + ", ".join(f"{x['rec_s'] / 1000:,.0f}k" for x in runs)
        + f" rec/s), {r['elapsed_s']:.2f} s"
    )
    return (
        f"{head}; broker CPU {r['broker_cpu_s'] / r['elapsed_s'] * 100:.0f}%, "
        f"client CPU {r['client_cpu_s'] / r['elapsed_s'] * 100:.0f}%"
    )


def measure(broker: SecureBroker, ca: Path, mechanism: str, plan: Plan) -> list[Row]:
    plain: Params = {"bootstrap.servers": broker.bootstrap, "security.protocol": "PLAINTEXT"}
    secure: Params = {
        "bootstrap.servers": broker.sasl_bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca),
        "sasl.mechanism": mechanism,
        "sasl.username": USER,
        "sasl.password": PASSWORD,
    }
    rows: list[Row] = []
    cases = [(100, "1"), (100, "all"), (1024, "1"), (1024, "all")]
    for i, (size, acks) in enumerate(cases, start=1):
        count = plan.small_records if size == 100 else plan.large_records
        got: dict[str, Params] = {}
        for proto, conf in (("PLAINTEXT", plain), ("SASL_SSL", secure)):
            topic = f"bench-{proto.lower()}-{size}b-acks{acks}"
            create_topic(broker.bootstrap, topic, PARTITIONS)
            rid = f"{'p' if proto == 'PLAINTEXT' else 't'}{i}"
            log(f"({rid}) {proto}: {count} x {size} B, acks={acks}")
            got[proto] = r = _produce(broker, conf, topic, acks, size, count, plan.repeats)
            label = "PLAINTEXT" if proto == "PLAINTEXT" else f"SASL_SSL ({mechanism})"
            rows.append(
                Row(
                    rid,
                    f"{label}: produce {size} B, acks={acks}",
                    f"{r['rec_s']:,.0f} rec/s  {r['mb_s']:,.1f} MB/s",
                    _detail(r),
                    r,
                )
            )
        a, b = got["PLAINTEXT"], got["SASL_SSL"]
        rows.append(
            Row(
                f"x{i}",
                f"ratio SASL_SSL / PLAINTEXT, {size} B, acks={acks}",
                f"{b['rec_s'] / a['rec_s']:.2f}x",
                f"{b['rec_s']:,.0f} / {a['rec_s']:,.0f} rec/s; "
                f"{b['mb_s']:,.1f} / {a['mb_s']:,.1f} MB/s",
                {"ratio": b["rec_s"] / a["rec_s"], "mb_ratio": b["mb_s"] / a["mb_s"]},
            )
        )
        for row in rows[-3:]:
            log(f"  {row.id:<3} {row.name}: {row.result}")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="short run (what the smoke test runs)")
    ap.add_argument("--small-records", type=int, help="100 B records per run (default 1,000,000)")
    ap.add_argument("--large-records", type=int, help="1 KiB records per run (default 250,000)")
    ap.add_argument("--repeats", type=int, help="runs per row, the best is kept (default 3)")
    ap.add_argument("--mechanism", choices=("PLAIN", "SCRAM-SHA-512"), default="PLAIN")
    ap.add_argument("--json", type=Path, help="also write the rows as JSON to this path")
    ap.add_argument("--tmp-dir", type=Path, default=None, help="where the data dir lives")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    plan = replace(
        plan,
        small_records=args.small_records or plan.small_records,
        large_records=args.large_records or plan.large_records,
        repeats=args.repeats or plan.repeats,
    )
    env = environment()
    t0 = time.monotonic()
    with temp_dir("wherry-bench-security-", args.tmp_dir) as base:
        keystore, ca = make_certificate(base)
        with SecureBroker(base / "data", keystore, ca, args.mechanism) as broker:
            broker.start()
            if args.mechanism != "PLAIN":
                add_scram_user(broker.bootstrap)
            rows = measure(broker, ca, args.mechanism, plan)
    finish(env, t0)
    print(env_line(env))
    print_table(
        "wherry security benchmark: one broker, SASL_SSL vs PLAINTEXT listener (MB = 2^20 bytes)",
        [(r.id, r.name, r.result, r.detail) for r in rows],
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "env": env,
                    "quick": args.quick,
                    "plan": {
                        "small_records": plan.small_records,
                        "large_records": plan.large_records,
                        "repeats": plan.repeats,
                    },
                    "mechanism": args.mechanism,
                    "rows": [
                        {"id": r.id, "name": r.name, "metrics": _metrics(r.raw), "raw": r.raw}
                        for r in rows
                    ],
                },
                indent=2,
            )
        )
    return 0


def _metrics(raw: Params) -> dict[str, float]:
    keys = ("rec_s", "mb_s", "ratio", "mb_ratio")
    return {k: float(raw[k]) for k in keys if k in raw}


if __name__ == "__main__":
    sys.exit(main())
