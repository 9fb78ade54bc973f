"""The broker's Prometheus metrics: one :class:`BrokerMetrics` object every component reports through, and the
HTTP endpoint that serves it (``pylog.metrics.listener``, off by default).

Names: Kafka's MBeans as the Prometheus JMX exporter's common Kafka rules name them (lower-cased
``kafka_<domain>_<type>_<name>``, a ``...PerSec`` meter's count as ``..._total``, the MBean's key properties
as labels), so a Kafka dashboard's queries find them; the README's metrics table lists every name with its
MBean. Names without a Kafka counterpart start with ``pylog_``.

Where values live: everything is kept in plain Python numbers owned by the event-loop thread, so the request
path pays no lock (prometheus-client's own counters and histograms take one per update, which measured tens of
microseconds per request on a loaded 2-core machine): counters per topic, per API and per error code, and one
bucket array per request-time histogram, updated a few times per request and per partition, never per record.
A scrape (prometheus-client's HTTP server, its own daemon thread) asks the event loop for one :class:`Snapshot`
(``loop.call_soon_threadsafe``): a copy of those counters plus the gauges read from the broker (log end/start
offset and size per partition, purgatory sizes, under-replicated and offline partitions, connections, the log
manager's periodic-task failures, the consumer groups' offsets and lag: :mod:`.group_lag`), and waits for it at
most :data:`SNAPSHOT_TIMEOUT_S`; a loop that does not answer in time costs that scrape the broker's values (one
WARNING, counted in ``pylog_metrics_snapshot_timeouts_total``), never the scrape or the loop. Counters are cumulative, so the next
scrape has them all.

Request times (Kafka's ``RequestMetrics``, in milliseconds, one histogram per API): ``requestqueuetimems``
from the read that completed the frame to the handler's start, ``localtimems`` in the handler, ``remotetimems``
waiting in a purgatory (acks=-1 produce, a delayed fetch), ``responsequeuetimems`` from the answer being ready
to its turn on the connection (answers leave in request order), ``totaltimems`` from arrival to the answer
handed to the socket. Kafka's ``ResponseSendTimeMs`` has no counterpart: asyncio hands the bytes to the kernel
without reporting when they left.

Event-loop lag (opt-in, :mod:`.loop_lag`): ``pylog_event_loop_lag_ms``, how late the loop ran a probe callback that
was due, in the same buckets; the probe reports through :meth:`BrokerMetrics.loop_lagged` (loop thread).

Threads: the request-path state and the broker are read and written on the loop thread only (the snapshot runs
there); the HTTP thread only turns a finished snapshot into text (and counts its own timeouts in a
prometheus-client counter, which locks), so a slow scraper never blocks the loop. prometheus-client itself is
imported when the endpoint starts (or a scrape's families are built): a broker without the endpoint never loads it.
"""

from __future__ import annotations

import asyncio
import bisect
import concurrent.futures
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.record_codec.walks import record_walk
from broker_runtime.server.group_lag import GroupLagSnapshot, group_lag_families
from broker_runtime.server.quota_manager import SensorSnapshot

if TYPE_CHECKING:  # prometheus-client is imported by the endpoint's start or a scrape, not by the broker's
    from prometheus_client import CollectorRegistry, Counter
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = [
    "SNAPSHOT_TIMEOUT_S",
    "BrokerMetrics",
    "MetricsServer",
    "PartitionSnapshot",
    "RequestTiming",
    "Snapshot",
]

_log = logging.getLogger(__name__)

#: How long one scrape waits for the event loop's snapshot of the gauges.
SNAPSHOT_TIMEOUT_S = 5.0

#: Histogram buckets of the request times, in milliseconds (Kafka's request times span 0.1 ms to minutes).
_TIME_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)

_BUCKET_LABELS = [str(float(b)) for b in _TIME_BUCKETS_MS] + ["+Inf"]
#: The RequestMetrics histograms, in the order of :class:`RequestTiming`'s intervals.
_TIME_NAMES = (
    ("requestqueuetimems", "RequestQueueTimeMs"),
    ("localtimems", "LocalTimeMs"),
    ("remotetimems", "RemoteTimeMs"),
    ("responsequeuetimems", "ResponseQueueTimeMs"),
    ("totaltimems", "TotalTimeMs"),
)
_ERROR_NAMES: dict[int, str] = {int(code): code.name for code in ErrorCode}


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """One hosted partition as the gauges show it."""

    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segments: int
    is_leader: bool
    under_replicated: bool
    under_min_isr: bool


@dataclass(frozen=True)
class Snapshot:
    """The scrape-time gauges, taken on the event-loop thread."""

    partitions: list[PartitionSnapshot] = field(default_factory=list)
    #: delayedOperation name ("Produce", "Fetch") -> (operations watched, operations waiting in the timer).
    purgatories: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    #: Partitions of the cluster without a leader (a single node: 0).
    offline_partitions: int = 0
    active_controller: bool = True
    connections: int = 0
    #: The log manager's periodic tasks that raised, by task name.
    periodic_failures: Mapping[str, int] = field(default_factory=dict)
    #: Failed roll flushes by file ("segment", "producer snapshot"), from the log manager.
    roll_flush_failures: Mapping[str, int] = field(default_factory=dict)
    #: listener -> sendfile sends that stopped short (the segment file shrank; the connection was closed).
    sendfile_short_sends: Mapping[str, int] = field(default_factory=dict)
    #: What startup recovery cut: segments truncated or deleted, and their bytes (LogManager's counters).
    recovery_truncations: int = 0
    partition_load_failures: int = 0
    recovery_bytes_dropped: int = 0
    #: Connections refused by limit key (``max.connections``, ``max.connections.per.ip``), and idle ones closed.
    connections_refused: Mapping[str, int] = field(default_factory=dict)
    connections_idle_closed: int = 0
    #: The transaction coordinator's state writes that failed (retried), by error; the requests that waited for
    #: their transaction's markers, and those of them answered CONCURRENT_TRANSACTIONS after waiting too long.
    transaction_state_write_failures: Mapping[str, int] = field(default_factory=dict)
    transaction_requests_parked: int = 0
    transaction_requests_parked_timed_out: int = 0
    #: Copies of :class:`BrokerMetrics`' request-path counters (see its attributes), taken with the gauges.
    topics: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    requests: Mapping[tuple[str, int], int] = field(default_factory=dict)
    errors: Mapping[tuple[str, int], int] = field(default_factory=dict)
    times: Mapping[str, list[tuple[list[int], float]]] = field(default_factory=dict)
    isr_shrinks: int = 0
    isr_expands: int = 0
    #: listener -> connections closed because their SASL session expired (``connections.max.reauth.ms``).
    expired_connections_killed: Mapping[str, int] = field(default_factory=dict)
    #: listener -> JWKS reads of its OAUTHBEARER validator that failed (each also a WARNING), and that succeeded.
    jwks_refresh_failures: Mapping[str, int] = field(default_factory=dict)
    jwks_refreshes: Mapping[str, int] = field(default_factory=dict)
    #: The consumer groups' offsets and lag (None: a snapshot taken without them).
    group_lag: GroupLagSnapshot | None = None
    #: Client quotas: quota key -> its rates (at most ``quota_manager.MAX_SENSORS``), and rates dropped for others.
    client_quotas: Mapping[str, list[SensorSnapshot]] = field(default_factory=dict)
    quota_sensors_evicted: Mapping[str, int] = field(default_factory=dict)
    #: Incremental fetch sessions (:mod:`.fetch_sessions`): sessions and partitions held now; cumulative
    #: evictions, incremental fetches served, sessions closed for holding more partitions than the cluster.
    fetch_sessions: int = 0
    fetch_session_partitions: int = 0
    fetch_session_evictions: int = 0
    fetch_session_incremental_fetches: int = 0
    fetch_session_oversize_closed: int = 0
    #: Event-loop lag (:mod:`.loop_lag`): bucket counts (not cumulative, +Inf last) and sum in ms; None: no probe.
    loop_lag: tuple[list[int], float] | None = None


class RequestTiming:
    """The times of one request, filled in as it moves (monotonic nanoseconds); see the module docstring."""

    __slots__ = ("_metrics", "api", "local_done", "received", "resolved", "result", "started", "version")

    def __init__(self, metrics: BrokerMetrics, api: str, version: int, received: int, started: int) -> None:
        self._metrics = metrics
        self.api = api
        self.version = version
        self.received = received
        self.started = started
        self.local_done = started
        self.resolved = started
        self.result: Any = None

    def sent(self, now_ns: int) -> None:
        """The answer was handed to the socket (or dropped): record this request."""
        self._metrics._record(self, now_ns)


def _error_counts(body: dict[str, Any], counts: dict[int, int]) -> None:
    """Every ``ErrorCode`` field of a response body and of the structs in its arrays (Kafka's
    ``AbstractResponse.errorCounts``); record bytes are never looked into, so the cost is per partition of the
    answer, not per record."""
    code = body.get("ErrorCode")
    if code is not None:
        counts[code] = counts.get(code, 0) + 1
    for value in body.values():
        if type(value) is list:
            for item in value:
                if type(item) is dict:
                    _error_counts(item, counts)


class BrokerMetrics:
    """The one object the broker's components report through; owns its own registry (several brokers may run in
    one process, each with its own endpoint)."""

    def __init__(self, listener_name: str = "PLAINTEXT") -> None:
        self._registry: CollectorRegistry | None = None
        self._registry_lock = threading.Lock()
        self._snapshot_timeouts: Counter | None = None
        self._listener_name = listener_name
        #: topic -> [bytes in, messages in, bytes out] (loop thread).
        self._topics: dict[str, list[float]] = {}
        #: (request name, version) -> requests answered (loop thread).
        self._requests: dict[tuple[str, int], int] = {}
        #: (request name, error code) -> error codes answered (loop thread).
        self._errors: dict[tuple[str, int], int] = {}
        #: request name -> per histogram of :data:`_TIME_NAMES`: [bucket counts (not cumulative, +Inf last), sum].
        self._times: dict[str, list[list[Any]]] = {}
        self._isr_shrinks = 0
        self._isr_expands = 0
        #: listener -> connections closed for an expired SASL session (loop thread).
        self._expired_killed: dict[str, int] = {}
        #: The event-loop lag histogram (:mod:`.loop_lag`): [bucket counts (+Inf last), sum]; None: no probe.
        self._loop_lag: list[Any] | None = None
        self._snapshot: Callable[[], Snapshot] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def registry(self) -> CollectorRegistry:
        """The Prometheus registry the endpoint serves, made at first use (the endpoint's start): a broker
        without ``pylog.metrics.listener`` never imports prometheus-client."""
        with self._registry_lock:
            if self._registry is None:
                from prometheus_client import CollectorRegistry, Counter

                registry = CollectorRegistry(auto_describe=False)
                self._snapshot_timeouts = Counter(
                    "pylog_metrics_snapshot_timeouts",
                    "Scrapes whose broker values were left out because the event loop did not answer in time",
                    registry=registry,
                )
                registry.register(_SnapshotCollector(self))
                self._registry = registry
            return self._registry

    # -- wiring ---------------------------------------------------------------------------------------------

    def bind(self, loop: asyncio.AbstractEventLoop, snapshot: Callable[[], Snapshot]) -> None:
        """Where scrape-time gauges come from: ``snapshot`` runs on ``loop`` (the broker's event loop)."""
        self._loop = loop
        self._snapshot = snapshot

    def counters_into(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with copies of the request-path counters (loop thread, inside the snapshot call)."""
        return dataclasses.replace(
            snapshot,
            topics={t: (v[0], v[1], v[2]) for t, v in self._topics.items()},
            requests=dict(self._requests),
            errors=dict(self._errors),
            times={api: [(list(h[0]), h[1]) for h in hists] for api, hists in self._times.items()},
            isr_shrinks=self._isr_shrinks,
            isr_expands=self._isr_expands,
            expired_connections_killed=dict(self._expired_killed),
            loop_lag=None if self._loop_lag is None else (list(self._loop_lag[0]), self._loop_lag[1]),
        )

    # -- the request path (event-loop thread) ----------------------------------------------------------------

    def _topic(self, topic: str) -> list[float]:
        values = self._topics.get(topic)
        if values is None:
            values = self._topics[topic] = [0, 0, 0]
        return values

    def appended(self, topic: str, size_bytes: int, records: int) -> None:
        """A producer's records were appended to a partition of ``topic`` (not duplicates, not replication)."""
        values = self._topic(topic)
        values[0] += size_bytes
        values[1] += records

    def fetched(self, topic: str, size_bytes: int) -> None:
        """Record bytes of ``topic`` went into a consumer's Fetch answer."""
        if size_bytes:
            self._topic(topic)[2] += size_bytes

    def isr_changed(self, old_size: int, new_size: int) -> None:
        if new_size < old_size:
            self._isr_shrinks += 1
        elif new_size > old_size:
            self._isr_expands += 1

    def expired_connection_killed(self, listener: str) -> None:
        """A connection of ``listener`` was closed: its SASL session expired without re-authentication."""
        self._expired_killed[listener] = self._expired_killed.get(listener, 0) + 1

    def loop_lagged(self, lag_ms: float) -> None:
        """One event-loop lag probe ran ``lag_ms`` late (see :mod:`.loop_lag`); the histogram exists from the
        first probe on."""
        hist = self._loop_lag
        if hist is None:
            hist = self._loop_lag = [[0] * (len(_TIME_BUCKETS_MS) + 1), 0.0]
        hist[0][bisect.bisect_left(_TIME_BUCKETS_MS, lag_ms)] += 1
        hist[1] += lag_ms

    def request_started(self, api: str, version: int, received_ns: int) -> RequestTiming:
        return RequestTiming(self, api, version, received_ns, time.monotonic_ns())

    def _record(self, timing: RequestTiming, now_ns: int) -> None:
        api = timing.api
        key = (api, timing.version)
        requests = self._requests
        requests[key] = requests.get(key, 0) + 1
        hists = self._times.get(api)
        if hists is None:
            hists = self._times[api] = [[[0] * (len(_TIME_BUCKETS_MS) + 1), 0.0] for _ in _TIME_NAMES]
        received, started, local_done, resolved = (
            timing.received,
            timing.started,
            timing.local_done,
            timing.resolved,
        )
        for hist, interval_ns in zip(
            hists,
            (
                started - received,
                local_done - started,
                resolved - local_done,
                now_ns - resolved,
                now_ns - received,
            ),
            strict=True,
        ):
            ms = interval_ns / 1e6
            hist[0][bisect.bisect_left(_TIME_BUCKETS_MS, ms)] += 1
            hist[1] += ms
        result = timing.result
        if isinstance(result, dict):
            counts: dict[int, int] = {}
            _error_counts(result, counts)
            errors = self._errors
            for code, n in counts.items():
                ekey = (api, code)
                errors[ekey] = errors.get(ekey, 0) + n

    # -- scrape time (the HTTP server's thread) --------------------------------------------------------------

    def take_snapshot(self) -> Snapshot | None:
        """The gauges, taken on the event loop; None when there is no loop or it did not answer in time."""
        loop, snapshot = self._loop, self._snapshot
        if loop is None or snapshot is None or loop.is_closed():
            return None
        answer: concurrent.futures.Future[Snapshot] = concurrent.futures.Future()

        def take() -> None:
            if answer.set_running_or_notify_cancel():
                try:
                    answer.set_result(self.counters_into(snapshot()))
                except BaseException as exc:  # reported to the scraper's thread below
                    answer.set_exception(exc)

        try:
            loop.call_soon_threadsafe(take)
        except RuntimeError:  # the loop closed meanwhile: the broker is stopping
            return None
        try:
            return answer.result(SNAPSHOT_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            answer.cancel()
            if self._snapshot_timeouts is not None:  # None: no endpoint yet, so no scrape to count
                self._snapshot_timeouts.inc()
            _log.warning(
                "metrics scrape: the event loop did not answer within %.0f s; broker values left out of this scrape",
                SNAPSHOT_TIMEOUT_S,
            )
            return None
        except Exception:
            _log.exception(
                "metrics scrape: taking the snapshot failed; broker values left out of this scrape"
            )
            return None

    def counter_families(self, snap: Snapshot) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

        def counter(name: str, doc: str, labels: Iterable[str] = ()) -> CounterMetricFamily:
            return CounterMetricFamily(name, doc, labels=list(labels))

        topic_families = (
            counter(
                "kafka_server_brokertopicmetrics_bytesin",
                "Bytes of records appended by producers (BrokerTopicMetrics BytesInPerSec)",
                ["topic"],
            ),
            counter(
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended by producers (BrokerTopicMetrics MessagesInPerSec)",
                ["topic"],
            ),
            counter(
                "kafka_server_brokertopicmetrics_bytesout",
                "Record bytes sent to consumers, replication excluded (BrokerTopicMetrics BytesOutPerSec)",
                ["topic"],
            ),
        )
        for topic, values in sorted(snap.topics.items()):
            for family, value in zip(topic_families, values, strict=True):
                family.add_metric([topic], value)
        yield from topic_families
        requests = counter(
            "kafka_network_requestmetrics_requests",
            "Requests answered (RequestMetrics RequestsPerSec)",
            ["request", "version"],
        )
        for (api, version), n in sorted(snap.requests.items()):
            requests.add_metric([api, str(version)], n)
        yield requests
        errors = counter(
            "kafka_network_requestmetrics_errors",
            "Error codes in answers, NONE included (RequestMetrics ErrorsPerSec)",
            ["request", "error"],
        )
        for (api, code), n in sorted(snap.errors.items()):
            errors.add_metric([api, _ERROR_NAMES.get(code, str(code))], n)
        yield errors
        if snap.loop_lag is not None:
            lag = HistogramMetricFamily(
                "pylog_event_loop_lag_ms",
                "How late the event loop ran a probe callback that was due, in milliseconds "
                "(pylog.metrics.event.loop.lag.interval.ms; under 1 ms: the probe's granularity)",
            )
            lag.add_metric([], _cumulative(snap.loop_lag[0]), sum_value=snap.loop_lag[1])
            yield lag
        for index, (name, doc) in enumerate(_TIME_NAMES):
            histogram = HistogramMetricFamily(
                f"kafka_network_requestmetrics_{name}",
                f"RequestMetrics {doc} in milliseconds",
                labels=["request"],
            )
            for api, hists in sorted(snap.times.items()):
                counts, total = hists[index]
                histogram.add_metric([api], _cumulative(counts), sum_value=total)
            yield histogram
        for name, doc, value in (
            (
                "kafka_server_replicamanager_isrshrinks",
                "ISR shrinks of partitions led here (IsrShrinksPerSec)",
                snap.isr_shrinks,
            ),
            (
                "kafka_server_replicamanager_isrexpands",
                "ISR expands of partitions led here (IsrExpandsPerSec)",
                snap.isr_expands,
            ),
        ):
            family = counter(name, doc)
            family.add_metric([], value)
            yield family
        # Kafka's socket-server-metrics attribute is a cumulative count; the JMX exporter keeps its name.
        expired = GaugeMetricFamily(
            "kafka_server_socket_server_metrics_expired_connections_killed_count",
            "Connections closed because their SASL session expired without re-authentication "
            "(connections.max.reauth.ms), cumulative",
            labels=["listener"],
        )
        for listener, n in sorted(snap.expired_connections_killed.items()):
            expired.add_metric([listener], n)
        yield expired

    def gauge_families(self, snap: Snapshot) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def gauge(name: str, doc: str, labels: Iterable[str] = ()) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=list(labels))

        log_labels = ("topic", "partition")
        leo = gauge("kafka_log_log_logendoffset", "Log end offset (Log LogEndOffset)", log_labels)
        lso = gauge("kafka_log_log_logstartoffset", "Log start offset (Log LogStartOffset)", log_labels)
        size = gauge("kafka_log_log_size", "Bytes of the partition's segments (Log Size)", log_labels)
        segments = gauge(
            "kafka_log_log_numlogsegments", "Segments of the log (Log NumLogSegments)", log_labels
        )
        under = gauge(
            "kafka_cluster_partition_underreplicated",
            "1 if this leader's ISR is smaller than the replica set (Partition UnderReplicated)",
            log_labels,
        )
        for p in snap.partitions:
            labels = [p.topic, str(p.partition)]
            leo.add_metric(labels, p.log_end_offset)
            lso.add_metric(labels, p.log_start_offset)
            size.add_metric(labels, p.size_bytes)
            segments.add_metric(labels, p.segments)
            if p.is_leader:
                under.add_metric(labels, int(p.under_replicated))
        yield from (leo, lso, size, segments, under)
        leaders = [p for p in snap.partitions if p.is_leader]
        for name, doc, value in (
            ("kafka_server_replicamanager_partitioncount", "Partitions hosted here", len(snap.partitions)),
            ("kafka_server_replicamanager_leadercount", "Partitions led here", len(leaders)),
            (
                "kafka_server_replicamanager_underreplicatedpartitions",
                "Partitions led here whose ISR is smaller than their replica set",
                sum(p.under_replicated for p in leaders),
            ),
            (
                "kafka_server_replicamanager_underminisrpartitioncount",
                "Partitions led here whose ISR is below min.insync.replicas",
                sum(p.under_min_isr for p in leaders),
            ),
            (
                "kafka_controller_kafkacontroller_offlinepartitionscount",
                "Partitions without a leader (reported by the active controller, 0 elsewhere)",
                snap.offline_partitions if snap.active_controller else 0,
            ),
            (
                "kafka_controller_kafkacontroller_activecontrollercount",
                "1 on the broker that is the active controller",
                int(snap.active_controller),
            ),
        ):
            family = gauge(name, doc)
            family.add_metric([], value)
            yield family
        purgatory = gauge(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Operations watched in a purgatory (DelayedOperationPurgatory PurgatorySize)",
            ["delayedOperation"],
        )
        delayed = gauge(
            "kafka_server_delayedoperationpurgatory_numdelayedoperations",
            "Operations waiting for their timeout (DelayedOperationPurgatory NumDelayedOperations)",
            ["delayedOperation"],
        )
        for name, (watched, waiting) in sorted(snap.purgatories.items()):
            purgatory.add_metric([name], watched)
            delayed.add_metric([name], waiting)
        yield purgatory
        yield delayed
        connections = gauge(
            "kafka_server_socket_server_metrics_connection_count",
            "Open client connections (socket-server-metrics connection-count)",
            ["listener"],
        )
        connections.add_metric([self._listener_name], snap.connections)
        yield connections
        walk = gauge(
            "pylog_record_walk_compiled",
            "1 when produce validation and record decoding use the compiled record walk, 0 when the slower "
            "numpy walk runs (the broker then logged a WARNING at start)",
        )
        walk.add_metric([], int(record_walk()[0] == "compiled"))
        yield walk
        failures = CounterMetricFamily(
            "pylog_log_manager_periodic_failures",
            "Runs of a log manager periodic task (retention, checkpoint, ...) that raised, by task",
            labels=["task"],
        )
        for task, count in sorted(snap.periodic_failures.items()):
            failures.add_metric([task], count)
        yield failures
        yield _counter_by(
            "pylog_log_roll_flush_failures",
            "Roll flushes that failed, by file (segment: its or its directory's fsync, the recovery point "
            "stays; producer snapshot: the snapshot written after it); each also a WARNING line",
            "file",
            snap.roll_flush_failures,
        )
        yield _counter_by(
            "pylog_oauthbearer_jwks_refresh_failures",
            "Reads of an OAUTHBEARER listener's JWKS (sasl.oauthbearer.jwks.endpoint.url) that failed; the keys "
            "read before are kept (none yet: every login fails), each also a WARNING line",
            "listener",
            snap.jwks_refresh_failures,
        )
        yield _counter_by(
            "pylog_oauthbearer_jwks_refreshes",
            "Reads of an OAUTHBEARER listener's JWKS that succeeded (at start, periodic, asked by an unknown kid)",
            "listener",
            snap.jwks_refreshes,
        )
        yield _counter_by(
            "pylog_network_sendfile_short_sends",
            "Fetch answers whose sendfile sent fewer bytes than its range (the segment shrank meanwhile); the "
            "connection was closed, each also a WARNING line",
            "listener",
            snap.sendfile_short_sends,
        )
        load_failures = CounterMetricFamily(
            "pylog_partition_load_failures",
            "Partition logs that could not be made or loaded while the broker ran (CreateTopics, "
            "CreatePartitions, an assignment); each also an ERROR line, the partition not served",
        )
        load_failures.add_metric([], snap.partition_load_failures)
        yield load_failures
        truncations = CounterMetricFamily(
            "pylog_log_recovery_truncations",
            "Segments startup recovery truncated or deleted (each also a WARNING line)",
        )
        truncations.add_metric([], snap.recovery_truncations)
        yield truncations
        dropped = CounterMetricFamily(
            "pylog_log_recovery_dropped_bytes", "Bytes startup recovery cut off or deleted"
        )
        dropped.add_metric([], snap.recovery_bytes_dropped)
        yield dropped
        yield from _fetch_session_families(snap)
        yield from _quota_families(snap)
        refused = CounterMetricFamily(
            "pylog_connections_refused",
            "Connections closed at once because a limit was reached, by the limit's key",
            labels=["listener", "limit"],
        )
        for key, count in sorted(snap.connections_refused.items()):
            refused.add_metric([self._listener_name, key], count)
        yield refused
        idle = CounterMetricFamily(
            "pylog_connections_idle_closed",
            "Connections closed after connections.max.idle.ms without traffic",
            labels=["listener"],
        )
        idle.add_metric([self._listener_name], snap.connections_idle_closed)
        yield idle
        yield _counter_by(
            "pylog_transaction_state_write_failures",
            "Transaction coordinator writes to __transaction_state that failed and are retried (by the client or "
            "the periodic check), by error; the first of a transactional id's failing write is a WARNING line",
            "error",
            snap.transaction_state_write_failures,
        )
        parked = CounterMetricFamily(
            "pylog_transaction_requests_parked",
            "AddPartitionsToTxn, AddOffsetsToTxn and EndTxn requests that waited for the markers of their "
            "transactional id's previous transaction instead of answering CONCURRENT_TRANSACTIONS",
        )
        parked.add_metric([], snap.transaction_requests_parked)
        yield parked
        parked_out = CounterMetricFamily(
            "pylog_transaction_requests_parked_timed_out",
            "Parked transaction requests answered CONCURRENT_TRANSACTIONS after waiting 10 s (each a WARNING line)",
        )
        parked_out.add_metric([], snap.transaction_requests_parked_timed_out)
        yield parked_out
        if snap.group_lag is not None:
            yield from group_lag_families(snap.group_lag)


class _SnapshotCollector:
    """What a scrape reads of :class:`BrokerMetrics` (prometheus-client's custom collector protocol)."""

    def __init__(self, metrics: BrokerMetrics) -> None:
        self._metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # not described at registration: collecting needs the running broker

    def collect(self) -> Iterator[Metric]:
        snap = self._metrics.take_snapshot()
        if snap is not None:
            yield from self._metrics.counter_families(snap)
            yield from self._metrics.gauge_families(snap)


class MetricsServer:
    """The HTTP endpoint (``GET /metrics``, prometheus-client's server in a daemon thread)."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        from prometheus_client import start_http_server

        self._server, self._thread = start_http_server(port, addr=host, registry=metrics.registry)
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _cumulative(counts: list[int]) -> list[tuple[str, float]]:
    """Prometheus' cumulative buckets (label, count) of per-bucket ``counts`` in :data:`_TIME_BUCKETS_MS` order."""
    cumulative: list[tuple[str, float]] = []
    running = 0
    for label, count in zip(_BUCKET_LABELS, counts, strict=True):
        running += count
        cumulative.append((label, running))
    return cumulative


def _counter_by(
    name: str, documentation: str, label: str, counts: Mapping[str, float]
) -> CounterMetricFamily:
    """A counter family with one sample per ``label`` value of ``counts`` (sorted)."""
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(name, documentation, labels=[label])
    for value, count in sorted(counts.items()):
        family.add_metric([value], count)
    return family


#: Quota key -> the (rate, throttle-time) gauge names Kafka's quota sensors get from the JMX exporter
#: (``kafka.server:type=Produce|Fetch|Request,user=U,client-id=C`` ``byte-rate`` / ``request-time`` and
#: ``throttle-time``); an address's connection rate has no Kafka MBean of that shape.
_QUOTA_GAUGES = {
    "producer_byte_rate": ("kafka_server_produce_byte_rate", "kafka_server_produce_throttle_time"),
    "consumer_byte_rate": ("kafka_server_fetch_byte_rate", "kafka_server_fetch_throttle_time"),
    "request_percentage": ("kafka_server_request_request_time", "kafka_server_request_throttle_time"),
}


def _quota_families(snap: Snapshot) -> Iterator[Metric]:
    """The client quotas' rates and throttle times per entity, the address connection rates, the evictions."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    labels = ["user", "client_id"]
    for key, (rate_name, throttle_name) in _QUOTA_GAUGES.items():
        rate = GaugeMetricFamily(rate_name, f"Rate {key} measures, per quota entity", labels=labels)
        throttle = GaugeMetricFamily(
            throttle_name, "Average throttle time (ms) of the last minute, per quota entity", labels=labels
        )
        for s in snap.client_quotas.get(key, ()):
            rate.add_metric([s.user, s.client_id], s.rate)
            throttle.add_metric([s.user, s.client_id], s.throttle_time_ms)
        yield rate
        yield throttle
    connections = GaugeMetricFamily(
        "pylog_quota_connection_creation_rate",
        "New connections per second from an address with a connection_creation_rate quota",
        labels=["ip"],
    )
    for s in snap.client_quotas.get("connection_creation_rate", ()):
        connections.add_metric([s.client_id], s.rate)
    yield connections
    evicted = CounterMetricFamily(
        "pylog_quota_sensors_evicted",
        "Quota rates dropped because more entities than the bound were active (the least recently used first)",
        labels=["quota"],
    )
    for key, count in sorted(snap.quota_sensors_evicted.items()):
        evicted.add_metric([key], count)
    yield evicted


def _fetch_session_families(snap: Snapshot) -> Iterator[Metric]:
    """Kafka's ``kafka.server:type=FetchSessionCache`` metrics, and pylog's counts of the sessions' use."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    for family, name, doc, value in (
        (
            GaugeMetricFamily,
            "kafka_server_fetchsessioncache_numincrementalfetchsessions",
            "Incremental fetch sessions held (FetchSessionCache NumIncrementalFetchSessions)",
            snap.fetch_sessions,
        ),
        (
            GaugeMetricFamily,
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions held by the incremental fetch sessions (FetchSessionCache NumIncrementalFetchPartitionsCached)",
            snap.fetch_session_partitions,
        ),
        (
            CounterMetricFamily,
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Fetch sessions evicted to make room for new ones (FetchSessionCache IncrementalFetchSessionEvictionsPerSec)",
            snap.fetch_session_evictions,
        ),
        (
            CounterMetricFamily,
            "pylog_fetch_session_incremental_fetches",
            "Incremental fetches served from a fetch session",
            snap.fetch_session_incremental_fetches,
        ),
        (
            CounterMetricFamily,
            "pylog_fetch_sessions_oversize_closed",
            "Fetch sessions closed because an incremental fetch grew them past the partitions the cluster has "
            "(each also a WARNING line; the fetcher starts over with a full fetch)",
            snap.fetch_session_oversize_closed,
        ),
    ):
        metric = family(name, doc)
        metric.add_metric([], value)
        yield metric
