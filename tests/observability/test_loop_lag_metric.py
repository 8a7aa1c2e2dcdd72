"""`/metrics` shows how late the broker's event loop runs what is due: a loop held for 300 ms
shows in `wherry_event_loop_lag_max_ms` and the lag histogram; a stopped process shows as a
stall held by "stopped"."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from tests.broker_process import BrokerProcess
from tests.observability.scrape import metrics, value
from wherry.testing.cluster import DevCluster, wait_until
from wherry.testing.zookeeper import find_free_port


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


def test_a_stopped_broker_process_shows_a_stopped_stall_and_logs_it(tmp_path: Path) -> None:
    """SIGSTOP a real `wherry server` for half a second: the loop's next wake-up is late with
    its thread neither running nor waiting for a CPU, counted as such on `/metrics` and
    logged with what held it."""
    http_port = find_free_port("127.0.0.1")
    broker = BrokerProcess(tmp_path, overrides=[f"http.listeners=http://127.0.0.1:{http_port}"])
    broker.start()
    try:
        url = f"http://127.0.0.1:{http_port}"
        assert wait_until(lambda: value(url, "wherry_event_loop_lag_ms_count") >= 3, 10)
        os.kill(broker.pid, signal.SIGSTOP)
        time.sleep(0.5)
        os.kill(broker.pid, signal.SIGCONT)
        stopped = {"cause": "stopped"}
        assert wait_until(lambda: value(url, "wherry_event_loop_stalls_total", **stopped) >= 1)
        assert wait_until(lambda: "the event loop woke" in broker.log_text())
        line = next(x for x in broker.log_text().splitlines() if "the event loop woke" in x)
        assert "WARN" in line and "[Broker id=0]" in line, line
    finally:
        broker.stop()
