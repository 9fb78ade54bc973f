"""Live throughput charts: records and bytes in, and records out per consumer group, of the topics being looked
at, derived from the Kafka protocol alone (the same way on pylog's broker and on Apache Kafka).

Derivation, per sample of a topic: records in = the sum of its partitions' high watermarks (ListOffsets, latest);
bytes in = the sum of the sizes on disk of the leaders' replicas (DescribeLogDirs); records out of group G = the
sum of G's committed offsets on the topic (OffsetFetch). A rate is the growth between two samples over their
time apart; a decrease (retention deleted a segment, a group reset its offsets) is shown as 0, not negative.
Bytes are the log's bytes (batch headers and compression included), which is what Kafka's ``BytesInPerSec``
counts too; a compacted or deleted segment shows as no growth.

Bounds (a console over 1,000 topics must not send 1,000 requests every few seconds):

* only WATCHED topics are sampled: a topic is watched for :data:`WATCH_S` after its page or its chart JSON was
  last asked for, at most :data:`MAX_WATCHED` at once (asking for one more forgets the least recently asked);
* one tick every ``interval_s`` (:data:`DEFAULT_INTERVAL_S`) costs one ListOffsets per leader, one
  DescribeLogDirs per broker leading a watched partition, and one OffsetFetch per group known to commit on a
  watched topic (at most :data:`MAX_GROUPS`);
* groups are discovered every :data:`GROUP_SCAN_TICKS` ticks (a minute at the default interval: ListGroups, then
  OffsetFetch of at most :data:`MAX_GROUP_SCAN` groups per discovery, round robin), so a new consumer shows
  within that time;
* each topic keeps a ring of at most ``WINDOW_S / interval_s`` samples (:data:`WINDOW_S`: 10 minutes).

Threading: :meth:`Rates.sample` runs on the console's one Kafka worker thread (it alone uses the client);
:meth:`Rates.watch` and :meth:`Rates.series` run on the event loop. One lock guards the watched set and the
rings; no Kafka call is made under it.

JSON (``/topics/T/rates.json``)::

    {"topic": T, "interval_s": 5.0, "window_s": 600, "error": null | str,
     "records_in": [[t_ms, per_second], ...], "bytes_in": [[t_ms, per_second], ...],
     "records_out": {group: [[t_ms, per_second], ...]}, "totals": {"records_in": int, "bytes": int}}

:data:`CHART_JS` draws it: a same-origin script (the page's Content-Security-Policy allows ``script-src 'self'``
and ``connect-src 'self'`` only) that fetches the JSON every ``interval_s`` and sets SVG polyline points and
legend text (``textContent``, never markup).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.client import KafkaClient
from broker_runtime.errors import BrokerConnectionError, ErrorCode, KafkaError
from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from broker_runtime.protocol.topic_partition import TopicPartition

__all__ = [
    "CHART_JS",
    "DEFAULT_INTERVAL_S",
    "GROUP_SCAN_TICKS",
    "MAX_GROUPS",
    "MAX_GROUP_SCAN",
    "MAX_WATCHED",
    "WATCH_S",
    "WINDOW_S",
    "Rates",
    "Sample",
]

DEFAULT_INTERVAL_S = 5.0
WINDOW_S = 600.0
WATCH_S = 600.0
MAX_WATCHED = 20
MAX_GROUPS = 20
GROUP_SCAN_TICKS = 12
MAX_GROUP_SCAN = 50


@dataclass(frozen=True)
class Sample:
    t_ms: int
    #: sum of the partitions' high watermarks
    records_in: int
    #: sum of the leaders' replica sizes; -1 when DescribeLogDirs failed
    bytes: int
    #: group -> sum of its committed offsets on the topic
    committed: dict[str, int] = field(default_factory=dict)


class Rates:
    """The watched topics and their sample rings (see the module docstring)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._lock = threading.Lock()
        #: topic -> monotonic time last asked for (least recently asked first)
        self._watched: OrderedDict[str, float] = OrderedDict()
        self._rings: dict[str, deque[Sample]] = {}
        self._errors: dict[str, str] = {}
        #: groups that committed on a watched topic (worker thread only)
        self._groups: list[str] = []
        self._ticks = 0
        self._group_cursor = 0

    def watch(self, topic: str) -> bool:
        """Keep ``topic`` sampled for :data:`WATCH_S` more; True when it was not watched before."""
        with self._lock:
            new = topic not in self._watched
            self._watched[topic] = time.monotonic()
            self._watched.move_to_end(topic)
            while len(self._watched) > MAX_WATCHED:
                gone, _ = self._watched.popitem(last=False)
                self._rings.pop(gone, None)
                self._errors.pop(gone, None)
            return new

    def watched(self) -> list[str]:
        """The topics to sample now (those asked for within :data:`WATCH_S`; the others are forgotten)."""
        now = time.monotonic()
        with self._lock:
            for topic in [t for t, at in self._watched.items() if now - at > WATCH_S]:
                del self._watched[topic]
                self._rings.pop(topic, None)
                self._errors.pop(topic, None)
            return list(self._watched)

    def has_samples(self, topic: str) -> bool:
        with self._lock:
            return bool(self._rings.get(topic))

    # --- the worker thread --------------------------------------------------------------------------------------

    def sample(self, client: KafkaClient) -> None:
        """One tick: sample every watched topic (a topic's failure is kept as its error, the others go on)."""
        topics = self.watched()
        if not topics:
            return
        md = client.metadata(topics)
        now_ms = int(time.time() * 1000)
        partitions: dict[str, list[int]] = {}
        leaders: dict[int, dict[str, list[int]]] = {}
        errors: dict[str, str] = {}
        for name in topics:
            t = md.topics.get(name)
            if t is None or t.error:
                code = t.error if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                errors[name] = str(KafkaError(code, f"metadata of topic {name!r}"))
                continue
            partitions[name] = sorted(t.partitions)
            for p in t.partitions.values():
                if p.leader >= 0:
                    leaders.setdefault(p.leader, {}).setdefault(name, []).append(p.partition)
        tps = [(name, p) for name, parts in partitions.items() for p in parts]
        ends: dict[TopicPartition, int] = {}
        if tps:
            try:
                ends = {
                    tp: v[0] for tp, v in client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()
                }
            except KafkaError as exc:
                for name in partitions:
                    errors[name] = f"high watermarks: {exc}"
        sizes: dict[str, int] = {}
        size_errors: list[str] = []
        for node, wanted in sorted(leaders.items()):
            try:
                dirs = client.admin.describe_log_dirs(node, wanted)
            except (KafkaError, BrokerConnectionError) as exc:
                size_errors.append(f"sizes from node {node}: {exc}")
                continue
            for d in dirs:
                for t in d["Topics"]:
                    mine = set(wanted.get(t["Name"], ()))
                    for p in t["Partitions"]:
                        if not p["IsFutureKey"] and p["PartitionIndex"] in mine:
                            sizes[t["Name"]] = sizes.get(t["Name"], 0) + p["PartitionSize"]
        committed = self._committed(client, set(partitions))
        with self._lock:
            for name, parts in partitions.items():
                if name not in self._watched or name in errors:
                    continue
                ring = self._rings.setdefault(name, deque(maxlen=max(2, int(WINDOW_S / self.interval_s) + 1)))
                ring.append(
                    Sample(
                        now_ms,
                        sum(ends.get((name, p), 0) for p in parts),
                        -1 if size_errors else sizes.get(name, 0),
                        {g: c[name] for g, c in committed.items() if name in c},
                    )
                )
                self._errors.pop(name, None)
                if size_errors:
                    self._errors[name] = "; ".join(size_errors)
            for name, text in errors.items():
                if name in self._watched:
                    self._errors[name] = text

    def _committed(self, client: KafkaClient, topics: set[str]) -> dict[str, dict[str, int]]:
        """group -> topic -> sum of committed offsets, for the known groups (discovered now and then)."""
        candidates = list(self._groups)
        self._ticks += 1
        if self._ticks % GROUP_SCAN_TICKS == 1:  # the first tick, then every GROUP_SCAN_TICKS
            try:
                listed = sorted(g["GroupId"] for g in client.groups.list_groups())
            except (KafkaError, BrokerConnectionError):
                listed = []
            if listed:
                start = self._group_cursor % len(listed)
                scan = (listed[start:] + listed[:start])[:MAX_GROUP_SCAN]
                self._group_cursor = start + len(scan)
                candidates = list(dict.fromkeys(candidates + scan))
        found: dict[str, dict[str, int]] = {}
        for group in candidates:
            try:
                offsets = client.groups.committed_offsets(group)
            except (KafkaError, BrokerConnectionError):
                continue
            sums: dict[str, int] = {}
            for (name, _), offset in offsets.items():
                if name in topics and offset >= 0:
                    sums[name] = sums.get(name, 0) + offset
            if sums:
                found[group] = sums
        self._groups = sorted(found, key=lambda g: -sum(found[g].values()))[:MAX_GROUPS]
        return {g: found[g] for g in self._groups}

    # --- the event loop -----------------------------------------------------------------------------------------

    def series(self, topic: str) -> dict[str, Any]:
        """The JSON of the module docstring for ``topic``."""
        with self._lock:
            ring = list(self._rings.get(topic, ()))
            error = self._errors.get(topic)
        pairs = list(zip(ring, ring[1:], strict=False))
        groups = sorted({g for s in ring for g in s.committed})

        def rate(a: int, b: int, seconds: float) -> float:
            return round(max(b - a, 0) / seconds, 3) if seconds > 0 else 0.0

        records_in, bytes_in = [], []
        out: dict[str, list[list[float]]] = {g: [] for g in groups}
        for a, b in pairs:
            seconds = (b.t_ms - a.t_ms) / 1000
            records_in.append([b.t_ms, rate(a.records_in, b.records_in, seconds)])
            if a.bytes >= 0 and b.bytes >= 0:
                bytes_in.append([b.t_ms, rate(a.bytes, b.bytes, seconds)])
            for g in groups:
                if g in a.committed and g in b.committed:
                    out[g].append([b.t_ms, rate(a.committed[g], b.committed[g], seconds)])
        last = ring[-1] if ring else None
        return {
            "topic": topic,
            "interval_s": self.interval_s,
            "window_s": WINDOW_S,
            "error": error,
            "records_in": records_in,
            "bytes_in": bytes_in,
            "records_out": out,
            "totals": {
                "records_in": last.records_in if last else 0,
                "bytes": last.bytes if last else -1,
                "committed": dict(last.committed) if last else {},
            },
        }


#: The chart script served at ``/static/chart.js``: for each ``svg[data-rates]`` it fetches the URL every
#: ``interval_s`` and draws each series as a polyline scaled to the window (records/s on one chart, bytes/s on
#: another); names reach the page through ``textContent`` only.
CHART_JS = r"""
"use strict";
(function () {
  var NS = "http://www.w3.org/2000/svg";
  function num(v) { return v >= 10 ? String(Math.round(v)) : v.toFixed(1); }
  function draw(svg, lines, windowMs, now) {
    var w = 600, h = 120, top = 0, oldest = now;
    lines.forEach(function (l) {
      l.points.forEach(function (p) { top = Math.max(top, p[1]); oldest = Math.min(oldest, p[0]); });
    });
    // The x axis spans the samples kept (at least 30 s, at most the window), newest at the right.
    var span = Math.min(windowMs, Math.max(30000, now - oldest));
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var legend = svg.parentNode.querySelector(".legend");
    legend.textContent = "";
    lines.forEach(function (l, i) {
      var pl = document.createElementNS(NS, "polyline");
      pl.setAttribute("class", "series " + l.cls);
      pl.setAttribute("data-name", l.name);
      pl.setAttribute("data-last", l.points.length ? l.points[l.points.length - 1][1] : 0);
      pl.setAttribute("fill", "none");
      pl.setAttribute("stroke", ["#2a6fdb", "#c0392b", "#27ae60", "#8e44ad", "#e67e22"][i % 5]);
      pl.setAttribute("points", l.points.map(function (p) {
        var x = w - (now - p[0]) / span * w;
        var y = h - (top > 0 ? p[1] / top * (h - 10) : 0);
        return x.toFixed(1) + "," + y.toFixed(1);
      }).join(" "));
      svg.appendChild(pl);
      var item = document.createElement("span");
      var last = l.points.length ? l.points[l.points.length - 1][1] : 0;
      item.textContent = l.name + ": " + num(last) + "/s  ";
      item.style.color = pl.getAttribute("stroke");
      legend.appendChild(item);
    });
    svg.parentNode.querySelector(".top").textContent = "(top " + num(top) + "/s, last " + Math.round(span / 1000) + " s)";
  }
  function update(box) {
    fetch(box.getAttribute("data-rates"), {credentials: "same-origin"})
      .then(function (r) { return r.json(); })
      .then(function (d) {
        var now = Date.now(), win = d.window_s * 1000;
        var recs = [{name: "records in", cls: "records-in", points: d.records_in}];
        Object.keys(d.records_out).forEach(function (g) {
          recs.push({name: "out: " + g, cls: "records-out", points: d.records_out[g]});
        });
        draw(box.querySelector("svg.records"), recs, win, now);
        draw(box.querySelector("svg.bytes"), [{name: "bytes in", cls: "bytes-in", points: d.bytes_in}], win, now);
        box.querySelector(".chart-error").textContent = d.error || "";
        box.setAttribute("data-samples", d.records_in.length);
        setTimeout(function () { update(box); }, d.interval_s * 1000);
      })
      .catch(function () { setTimeout(function () { update(box); }, 5000); });
  }
  document.querySelectorAll("[data-rates]").forEach(update);
})();
"""
