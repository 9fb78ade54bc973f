"""Consumer-group lag as Prometheus gauges, read at scrape time from the group coordinator of this broker.

What is shown: for every group this broker coordinates (the groups of the ``__consumer_offsets`` partitions it
leads; a group coordinated elsewhere is on that broker's endpoint) and every partition with a committed offset,
``kafka_consumergroup_group_offset{group,topic,partition}`` (the committed offset) and
``kafka_consumergroup_group_lag{group,topic,partition}`` = high watermark - committed offset. The names and
labels are kafka-lag-exporter's (a subset of its labels), so its dashboards find them; Kafka's broker has no
such metric, lag tools compute it from the outside.

Which end: the high watermark, as ``kafka-consumer-groups --describe`` does (its LOG-END-OFFSET is ListOffsets
``latest`` with the default READ_UNCOMMITTED isolation, which answers the high watermark), and as Burrow and
kafka-lag-exporter do. Not the log end offset (records above the high watermark cannot be read by anyone yet)
and not the last stable offset (the broker does not know a group's isolation level; for a read_committed
consumer behind an open transaction the lag counts the open transaction's records, which it has indeed not
consumed). The difference is not clamped: a committed offset above the high watermark (a log truncated after
the commit) shows as a negative lag, as the tool prints it.

Where the high watermark comes from: the local replica of the partition. On its leader it is exact; on a
follower it is the leader's as of its last fetch (behind by at most one fetch round). A partition without a
replica on this broker (a cluster whose group coordinator is not a replica of the consumed partition) gets the
offset gauge only; ``pylog_consumergroup_lag_unknown_partitions`` counts them, so a sum of lags that leaves
them out is visibly partial.

Bounded: at most ``pylog.metrics.consumer.lag.max.partitions`` (group, partition) series per scrape, taken
group by group in the order the coordinator came to know the groups (a client inventing new groups cannot
push out the series of older ones). Beyond the cap the rest is left out of that scrape: the omitted count is
the gauge ``pylog_consumergroup_lag_omitted_partitions``, each such scrape counts in
``pylog_consumergroup_lag_truncated_scrapes_total``, and the first of a run of truncated scrapes logs a
WARNING naming the config. The work on the event loop is one pass over the groups (a length each) plus at
most the cap's worth of partitions.

Threading: :meth:`GroupLagReader.read` runs on the event-loop thread inside the metrics snapshot (it reads the
coordinator's maps and the logs' high watermarks); :func:`group_lag_families` turns its frozen result into
metric families on the HTTP server's thread.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from broker_runtime.coordinator.group.state import Group, GroupState

if TYPE_CHECKING:
    from prometheus_client.core import Metric

__all__ = ["MAX_PARTITIONS_CONFIG", "GroupLagReader", "GroupLagSnapshot", "group_lag_families"]

_log = logging.getLogger(__name__)

MAX_PARTITIONS_CONFIG = "pylog.metrics.consumer.lag.max.partitions"


class _Replica(Protocol):
    @property
    def high_watermark(self) -> int: ...


@dataclass(frozen=True, slots=True)
class GroupLagSnapshot:
    """One scrape's group offsets: (group, topic, partition, committed offset, lag or None without a replica)."""

    rows: list[tuple[str, str, int, int, int | None]] = field(default_factory=list)
    #: (group, partition) series left out by the cap in this scrape.
    omitted: int = 0
    #: Scrapes so far that the cap cut (cumulative).
    truncated_scrapes: int = 0
    #: Rows of this scrape without a lag (no local replica of the partition).
    unknown: int = 0


class GroupLagReader:
    """Takes :class:`GroupLagSnapshot`\\ s (event-loop thread); keeps the truncation counter and warning state."""

    def __init__(self, max_partitions: int) -> None:
        self._cap = max_partitions
        self._truncated_scrapes = 0
        self._truncating = False

    def read(
        self, groups: Iterable[Group], replica: Callable[[str, int], _Replica | None]
    ) -> GroupLagSnapshot:
        """The offsets of ``groups`` (the coordinator's, in its order) with their lag against ``replica``'s
        high watermark; see the module docstring for the cap."""
        rows: list[tuple[str, str, int, int, int | None]] = []
        cap = self._cap
        total = 0
        unknown = 0
        for group in groups:
            if group.state == GroupState.DEAD:
                continue
            offsets = group.offsets
            total += len(offsets)
            room = cap - len(rows)
            if room <= 0:
                continue
            for i, ((topic, partition), committed) in enumerate(offsets.items()):
                if i >= room:
                    break
                log = replica(topic, partition)
                lag = None if log is None else log.high_watermark - committed.offset
                unknown += lag is None
                rows.append((group.group_id, topic, partition, committed.offset, lag))
        omitted = total - len(rows)
        if omitted:
            self._truncated_scrapes += 1
            if not self._truncating:
                _log.warning(
                    "metrics: %d consumer-group partitions have committed offsets, more than %s=%d; the "
                    "lag gauges of %d are left out of this scrape and of the next ones while it stays above "
                    "(raise the config to see them all)",
                    total,
                    MAX_PARTITIONS_CONFIG,
                    cap,
                    omitted,
                )
        self._truncating = omitted > 0
        return GroupLagSnapshot(rows, omitted, self._truncated_scrapes, unknown)


def group_lag_families(snap: GroupLagSnapshot) -> Iterator[Metric]:
    """The gauges and counters of one snapshot (sorted by group, topic, partition)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # only a scrape needs it

    labels = ["group", "topic", "partition"]
    offset = GaugeMetricFamily(
        "kafka_consumergroup_group_offset",
        "Committed offset of a group's partition, for the groups this broker coordinates",
        labels=labels,
    )
    lag = GaugeMetricFamily(
        "kafka_consumergroup_group_lag",
        "High watermark of the partition's local replica minus the group's committed offset "
        "(kafka-consumer-groups' LAG)",
        labels=labels,
    )
    for group, topic, partition, committed, behind in sorted(snap.rows):
        values = [group, topic, str(partition)]
        offset.add_metric(values, committed)
        if behind is not None:
            lag.add_metric(values, behind)
    yield offset
    yield lag
    unknown = GaugeMetricFamily(
        "pylog_consumergroup_lag_unknown_partitions",
        "Group partitions shown with their offset but no lag: no replica of the partition on this broker",
    )
    unknown.add_metric([], snap.unknown)
    yield unknown
    omitted = GaugeMetricFamily(
        "pylog_consumergroup_lag_omitted_partitions",
        f"Group partitions left out of this scrape by {MAX_PARTITIONS_CONFIG}",
    )
    omitted.add_metric([], snap.omitted)
    yield omitted
    truncated = CounterMetricFamily(
        "pylog_consumergroup_lag_truncated_scrapes",
        f"Scrapes whose group lag gauges were cut by {MAX_PARTITIONS_CONFIG} (each run of them also a WARNING)",
    )
    truncated.add_metric([], snap.truncated_scrapes)
    yield truncated
