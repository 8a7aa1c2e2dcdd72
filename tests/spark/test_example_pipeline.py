"""examples/spark_windowed_counts.py end to end: events in, windowed counts out, read back."""

from __future__ import annotations

import importlib.util
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_windowed_counts.py"


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("spark_windowed_counts", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_windowed_counts_pipeline(spark: Any, broker_bootstrap: str, tmp_path: Path) -> None:
    ex = load_example()
    suffix = uuid.uuid4().hex[:6]
    source, sink = f"events-{suffix}", f"counts-{suffix}"
    ex.create_topics(broker_bootstrap, source, sink)
    start_ms = int(time.time() * 1000) // 60_000 * 60_000 - 600_000
    expected = ex.produce_events(broker_bootstrap, source, 1200, start_ms)
    ex.run_job(spark, broker_bootstrap, source, sink, str(tmp_path / "ck"))
    assert ex.read_counts(broker_bootstrap, sink) == expected
    assert len(expected) == 6  # three one-minute windows x two actions
