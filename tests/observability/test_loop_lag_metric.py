"""`/metrics` shows how late the broker's event loop runs what is due: a loop held for 300 ms
shows in `wherry_event_loop_lag_max_ms` and the lag histogram."""

from __future__ import annotations

import time
from pathlib import Path

from tests.observability.scrape import metrics, value
from wherry.testing.cluster import DevCluster, wait_until


def test_a_held_event_loop_shows_in_the_loop_lag_metrics(tmp_path: Path) -> None:
    with DevCluster(tmp_path, brokers=1, http_base_port=0) as c:
        c.wait_for_controller()
        url = c.http_url(0)
        assert url is not None
        assert wait_until(lambda: value(url, "wherry_event_loop_lag_ms_count") >= 3, 10)
        c.call(lambda: time.sleep(0.3))  # on the broker's loop: everything waits behind it
        assert wait_until(lambda: value(url, "wherry_event_loop_lag_max_ms") >= 200, 10)
        m = metrics(url)
        late = m[("wherry_event_loop_lag_ms_count", ())] - m[
            ("wherry_event_loop_lag_ms_bucket", (("le", "100.0"),))]
        assert late >= 1
        assert m[("wherry_event_loop_lag_ms_sum", ())] >= 200
