"""The console's first screen in a real headless Chromium (1400x900, no scrolling), on a
3-broker dev cluster with 50 offsets partitions and a consumer group of two real consumers
(confluent-kafka) that has committed and then fallen behind: every broker's console lists the
group; on the page of a broker that does not coordinate it, the user's topics and the group,
with its members, coordinator and lag, are on the first screen; the internal topics are one
folded row; opening the group shows its lag per partition, opening the fold shows
`__consumer_offsets` with its 50 partitions, a topic link leads to the topic's partitions;
the scrollbars are dark. Screenshots are test artifacts: `<tmp>/console-first-screen.png`
(what the user first sees) and `<tmp>/console-opened.png` (the whole page, opened up), both
copied into `$WHERRY_TEST_ARTIFACTS` when set; their paths are printed. Skipped when no
Chromium is installed."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.helpers import create_topic
from tests.observability.chromium import Chromium, chromium_path
from tests.observability.scrape import get
from wherry.testing.cluster import DevCluster, wait_until

CHROMIUM = chromium_path()
WIDTH, HEIGHT = 1400, 900
GROUP = "billing"
ORDERS_PARTITIONS = 4


def _on_screen(selector: str) -> str:
    """JS: the element is displayed and wholly inside the unscrolled 1400x900 viewport."""
    sel = json.dumps(selector)
    return (
        f"(() => {{ const e = document.querySelector({sel}); if (!e) return false;"
        f" const r = e.getBoundingClientRect();"
        f" return e.getClientRects().length > 0 && window.scrollY === 0 && r.top >= 0"
        f" && r.bottom <= window.innerHeight && r.right <= window.innerWidth; }})()"
    )


def _shown(selector: str) -> str:
    sel = json.dumps(selector)
    return f"[...document.querySelectorAll({sel})].filter(e => e.getClientRects().length).length"


def _text(selector: str) -> str:
    return f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent"


def _consume_and_commit(bootstrap: str, topic: str, expected: int) -> list[Consumer]:
    """Two consumers of GROUP read `expected` records between them and commit; left open
    (members of a stable group)."""
    consumers = [
        Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": f"biller-{i}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 30_000, "log_level": 0})
        for i in range(2)
    ]
    for c in consumers:
        c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for c in consumers:
            msg = c.poll(0.2)
            if msg is not None and msg.error() is None:
                seen += 1
        if seen >= expected and all(len(c.assignment()) == 2 for c in consumers):
            break
    assert seen == expected, f"read {seen} of {expected}"
    assert sorted(len(c.assignment()) for c in consumers) == [2, 2]
    for c in consumers:
        c.commit(asynchronous=False)
        positions = c.position(c.assignment())
        assert all(isinstance(p, TopicPartition) and p.offset >= 0 for p in positions)
    return consumers


def _group_in_view(url: str, lag: int) -> dict[str, Any]:
    """The console's view (`/api/cluster`) once it shows GROUP with 2 members and `lag`."""
    found: list[dict[str, Any]] = []

    def look() -> bool:
        status, body = get(url + "/api/cluster", timeout_s=15)
        view = json.loads(body) if status == 200 else {}
        for g in view.get("groups", []):
            if g["group"] == GROUP and len(g["members"]) == 2 and g["lag"] == lag:
                found.append(view)
                return True
        return False

    assert wait_until(look, 30), f"{url} does not show the group with its lag"
    return found[0]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (apt-get install chromium)")
def test_first_screen_shows_topics_and_group_lag_with_internal_topics_folded(
    tmp_path: Path,
) -> None:
    assert CHROMIUM is not None
    with DevCluster(
        tmp_path / "cluster",
        brokers=3,
        http_base_port=0,
        overrides={"offsets.topic.num.partitions": "50", "offsets.topic.replication.factor": "3"},
    ) as c:
        c.wait_for_controller()
        orders = f"orders-{uuid.uuid4().hex[:4]}"
        payments = f"payments-{uuid.uuid4().hex[:4]}"
        create_topic(c.bootstrap, orders, partitions=ORDERS_PARTITIONS, replication_factor=3)
        create_topic(c.bootstrap, payments, partitions=2, replication_factor=2)
        c.wait_for_topic(orders, ORDERS_PARTITIONS)
        c.wait_for_topic(payments, 2)

        p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "log_level": 0})
        for i in range(40):
            p.produce(orders, f"order-{i}".encode(), partition=i % ORDERS_PARTITIONS)
        assert p.flush(30) == 0
        consumers = _consume_and_commit(c.bootstrap, orders, 40)
        try:
            for i in range(25):  # the group falls 25 behind
                p.produce(orders, f"late-{i}".encode(), partition=i % ORDERS_PARTITIONS)
            assert p.flush(30) == 0
            # Every broker's console lists the group, whichever broker coordinates it.
            coordinators = set()
            for b in c.broker_ids:
                url = c.http_url(b)
                assert url is not None
                view = _group_in_view(url, 25)
                coordinators |= {g["coordinator"] for g in view["groups"] if g["group"] == GROUP}
                internal = {t["name"]: t for t in view["topics"] if t["internal"]}
                assert len(internal["__consumer_offsets"]["partitions"]) == 50
            (coordinator,) = coordinators
            # The page of a broker that does not coordinate it.
            url = c.http_url(next(b for b in c.broker_ids if b != coordinator))
            assert url is not None

            with Chromium(CHROMIUM, tmp_path / "chromium") as browser:
                browser.set_viewport(WIDTH, HEIGHT)
                browser.navigate(url + "/")
                browser.wait_for("document.getElementById('conn').textContent === 'live'")
                browser.wait_for(_text(f'[data-group="{GROUP}"] .group-lag') + " === '25'")
                assert browser.evaluate("[innerWidth, innerHeight]") == [WIDTH, HEIGHT]

                # The first screen: the user's topics, the group, its members and its lag.
                for sel in (f'[data-topic="{orders}"]', f'[data-topic="{payments}"]',
                            f'[data-group="{GROUP}"]', "#internal-toggle", "#brokers"):
                    assert browser.evaluate(_on_screen(sel)), sel
                assert browser.evaluate(_text(f'[data-group="{GROUP}"] .group-members')) == "2"
                assert browser.evaluate(_text(f'[data-group="{GROUP}"] .group-state')) == "Stable"
                assert browser.evaluate(
                    _text(f'[data-group="{GROUP}"] .group-coordinator')) == str(coordinator)
                assert browser.evaluate(_text(f'[data-topic="{orders}"] td:nth-child(2)')) == "4"
                assert browser.evaluate(_text(f'[data-topic="{orders}"] td:nth-child(3)')) == "3"
                # Internal topics: one folded row, none of their rows shown.
                fold = browser.evaluate(_text("#internal-toggle"))
                assert fold.startswith("internal topics (")
                assert "__consumer_offsets" in fold
                assert browser.evaluate(_shown('[data-topic^="__"]')) == 0
                assert browser.evaluate(_shown('[data-partition^="__consumer_offsets-"]')) == 0
                # Dark scrollbars on the dark page.
                assert browser.evaluate(
                    "getComputedStyle(document.documentElement).colorScheme") == "dark"
                bar = browser.evaluate("getComputedStyle(document.getElementById('timeline'))"
                                       ".scrollbarColor")
                assert bar.startswith("rgb(58, 71, 86)"), bar
                first = browser.screenshot(tmp_path / "console-first-screen.png",
                                           viewport_only=True)

                # Drilling in: the group's lag per partition, on the first screen too.
                browser.evaluate(f"document.querySelector('[data-group=\"{GROUP}\"]').click()")
                rows = browser.wait_for(_shown("[data-group-partition]"))
                assert rows == ORDERS_PARTITIONS
                lags = browser.evaluate(
                    "[...document.querySelectorAll('[data-group-partition] .lag')]"
                    ".map(e => Number(e.textContent))")
                assert sum(lags) == 25 and len(lags) == ORDERS_PARTITIONS
                for part in range(ORDERS_PARTITIONS):
                    assert browser.evaluate(
                        _on_screen(f'[data-group-partition="{GROUP}/{orders}-{part}"]'))
                assert "biller-0" in browser.evaluate(_text(f'[data-offsets-of="{GROUP}"]'))
                # A topic link in the group leads to the topic's partitions.
                browser.evaluate(f"document.querySelector('[data-offsets-of=\"{GROUP}\"] "
                                 f"a.topic').click()")
                browser.wait_for(_shown(f'[data-partition^="{orders}-"]') + " === 4")
                # The fold opens on a click: __consumer_offsets and its 50 partitions.
                browser.evaluate("document.getElementById('internal-toggle').click()")
                browser.wait_for(_shown('[data-topic="__consumer_offsets"]'))
                assert browser.evaluate(
                    _text('[data-topic="__consumer_offsets"] td:nth-child(2)')) == "50"
                # This broker's log dirs and settings.
                assert browser.evaluate(_shown("[data-log-dir]")) >= 1
                assert "offsets.topic.num.partitions50" in browser.evaluate(_text("#config"))
                opened = browser.screenshot(tmp_path / "console-opened.png")
        finally:
            for cons in consumers:
                cons.close()

    assert first.stat().st_size > 10_000 and opened.stat().st_size > 10_000
    artifacts = os.environ.get("WHERRY_TEST_ARTIFACTS")
    for shot in (first, opened):
        if artifacts:
            Path(artifacts).mkdir(parents=True, exist_ok=True)
            shutil.copy(shot, Path(artifacts) / shot.name)
        print(f"console screenshot: {shot}")
