"""The product speaks in its own words: no file under `wherry/` or `docs/`, nor README.md,
mentions an issue number, a requirement id of the project's working notes (`R1`, `H3`, `P2`,
`I4`, `M4`, `T1`, `D2`, `SPEC ...`), or the steering repo (`../shared`). Kafka's own names stay
fine: KIP-848, KAFKA-1234, UNKNOWN_SERVER_ERROR, NOT_CONTROLLER."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
TEXT_SUFFIXES = {".py", ".md", ".txt", ".rst", ".toml", ".properties", ".html", ".js", ".css"}

ISSUE = re.compile(r"\b[Ii]ssues? #?\d+|\(issue\b|\bissue #\d")
# A letter of the working notes' ids standing alone before its number, 1 to 19 (KIP-848's "P"
# follows an "I", so it is no id; P99 is a percentile), optionally a range (R4–R6).
_N = r"(?:1\d|[1-9])"
REQUIREMENT_ID = re.compile(rf"(?<![\w-])[RHPIMTD]{_N}(?:[–-][RHPIMTD]?{_N})?\b")
SPEC = re.compile(r"\bSPEC\b")
STEERING = re.compile(r"steering repo|\.\./shared\b|/work/shared")
# Ids are searched only in prose files and Python (a stylesheet's or a script's `M4` may be
# drawing, not an id).
ID_SUFFIXES = {".py", ".md", ".txt", ".rst"}




def _files() -> list[Path]:
    out = [ROOT / "README.md"]
    for top in ("wherry", "docs"):
        out.extend(p for p in sorted((ROOT / top).rglob("*"))
                   if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts)
    return out


def offending_lines(path: Path, text: str) -> list[str]:
    patterns = [ISSUE, SPEC, STEERING]
    if path.suffix in ID_SUFFIXES:
        patterns.append(REQUIREMENT_ID)
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for n, line in enumerate(text.splitlines(), 1)
            if any(p.search(line) for p in patterns)]


def test_the_patterns_tell_ids_from_kafka_names() -> None:
    bad = ["(issue 6, scope item 7)", "the simulation (issue 14)", "SPEC H11", "(R6; Kafka",
           "rules (H3, H10)", "SPEC R4–R6", "see ../shared/DESIGN.md", "in the steering repo",
           "ISR eligibility, R5)", "M1-M3"]
    fine = ["KIP-848 consumer groups", "KAFKA-12345", "NOT_CONTROLLER", "UNKNOWN_SERVER_ERROR",
            "a P99 latency", "HTTP/2", "sha-256 digests", "log4j", "t1,t2", "m4.large",
            "SPECIFIC_PATTERN_TYPES", "issues a request", "IPv4", "H2O"]
    for line in bad:
        assert offending_lines(ROOT / "x.py", line), line
    for line in fine:
        assert not offending_lines(ROOT / "x.py", line), line


def test_no_issue_numbers_requirement_ids_or_steering_repo() -> None:
    found: list[str] = []
    for path in _files():
        found.extend(offending_lines(path, path.read_text(encoding="utf-8", errors="replace")))
    assert not found, "\n".join(found)
