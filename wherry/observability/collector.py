"""The Prometheus collector of one broker: every metric family is built at scrape time from
the broker's state (gauges) and its plain counters (bumped in O(1) where things happen), with
Kafka's MBean names as the JMX exporter's usual rules map them
(`kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions` →
`kafka_server_replicamanager_underreplicatedpartitions`; a Meter's count → `..._total`).

One `CollectorRegistry` per broker (`broker_registry`), so brokers of one process (`wherry
dev`, tests) never share or collide; each also carries prometheus_client's process, platform
and GC collectors.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from wherry.controller.metrics import (
    offline_partitions_count,
    preferred_replica_imbalance_count,
)
from wherry.observability.group_lag import group_lags
from wherry.observability.sources import BrokerSources
from wherry.runtime.loop_lag import STALL_MS

RM = "kafka_server_replicamanager_"
CTRL = "kafka_controller_kafkacontroller_"
TOPIC = "kafka_server_brokertopicmetrics_"
SOCKET = "kafka_server_socket_server_metrics_"


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)


class BrokerCollector(Collector):
    def __init__(self, src: BrokerSources) -> None:
        self.src = src

    def collect(self) -> Iterable[Metric]:
        yield from self._replica_manager()
        yield from self._controller()
        yield from self._requests()
        yield from self._network()
        yield from self._purgatories()
        yield from self._topics()
        yield from self._logs()
        yield from self._groups()
        yield from self._client_quotas()
        yield from self._loop_lag()

    def _replica_manager(self) -> Iterator[Metric]:
        rm = self.src.replica_manager()
        parts = list(rm.partitions.values()) if rm is not None else []
        leaders = [p for p in parts if p.is_leader]
        urp = sum(1 for p in leaders if len(p.isr) < len(p.assignment))
        yield _gauge(RM + "underreplicatedpartitions",
                     "Partitions this broker leads whose ISR is smaller than their replicas", urp)
        yield _gauge(RM + "partitioncount", "Partitions with a replica on this broker",
                     len(parts))
        yield _gauge(RM + "leadercount", "Partitions this broker leads", len(leaders))
        yield _gauge(RM + "offlinereplicacount", "Replicas here whose log dir is offline",
                     len(rm.offline_partitions) if rm is not None else 0)
        yield CounterMetricFamily(RM + "isrshrinks", "ISR shrinks this broker made as leader",
                                  value=rm.isr_shrinks if rm is not None else 0)
        yield CounterMetricFamily(RM + "isrexpands", "ISR expands this broker made as leader",
                                  value=rm.isr_expands if rm is not None else 0)

    def _controller(self) -> Iterator[Metric]:
        ctrl = self.src.controller()
        active = ctrl is not None and ctrl.active
        offline = imbalance = 0
        if ctrl is not None and active:
            offline = offline_partitions_count(ctrl.ctx, ctrl.partition_sm)
            imbalance = preferred_replica_imbalance_count(ctrl.ctx)
        yield _gauge(CTRL + "activecontrollercount",
                     "1 on the broker whose controller is active", 1 if active else 0)
        yield _gauge(CTRL + "offlinepartitionscount",
                     "Partitions without a live leader (active controller only)", offline)
        yield _gauge(CTRL + "preferredreplicaimbalancecount",
                     "Partitions not led by their preferred replica (active controller only)",
                     imbalance)

    def _requests(self) -> Iterator[Metric]:
        stats = sorted(self.src.request_stats.by_request.items())
        total = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                    "Requests handled, per API", labels=["request"])
        hist = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                     "Request total time in milliseconds, per API",
                                     labels=["request"])
        for name, times in stats:
            total.add_metric([name], times.count)
            hist.add_metric([name], times.cumulative(), times.sum_ms)
        yield total
        yield hist

    def _loop_lag(self) -> Iterator[Metric]:
        """How late the event loop woke a task due every 100 ms: what every request waited
        behind (a blocking call, a long handler, a GC pass); stalls by what held them."""
        lag = self.src.loop_lag
        if lag is None:
            return
        hist = HistogramMetricFamily(
            "wherry_event_loop_lag_ms",
            "How late the event loop woke a task due every 100 ms, in milliseconds")
        hist.add_metric([], lag.cumulative(), lag.sum_ms)
        yield hist
        yield _gauge("wherry_event_loop_lag_max_ms",
                     "The largest event loop lag of the last minute, in milliseconds",
                     lag.recent_max_ms())
        stalls = CounterMetricFamily(
            "wherry_event_loop_stalls",
            f"Event loop wake-ups at least {STALL_MS:g} ms late, by what held them: ran (the "
            "loop's own work), waited (for a CPU), stopped (blocked in a call, waiting for "
            "the GIL, or not run)",
            labels=["cause"])
        for cause, n in lag.stalls.items():
            stalls.add_metric([cause], n)
        yield stalls

    def _network(self) -> Iterator[Metric]:
        """Kafka's socket-server-metrics per listener (closes also by reason) and the
        SocketServer's request memory pool."""
        stats = self.src.network_stats
        count = GaugeMetricFamily(SOCKET + "connection_count", "Connections open now",
                                  labels=["listener"])
        created = CounterMetricFamily(SOCKET + "connection_creation",
                                      "Connections accepted and served", labels=["listener"])
        closed = CounterMetricFamily(
            SOCKET + "connection_close",
            "Connections closed, by reason: client, idle (connections.max.idle.ms), limit "
            "(max.connections.per.ip and the like), error, shutdown",
            labels=["listener", "reason"])
        used, available = stats.pool() if stats is not None else (0, 2**63 - 1)
        if stats is not None:
            for listener in sorted(set(stats.connections) | set(stats.creations)):
                count.add_metric([listener], stats.connections[listener])
                created.add_metric([listener], stats.creations[listener])
            for (listener, reason), n in sorted(stats.closes.items()):
                closed.add_metric([listener, reason], n)
        yield count
        yield created
        yield closed
        yield _gauge("kafka_network_socketserver_memorypoolused",
                     "Bytes of the request memory pool (queued.max.request.bytes) in use", used)
        yield _gauge("kafka_network_socketserver_memorypoolavailable",
                     "Bytes of the request memory pool available", available)

    def _purgatories(self) -> Iterator[Metric]:
        g = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                              "Operations watched in each purgatory", labels=["delayedOperation"])
        d = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_numdelayedoperations",
                              "Operations waiting for their timeout in each purgatory",
                              labels=["delayedOperation"])
        rm = self.src.replica_manager()
        groups = self.src.groups()
        found = []
        if rm is not None:
            found += [("Produce", rm.produce_purgatory), ("Fetch", rm.fetch_purgatory)]
        if groups is not None:
            found += [("Rebalance", groups.rebalance_purgatory),
                      ("Heartbeat", groups.heartbeat_purgatory)]
        for name, purgatory in found:
            g.add_metric([name], purgatory.watched())
            d.add_metric([name], purgatory.delayed)
        yield g
        yield d

    def _topics(self) -> Iterator[Metric]:
        rm = self.src.replica_manager()
        fams = {
            "bytesin": CounterMetricFamily(TOPIC + "bytesin", "Bytes appended from clients",
                                           labels=["topic"]),
            "bytesout": CounterMetricFamily(TOPIC + "bytesout", "Bytes sent to consumers",
                                            labels=["topic"]),
            "messagesin": CounterMetricFamily(TOPIC + "messagesin",
                                              "Messages appended from clients", labels=["topic"]),
        }
        if rm is not None:
            for topic, c in sorted(rm.topic_stats.topics.items()):
                fams["bytesin"].add_metric([topic], c.bytes_in)
                fams["bytesout"].add_metric([topic], c.bytes_out)
                fams["messagesin"].add_metric([topic], c.messages_in)
        yield from fams.values()

    def _logs(self) -> Iterator[Metric]:
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of each partition's log",
                                 labels=["topic", "partition"])
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset of each partition",
                                labels=["topic", "partition"])
        lm = self.src.log_manager()
        for plog in lm.all_logs() if lm is not None else []:
            tp = plog.topic_partition
            labels = [tp.topic, str(tp.partition)]
            size.add_metric(labels, plog.size_in_bytes)
            end.add_metric(labels, plog.log_end_offset)
        yield size
        yield end
        offline = GaugeMetricFamily(
            "kafka_log_logmanager_logdirectoryoffline", "1 when the log dir is offline",
            labels=["logDirectory"])
        dirs = lm.log_dirs if lm is not None else []
        for d in dirs:
            offline.add_metric([str(d)], int(lm is not None and lm.is_dir_offline(d)))
        yield offline
        yield _gauge("kafka_log_logmanager_offlinelogdirectorycount",
                     "Log dirs taken offline by an I/O error",
                     sum(1 for d in dirs if lm is not None and lm.is_dir_offline(d)))

    def _groups(self) -> Iterator[Metric]:
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "Log end offset minus committed offset, groups this broker coordinates",
            labels=["group", "topic", "partition"],
        )
        for row in group_lags(self.src):
            if row.lag is not None:
                lag.add_metric([row.group, row.topic, str(row.partition)], row.lag)
        yield lag

    def _client_quotas(self) -> Iterator[Metric]:
        """Kafka's per-client quota metrics (`kafka.server:type=Produce|Fetch|Request,user=..,
        client-id=..`: `byte-rate` / `request-time`, `throttle-time`), for the clients the
        quotas recorded."""
        quotas = self.src.client_quotas()
        rows = quotas.snapshot() if quotas is not None else []
        labels = ["user", "client_id"]
        fams: dict[str, GaugeMetricFamily] = {}
        for key, group, rate_name, rate_doc in _QUOTA_FAMILIES:
            g = group.lower()
            fams[f"{key}_rate"] = GaugeMetricFamily(
                f"kafka_server_{g}_{rate_name}", rate_doc, labels=labels)
            fams[f"{key}_throttle"] = GaugeMetricFamily(
                f"kafka_server_{g}_throttle_time",
                f"Average throttle time in ms of {group} requests over the quota window",
                labels=labels)
        for qtype, user, client_id, rate, throttle in rows:
            fams[f"{qtype.value}_rate"].add_metric([user, client_id], rate)
            fams[f"{qtype.value}_throttle"].add_metric([user, client_id], throttle)
        yield from fams.values()


_QUOTA_FAMILIES = (
    ("producer_byte_rate", "Produce", "byte_rate", "Bytes per second produced, per client"),
    ("consumer_byte_rate", "Fetch", "byte_rate", "Bytes per second fetched, per client"),
    ("request_percentage", "Request", "request_time",
     "Request handler time, percent of one thread, per client"),
)


def broker_registry(src: BrokerSources) -> CollectorRegistry:
    """The broker's metrics and the process's own (`process_cpu_seconds_total`,
    `process_resident_memory_bytes`, `process_open_fds`, `process_start_time_seconds`, ...;
    `python_gc_*`, `python_info`): brokers sharing a process report the same process figures."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(src))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
