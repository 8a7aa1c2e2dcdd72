"""The run's last line names the skipped groups and why (tests/conftest.py)."""

from __future__ import annotations

from tests.conftest import skip_summary


def test_skips_grouped_by_what_they_need() -> None:
    reasons = ["Skipped: ZooKeeper is not available: no java"] * 3 + [
        "Skipped: kcat not installed (apt-get install kcat)",
        "Skipped: chromium is not installed",
        "Skipped: counts fds through /proc/self/fd",
    ]
    assert skip_summary(reasons) == (
        "skipped: 3 need ZooKeeper (apt-get install zookeeper), "
        "1 need kcat (apt-get install kcat), 1 need Chromium (apt-get install chromium), "
        "1 counts fds through /proc/self/fd")
    assert skip_summary([]) is None
