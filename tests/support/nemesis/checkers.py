"""What must hold after a nemesis run, once the cluster is healed and the clients stopped. Each checker returns
the failures it found as sentences (empty: it holds); :mod:`.runner` runs them all and fails with every sentence.

=========================  ==================================================================================
:func:`acknowledged`       every record the idempotent producer saw acknowledged is in the log exactly once, at
                           the offset its acknowledgement named; no value twice; each partition's values
                           increase (the producer's order per partition)
:func:`transactions`       a read_committed reader sees every committed transaction whole, no record of an
                           aborted one, every transaction of unknown outcome whole or not at all, each record
                           once, and per partition the producer's order
:func:`stable`             no hanging transaction: each partition's last stable offset reaches its high
                           watermark once the producers stopped, within a bound
:func:`group_offsets`      the group member's successful commits never go backwards per partition, and the
                           offset the group has committed at the end is not below its last successful commit
:func:`replicas`           every replica of a partition holds the same bytes up to the high watermark, batch by
                           batch, read from the segment files and decoded (CRC-32C checked)
:func:`log_starts`         no segment deleted: every replica of a partition still starts at offset 0 (each topic's
                           ``retention.ms`` is longer than a run, so only a clock read wrongly could delete)
:func:`time_indexes`       every replica's time index increases strictly in timestamp, never back in offset, and
                           each entry ``(t, o)`` is its segment's largest timestamp up to offset ``o``, reached at
                           the batch ending at ``o`` (Kafka's rule: a clock stepped back writes no smaller entry)
:func:`offsets_for_times`  ListOffsets by timestamp answers, for timestamps taken from the log (those written after
                           a clock stepped back among them), the first offset whose record is at or after it, and
                           that record's timestamp; past the largest, no offset
:func:`client_errors`      no fatal client error (none of the clients is ever fenced, so Kafka would give none,
                           but for the one a workload names ``kafka_too``: see :class:`.workload.AddsSeen`),
                           no delivery failure of an acks=all record, nothing left undelivered, no workload died
=========================  ==================================================================================

The file checks read node 0's files as the reference where one is needed (:func:`replicas` has checked that the
others hold the same bytes up to the high watermark).

Reading uses librdkafka's consumer (the same client as the workloads) with ``enable.partition.eof``: a partition
is read once it reported its end (the high watermark for read_uncommitted, the last stable offset for
read_committed). Offsets come from pylog's :class:`~broker_runtime.client.KafkaClient` (ListOffsets to each
leader). Replica files are read-only.

Threading: the runner's thread; nothing here runs concurrently with the workloads.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from broker_runtime.client import KafkaClient
from broker_runtime.launch import BrokerCluster
from broker_runtime.protocol.batch_header import iter_batch_spans
from broker_runtime.protocol.messages import LATEST_TIMESTAMP
from broker_runtime.protocol.record_codec.decode import decode_batches
from broker_runtime.storage.offset_index import OFFSET_INDEX_ENTRY
from broker_runtime.storage.time_index import TIME_INDEX_ENTRY
from tests.support.nemesis.workload import LIBRDKAFKA_LOG, GroupMember, Idempotent, Transactional

__all__ = [
    "Read",
    "acknowledged",
    "client_errors",
    "group_offsets",
    "log_starts",
    "log_timestamps",
    "offsets_for_times",
    "read",
    "replicas",
    "stable",
    "steps_back",
    "time_indexes",
    "transactions",
]

#: partition -> [(offset, value)] in log order
Read = dict[int, list[tuple[int, bytes]]]

READ_COMMITTED, READ_UNCOMMITTED = 1, 0


def read(bootstrap: str, topic: str, partitions: int, isolation: str, timeout_s: float = 30) -> Read:
    """Every record of ``topic`` from offset 0 to each partition's end, as ``isolation`` sees it."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "nemesis-reader",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "logger": LIBRDKAFKA_LOG,
        }
    )
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    found: Read = {p: [] for p in range(partitions)}
    at_end: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"reading {topic} ({isolation}): partitions {sorted(set(range(partitions)) - at_end)} not "
                    f"read to their end within {timeout_s:g} s"
                )
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise AssertionError(f"reading {topic} ({isolation}): {err}")
            found[msg.partition()].append((msg.offset(), msg.value()))
    finally:
        consumer.close()
    return found


def acknowledged(workload: Idempotent, log: Read) -> list[str]:
    failures = []
    where: dict[int, tuple[int, int]] = {}
    counts: Counter[int] = Counter()
    for partition, records in log.items():
        numbers = [int(value) for _, value in records]
        counts.update(numbers)
        where.update((int(value), (partition, offset)) for offset, value in records)
        backwards = [(a, b) for a, b in zip(numbers, numbers[1:], strict=False) if b <= a]
        if backwards:
            failures.append(f"idempotent: partition {partition} out of producer order at {backwards[:3]}")
    twice = sorted(n for n, c in counts.items() if c > 1)
    if twice:
        failures.append(f"idempotent: {len(twice)} record(s) in the log more than once, e.g. {twice[:5]}")
    lost = sorted(set(workload.acked) - set(counts))
    if lost:
        failures.append(
            f"idempotent: {len(lost)} of {len(workload.acked)} acknowledged record(s) lost, e.g. "
            f"{[(n, workload.acked[n]) for n in lost[:5]]} (number, (partition, acknowledged offset))"
        )
    moved = sorted(n for n, at in workload.acked.items() if n in where and where[n] != at)
    if moved:
        failures.append(
            f"idempotent: {len(moved)} record(s) not at the offset their acknowledgement named, e.g. "
            f"{[(n, workload.acked[n], where[n]) for n in moved[:5]]} (number, acknowledged, found)"
        )
    return failures


def transactions(workload: Transactional, log: Read) -> list[str]:
    failures = []
    seen: Counter[bytes] = Counter(value for records in log.values() for _, value in records)
    twice = sorted(v for v, c in seen.items() if c > 1)
    if twice:
        failures.append(f"transactions: {len(twice)} record(s) seen more than once, e.g. {twice[:5]}")
    known = {value for records, _ in workload.transactions.values() for _, value in records}
    stray = sorted(set(seen) - known)
    if stray:
        failures.append(f"transactions: {len(stray)} record(s) nobody produced, e.g. {stray[:5]}")
    for txn, (records, outcome) in sorted(workload.transactions.items()):
        values = [value for _, value in records]
        visible = [v for v in values if v in seen]
        if outcome == "committed" and len(visible) < len(values):
            failures.append(
                f"transactions: committed transaction {txn} partly or not visible: {visible} of {values}"
            )
        elif outcome == "aborted" and visible:
            failures.append(f"transactions: aborted transaction {txn} visible to read_committed: {visible}")
        elif outcome == "unknown" and visible and len(visible) < len(values):
            failures.append(
                f"transactions: transaction {txn} (outcome unknown) half visible: {visible} of {values}"
            )
    for partition, records in log.items():
        keys = [tuple(int(x) for x in value.split(b":")) for _, value in records]
        backwards = [(a, b) for a, b in zip(keys, keys[1:], strict=False) if b <= a]
        if backwards:
            failures.append(f"transactions: partition {partition} out of producer order at {backwards[:3]}")
    return failures


def stable(bootstrap: str, topic: str, partitions: int, bound_s: float) -> list[str]:
    """Wait up to ``bound_s`` for every partition's last stable offset to reach its high watermark."""
    wanted = {(topic, p): LATEST_TIMESTAMP for p in range(partitions)}
    deadline = time.monotonic() + bound_s
    with KafkaClient(bootstrap, request_timeout_ms=5000, retry_timeout_ms=20000) as client:
        while True:
            hw = client.list_offsets(wanted, isolation_level=READ_UNCOMMITTED)
            lso = client.list_offsets(wanted, isolation_level=READ_COMMITTED)
            open_parts = {tp[1]: (lso[tp][0], hw[tp][0]) for tp in wanted if lso[tp][0] != hw[tp][0]}
            if not open_parts:
                return []
            if time.monotonic() > deadline:
                return [
                    f"hanging transaction: {topic} partitions (last stable offset, high watermark) {open_parts} "
                    f"{bound_s:g} s after the producers stopped"
                ]
            time.sleep(0.1)


def group_offsets(member: GroupMember, committed_now: dict[int, int]) -> list[str]:
    failures = []
    last: dict[int, int] = {}
    for partition, offset in member.commits:
        if offset < last.get(partition, -1):
            failures.append(
                f"group: partition {partition} committed offset went back from {last[partition]} to {offset} "
                f"(rebalances seen: {member.rebalances[-5:]})"
            )
        last[partition] = max(offset, last.get(partition, -1))
    for partition, offset in sorted(last.items()):
        if committed_now.get(partition, -1) < offset:
            failures.append(
                f"group: partition {partition} has committed offset {committed_now.get(partition)} after healing, "
                f"below the {offset} the member was answered for (a commit lost)"
            )
    return failures


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "logger": LIBRDKAFKA_LOG,
        }
    )
    try:
        answer = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return {tp.partition: tp.offset for tp in answer}


def replicas(cluster: BrokerCluster, topics: Iterable[tuple[str, int]]) -> list[str]:
    failures = []
    base = Path(cluster.data_dir) / "kafka-logs"
    with KafkaClient(cluster.bootstrap, request_timeout_ms=5000, retry_timeout_ms=20000) as client:
        for topic, partitions in topics:
            ends = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in range(partitions)})
            for p in range(partitions):
                hw = ends[(topic, p)][0]
                copies = {}
                for node in cluster.nodes:
                    batches = _batches(base / f"node-{node.node_id}" / f"{topic}-{p}", hw)
                    copies[node.node_id] = batches
                    try:
                        decode_batches(b"".join(batches), include_control=True, allow_partial_tail=False)
                    except Exception as exc:
                        failures.append(
                            f"replicas: {topic}-{p} on node {node.node_id} does not decode: {exc}"
                        )
                reference = copies[cluster.nodes[0].node_id]
                for node_id, batches in copies.items():
                    if batches != reference:
                        first = next(
                            (i for i, (a, b) in enumerate(zip(batches, reference, strict=False)) if a != b),
                            min(len(batches), len(reference)),
                        )
                        failures.append(
                            f"replicas: {topic}-{p} differs below the high watermark {hw} between node "
                            f"{cluster.nodes[0].node_id} ({len(reference)} batches) and node {node_id} "
                            f"({len(batches)} batches), first at batch {first}"
                        )
    return failures


def _batches(directory: Path, high_watermark: int) -> list[bytes]:
    found = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for pos, header in iter_batch_spans(data):
            if header.next_offset <= high_watermark:
                found.append(bytes(data[pos : pos + header.size]))
    return found


def _replica_dirs(cluster: BrokerCluster, topic: str, partition: int) -> list[tuple[int, Path]]:
    base = Path(cluster.data_dir) / "kafka-logs"
    return [(node.node_id, base / f"node-{node.node_id}" / f"{topic}-{partition}") for node in cluster.nodes]


def log_starts(cluster: BrokerCluster, topics: Iterable[tuple[str, int]]) -> list[str]:
    failures = []
    for topic, partitions in topics:
        for p in range(partitions):
            for node_id, directory in _replica_dirs(cluster, topic, p):
                bases = sorted(int(path.stem) for path in directory.glob("*.log"))
                if bases and bases[0] != 0:
                    failures.append(
                        f"log start: {topic}-{p} on node {node_id} starts at offset {bases[0]}: segments were "
                        f"deleted although no record is older than retention.ms"
                    )
    return failures


def _time_index_entries(path: Path) -> list[tuple[int, int]]:
    """(timestamp, relative offset) of each entry, up to the zero tail of an active segment's preallocated file
    (read in chunks: that file is ``segment.index.bytes`` long, mostly zeros)."""
    entries: list[tuple[int, int]] = []
    size = TIME_INDEX_ENTRY.size
    with path.open("rb") as file:
        while chunk := file.read(size * 4096):
            for pos in range(0, len(chunk) - len(chunk) % size, size):
                entry = TIME_INDEX_ENTRY.unpack_from(chunk, pos)
                if entry == (0, 0):  # no entry has timestamp 0 (1970)
                    return entries
                entries.append(entry)
    return entries


def _time_index(path: Path, where: str, interval_bytes: int) -> list[str]:
    """The entries of one ``.timeindex`` against its ``.log``; and that there are entries where the index rule
    (:mod:`broker_runtime.storage.segment`, Kafka's ``LogSegment.append``) must have written one: an entry goes
    in before a batch once more than ``index.interval.bytes`` were appended since the last one, so a segment
    holding more than that before its last batch has one. A truncation (a follower cutting its log back) may
    remove the first entry and restarts the count, so the bound allows for one: more than twice the interval
    plus the largest batch. And an entry of the offset index (written with each time-index entry; a truncation
    cuts both by offset) means the time index has one."""
    base = int(path.stem)
    log = path.with_suffix(".log").read_bytes()
    #: last offset of each batch -> (its max timestamp, the largest batch timestamp of the segment up to it)
    batches: dict[int, tuple[int, int]] = {}
    largest = -1
    sizes: list[int] = []
    for _, header in iter_batch_spans(log):
        largest = max(largest, header.max_timestamp)
        batches[header.last_offset] = (header.max_timestamp, largest)
        sizes.append(header.size)
    failures = []
    entries = _time_index_entries(path)
    if not entries and sizes:
        before_last = sum(sizes) - sizes[-1]
        offset_index = path.with_suffix(".index")
        with offset_index.open("rb") if offset_index.exists() else contextlib.nullcontext(None) as file:
            first = file.read(OFFSET_INDEX_ENTRY.size) if file else b""
        # an entry's position is never 0 (no entry before the first batch); the preallocated tail is zeros
        indexed = len(first) == OFFSET_INDEX_ENTRY.size and OFFSET_INDEX_ENTRY.unpack(first)[1] != 0
        if before_last > 2 * interval_bytes + max(sizes) or indexed:
            failures.append(
                f"time index: {where} {path.name} has no entry, yet its log holds {len(sizes)} batches, "
                f"{before_last} bytes before the last (index.interval.bytes {interval_bytes})"
                + (" and its offset index has an entry" if indexed else "")
                + ": the broker did not write its time index"
            )
    previous = (-1, -1)
    for ts, rel in entries:
        offset = base + rel
        if ts <= previous[0] or offset < previous[1]:
            failures.append(
                f"time index: {where} {path.name} entry ({ts}, {offset}) after ({previous[0]}, {previous[1]}): "
                "timestamps must increase and offsets never go back"
            )
        elif offset not in batches:
            failures.append(
                f"time index: {where} {path.name} entry ({ts}, {offset}): no batch ends at {offset}"
            )
        elif batches[offset] != (ts, ts):
            batch_ts, up_to = batches[offset]
            failures.append(
                f"time index: {where} {path.name} entry ({ts}, {offset}) is not the largest timestamp so far: the "
                f"batch ending there has {batch_ts}, the segment's largest up to it is {up_to}"
            )
        previous = (ts, offset)
    return failures[:3]


def time_indexes(cluster: BrokerCluster, topics: Iterable[tuple[str, int]]) -> list[str]:
    """Every replica's time index (see :func:`_time_index`); a segment whose ``.timeindex`` is missing counts as
    one without entries. Each topic's ``index.interval.bytes`` is asked of the cluster (DescribeConfigs)."""
    topics = list(topics)
    with KafkaClient(cluster.bootstrap, request_timeout_ms=5000, retry_timeout_ms=20000) as client:
        described = client.admin.describe_configs({topic: ["index.interval.bytes"] for topic, _ in topics})
    failures = []
    for topic, partitions in topics:
        interval = int(described[topic]["index.interval.bytes"] or 4096)
        for p in range(partitions):
            for node_id, directory in _replica_dirs(cluster, topic, p):
                for log in sorted(directory.glob("*.log")):
                    path = log.with_suffix(".timeindex")
                    where = f"{topic}-{p} on node {node_id}"
                    if path.exists():
                        failures += _time_index(path, where, interval)
                    elif log.stat().st_size > 2 * interval:
                        failures.append(f"time index: {where} {log.name} has no {path.name} beside it")
    return failures


#: How many timestamps per partition :func:`offsets_for_times` asks for (the last one past the largest).
LOOKUPS = 12


def _lookup_targets(timestamps: list[int]) -> list[int]:
    """Timestamps to look up: each first record after the log's timestamps went back (a clock stepped back on
    its leader, or a leader with a slower clock), then timestamps spread over the log, then one past the end."""
    stepped_back: list[tuple[int, int]] = []
    largest = -1
    for ts in timestamps:
        if ts < largest and (not stepped_back or stepped_back[-1][1] != largest):
            stepped_back.append((ts, largest))
        largest = max(largest, ts)
    targets = [ts for ts, _ in stepped_back[: LOOKUPS // 2]]
    ordered = sorted(set(timestamps))
    spread = LOOKUPS - 1 - len(targets)
    targets += (
        [ordered[i * (len(ordered) - 1) // max(1, spread - 1)] for i in range(spread)] if ordered else []
    )
    return [*targets, largest + 1]


def log_timestamps(
    cluster: BrokerCluster, topic: str, partition: int, high_watermark: int
) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of node 0's replica below ``high_watermark``, in log order."""
    _, directory = _replica_dirs(cluster, topic, partition)[0]
    records = decode_batches(b"".join(_batches(directory, high_watermark)), allow_partial_tail=False)
    return list(
        zip(records.column("offset").to_pylist(), records.column("timestamp").to_pylist(), strict=True)
    )


def steps_back(cluster: BrokerCluster, topic: str, partitions: int, at_least_ms: int = 1000) -> list[int]:
    """Each place where a record's timestamp is ``at_least_ms`` or more below the one before it (a leader's
    clock stepped back, or a leader with a slower clock took over): by how much, ms (negative)."""
    steps = []
    with KafkaClient(cluster.bootstrap, request_timeout_ms=5000, retry_timeout_ms=20000) as client:
        ends = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in range(partitions)})
    for p in range(partitions):
        timestamps = [ts for _, ts in log_timestamps(cluster, topic, p, ends[(topic, p)][0])]
        steps += [b - a for a, b in zip(timestamps, timestamps[1:], strict=False) if a - b >= at_least_ms]
    return steps


def offsets_for_times(cluster: BrokerCluster, topic: str, partitions: int) -> list[str]:
    failures = []
    with KafkaClient(cluster.bootstrap, request_timeout_ms=5000, retry_timeout_ms=20000) as client:
        ends = client.list_offsets({(topic, p): LATEST_TIMESTAMP for p in range(partitions)})
        expected: dict[int, list[tuple[int, tuple[int, int]]]] = {}
        for p in range(partitions):
            records = log_timestamps(cluster, topic, p, ends[(topic, p)][0])
            answers = []
            for target in _lookup_targets([ts for _, ts in records]):
                found = next((record for record in records if record[1] >= target), (-1, -1))
                answers.append((target, found))
            expected[p] = answers
        for i in range(max((len(a) for a in expected.values()), default=0)):
            wanted = {(topic, p): answers[i][0] for p, answers in expected.items() if i < len(answers)}
            got = client.list_offsets(wanted)
            for (_, p), target in wanted.items():
                want = expected[p][i][1]
                if tuple(got[(topic, p)]) != want:
                    failures.append(
                        f"offsets for times: {topic}-{p} timestamp {target} answered (offset, timestamp) "
                        f"{tuple(got[(topic, p)])}, the log says {want}"
                    )
    return failures


def client_errors(workloads: Iterable[Idempotent | Transactional | GroupMember]) -> list[str]:
    failures = []
    for workload in workloads:
        if workload.crashed is not None:
            failures.append(f"{workload.name_prefix}: the workload died: {workload.crashed!r}")
        fatal = [e for e in workload.errors if e.fatal and not e.kafka_too]
        if fatal:
            seen = (
                "\n  what the client saw of it:\n    " + fatal[0].seen.replace("\n", "\n    ")
                if fatal[0].seen
                else ""
            )
            failures.append(f"{workload.name_prefix}: {len(fatal)} fatal error(s), first {fatal[0]}{seen}")
        if isinstance(workload, Idempotent):
            undelivered = [e for e in workload.errors if e.where.startswith("delivery")]
            if undelivered:
                failures.append(
                    f"idempotent: {len(undelivered)} acks=all record(s) failed, first {undelivered[0]}"
                )
            if workload.undrained:
                failures.append(
                    f"idempotent: {workload.undrained} record(s) still unanswered after the drain"
                )
    return failures


def error_counts(workloads: Iterable[Idempotent | Transactional | GroupMember]) -> dict[str, int]:
    """Every client error by ``client:name`` (what the run's summary prints)."""
    counts: Counter[str] = Counter()
    for workload in workloads:
        counts.update(
            f"{e.client}:{e.name}{' (as with Kafka)' if e.kafka_too else ''}" for e in workload.errors
        )
    return dict(sorted(counts.items()))
