"""The web console in a real headless Chromium (Debian's `chromium`), driven over the DevTools
protocol: the page of broker 0 shows the cluster; a partition leader's broker is stopped and,
within seconds and without a reload (server-sent events), the page shows the partition's new
leader, its shrunk ISR, the broker down and the state change in the timeline. A screenshot is
saved as a test artifact: `<tmp>/console.png`, copied into `$WHERRY_TEST_ARTIFACTS` when set.
Skipped when no Chromium is installed."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from tests.helpers import create_topic
from tests.observability.chromium import Chromium, chromium_path
from wherry.testing.cluster import DevCluster

CHROMIUM = chromium_path()


def _cell(topic: str, partition: int, cls: str) -> str:
    sel = json.dumps(f'[data-partition="{topic}-{partition}"] .{cls}')
    return f"(document.querySelector({sel}) || {{}}).textContent"


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_console_shows_the_new_leader_and_shrunk_isr_when_a_broker_stops(tmp_path: Path) -> None:
    assert CHROMIUM is not None
    with DevCluster(
        tmp_path / "cluster",
        brokers=3,
        http_base_port=0,
        overrides={"auto.leader.rebalance.enable": "false"},
    ) as c:
        controller = c.wait_for_controller()
        victim = next(b for b in (1, 2) if b != controller)
        other = 3 - victim
        t = f"console-{uuid.uuid4().hex[:6]}"
        create_topic(c.bootstrap, t, [[victim, other, 0], [other, 0, victim]])
        c.wait_for_topic(t, 2)
        url = c.http_url(0)
        assert url is not None

        with Chromium(CHROMIUM, tmp_path / "chromium") as browser:
            browser.navigate(url + "/")
            browser.wait_for("document.getElementById('conn').textContent === 'live'")
            assert browser.wait_for(f"{_cell(t, 0, 'leader')} === '{victim}'")
            assert browser.wait_for(f"{_cell(t, 0, 'isr')}") == f"{victim},{other},0"
            assert browser.evaluate(
                f"document.querySelector('[data-broker=\"{victim}\"]').dataset.alive"
            ) == "true"

            c.stop_broker(victim, controlled=False)

            # New leader and shrunk ISR within seconds, pushed to the open page.
            browser.wait_for(f"{_cell(t, 0, 'leader')} === '{other}'", timeout_s=10)
            browser.wait_for(f"{_cell(t, 0, 'isr')} === '{other},0'", timeout_s=10)
            browser.wait_for(f"{_cell(t, 1, 'isr')} === '{other},0'", timeout_s=10)
            row_class = browser.evaluate(
                f"document.querySelector('[data-partition=\"{t}-0\"]').className"
            )
            assert row_class == "urp"
            assert browser.wait_for(
                f"document.querySelector('[data-broker=\"{victim}\"]').dataset.alive === 'false'"
            )
            assert browser.evaluate("document.getElementById('urp-count').textContent") == "2"
            # The controller's state changes reached the timeline.
            assert browser.wait_for(
                f"[...document.querySelectorAll('#timeline .entry')]"
                f".some(e => e.textContent.includes('Partition {t}-0'))"
            )
            shot = browser.screenshot(tmp_path / "console.png")

    assert shot.stat().st_size > 10_000
    artifacts = os.environ.get("WHERRY_TEST_ARTIFACTS")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(artifacts) / "console.png")
