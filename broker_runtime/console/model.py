"""What the web console shows, read from a cluster through the Kafka protocol only (pylog's client), so it reads
pylog's broker and Apache Kafka alike. Synchronous: every function takes the :class:`KafkaClient` of the
console's one worker thread (the client is not thread-safe) and returns plain frozen dataclasses that the
renderer turns into HTML. Nothing here changes the cluster (the state-changing actions' plans, :class:`ResetPlan`
and :class:`DeletePlan`, are computed here by reading; :mod:`.actions` carries them out): the requests are
Metadata, ApiVersions, DescribeCluster, DescribeConfigs (topics, and each broker's own, sent to it), DescribeLogDirs, ListOffsets, Fetch,
ListGroups, DescribeGroups, OffsetFetch, ListTransactions, DescribeTransactions and DescribeProducers.

Errors: a broker's error code raises :class:`KafkaError` (the page shows it as an error, never as an empty page);
per-item errors (a topic the principal may not describe) are kept on the item and shown beside it.

The record browser reads ONE bounded page: a single Fetch of at most ``max_bytes`` from the partition's leader
(``PartitionMaxBytes``), no wait. A filtered page (key or value substring) reads successive such Fetches from the
seek position, bounded by the bytes it scans and the matches it shows, and says where and why it stopped
(:class:`FilterScan`). Under read_uncommitted every batch is shown; a control batch is shown as its marker (COMMIT /
ABORT) and a transactional batch is marked by its transaction's outcome: the marker of the same producer later in
the page (in a filtered scan: in the same Fetch), else the aborted-transactions list of a read_committed Fetch of
the same range (Kafka's consumer's source for it), else ``open`` (its marker is not written yet, or lies past the
page).

Hanging transactions follow Kafka's ``kafka-transactions find-hanging``: a producer with an open transaction on a
partition (DescribeProducers ``CurrentTxnStartOffset`` >= 0) whose last write is older than the maximum
transaction timeout is a candidate; it hangs when no transactional id lists that producer id (ListTransactions),
the coordinator does not know the id (DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND), or the coordinator's
transaction does not include that partition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker_runtime.client import ConfigEntry, KafkaClient
from broker_runtime.errors import BrokerConnectionError, ErrorCode, KafkaError
from broker_runtime.protocol.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    ApiKey,
    IsolationLevel,
    describe_configs,
    find_coordinator,
)
from broker_runtime.protocol.records import CONTROL_ABORT, CONTROL_COMMIT, RecordBatch, read_batches
from broker_runtime.protocol.topic_partition import TopicPartition
from broker_runtime.tools.consumer_groups import decode_assignment

__all__ = [
    "DEFAULT_PAGE_BYTES",
    "DEFAULT_SCAN_BYTES",
    "MAX_FILTER_ROWS",
    "MAX_PAGE_BYTES",
    "MAX_SCAN_BYTES",
    "RESETTABLE_STATES",
    "RESET_TARGETS",
    "BrokerConfigs",
    "Cluster",
    "ConfigRow",
    "DeletePlan",
    "FilterScan",
    "GroupDetail",
    "GroupRow",
    "Listeners",
    "OpenTxn",
    "PartitionRow",
    "RecordPage",
    "RecordRow",
    "ResetPlan",
    "TopicDetail",
    "TopicRow",
    "Transactions",
    "TxnRow",
    "broker_configs",
    "cluster",
    "config_row",
    "delete_plan",
    "group",
    "group_state",
    "groups",
    "hanging",
    "matches",
    "record_page",
    "render_bytes",
    "reset_plan",
    "topic",
    "topics",
    "transactions",
]

#: The record browser's page: bytes of one Fetch (the broker returns at least one whole batch, as Kafka's does).
DEFAULT_PAGE_BYTES = 65536
MAX_PAGE_BYTES = 1048576
#: The filter's scan: bytes fetched from the seek position at most (by default; the bound a request may ask).
DEFAULT_SCAN_BYTES = 8 * 1048576
MAX_SCAN_BYTES = 64 * 1048576
#: The filter's page: matches shown at most (the next page continues after the last one).
MAX_FILTER_ROWS = 500
#: Kafka's transaction.max.timeout.ms default (15 minutes), ``kafka-transactions find-hanging``'s default bound.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900000


@dataclass(frozen=True)
class Listeners:
    """A broker's ``listeners`` and ``advertised.listeners`` (its DescribeConfigs), or why they are missing."""

    listeners: str | None
    advertised: str | None
    error: str | None = None


@dataclass(frozen=True)
class Cluster:
    cluster_id: str | None
    controller_id: int
    #: (node, host, port, rack): the endpoint of the listener the console connected through (DescribeCluster)
    brokers: list[tuple[int, str, int, str | None]]
    #: api key name -> (min, max) of the broker the console is connected to
    api_versions: list[tuple[str, int, int]]
    #: node -> its listeners (every listener: DescribeCluster names only the one the console uses)
    listeners: dict[int, Listeners] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerConfigs:
    node: int
    configs: list[ConfigRow]


@dataclass(frozen=True)
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication: int
    under_replicated: int
    error: str | None


@dataclass(frozen=True)
class PartitionRow:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start: int
    high_watermark: int
    last_stable: int
    error: str | None = None


@dataclass(frozen=True)
class ConfigRow:
    name: str
    #: None for a sensitive config (never shown) or a config without a value
    value: str | None
    sensitive: bool
    source: int


@dataclass(frozen=True)
class TopicDetail:
    name: str
    partitions: list[PartitionRow]
    configs: list[ConfigRow]
    #: why the configs are missing (e.g. TOPIC_AUTHORIZATION_FAILED), else None
    configs_error: str | None
    #: partition -> [(node, bytes on disk of its replica there)] (DescribeLogDirs; a future replica left out)
    sizes: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: why some sizes are missing (e.g. CLUSTER_AUTHORIZATION_FAILED: DescribeLogDirs needs DESCRIBE on the
    #: cluster), else None
    sizes_error: str | None = None


@dataclass(frozen=True)
class RecordRow:
    offset: int
    timestamp: int
    timestamp_type: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    producer_id: int
    transactional: bool
    #: "control:COMMIT", "control:ABORT", "aborted", "committed", "open" or "" (not transactional)
    txn: str


@dataclass(frozen=True)
class FilterScan:
    """What a filtered page scanned: offsets ``[start, stopped_at)``, ``bytes`` fetched of at most ``limit``;
    ``reason`` why it stopped: "end" (the end of what the isolation level reads), "bytes" (the scan limit:
    the rest is not searched) or "rows" (a page of matches is full)."""

    contains: str
    start: int
    stopped_at: int
    bytes: int
    limit: int
    reason: str


@dataclass(frozen=True)
class RecordPage:
    topic: str
    partition: int
    start: int
    log_start: int
    high_watermark: int
    last_stable: int
    isolation: str
    max_bytes: int
    records: list[RecordRow]
    #: the offset after the page (the next page starts there)
    next_offset: int
    #: how the start was found (e.g. "timestamp 1700000000000 -> offset 42")
    seek_note: str = ""
    #: the filter's scan, when the page is filtered
    scan: FilterScan | None = None


@dataclass(frozen=True)
class GroupRow:
    group_id: str
    protocol_type: str
    state: str


@dataclass(frozen=True)
class GroupDetail:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    #: (member id, client id, host, [(topic, partition)])
    members: list[tuple[str, str, str, list[tuple[str, int]]]]
    #: (topic, partition, committed or None, log end offset, lag or None, member id or "")
    offsets: list[tuple[str, int, int | None, int, int | None, str]]


@dataclass(frozen=True)
class TxnRow:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    start_ms: int
    partitions: list[tuple[str, int]]
    error: str | None = None


@dataclass(frozen=True)
class OpenTxn:
    """An open transaction on a partition, as the partition's leader sees it (DescribeProducers)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int
    transactional_id: str | None
    hanging: bool


@dataclass(frozen=True)
class Transactions:
    now_ms: int
    max_timeout_ms: int
    transactions: list[TxnRow]
    open_on_partitions: list[OpenTxn]
    errors: list[str] = field(default_factory=list)


# --- cluster and topics ---------------------------------------------------------------------------------------


def cluster(client: KafkaClient) -> Cluster:
    described = client.admin.describe_cluster()
    versions = client.api_versions()
    names = []
    for key, (low, high) in sorted(versions.items()):
        try:
            name = ApiKey(key).name
        except ValueError:
            name = f"API_{key}"
        names.append((name, low, high))
    brokers = sorted((b["BrokerId"], b["Host"], b["Port"], b["Rack"]) for b in described["Brokers"])
    listeners: dict[int, Listeners] = {}
    for node, *_ in brokers:
        try:
            entries = {
                e.name: e
                for e in client.admin.describe_config_entries(
                    describe_configs.RESOURCE_BROKER, str(node), node=node
                )
            }
        except (KafkaError, BrokerConnectionError) as exc:
            listeners[node] = Listeners(None, None, str(exc))
            continue
        shown = {k: config_row(e).value for k, e in entries.items()}
        listeners[node] = Listeners(shown.get("listeners"), shown.get("advertised.listeners"))
    return Cluster(described["ClusterId"], described["ControllerId"], brokers, names, listeners)


def broker_configs(client: KafkaClient, node: int) -> BrokerConfigs:
    """Every config of broker ``node`` (DescribeConfigs on its BROKER resource, sent to it); a sensitive value is
    never kept (:func:`config_row`)."""
    if node not in client.metadata([]).brokers:
        raise KafkaError(ErrorCode.BROKER_NOT_AVAILABLE, f"no broker {node} in the cluster")
    entries = client.admin.describe_config_entries(describe_configs.RESOURCE_BROKER, str(node), node=node)
    return BrokerConfigs(node, sorted((config_row(e) for e in entries), key=lambda c: c.name))


def _sizes(
    client: KafkaClient, name: str, replicas: Mapping[int, tuple[int, ...]]
) -> tuple[dict[int, list[tuple[int, int]]], str | None]:
    """partition -> [(node, size)] from DescribeLogDirs on every node holding a replica of topic ``name``."""
    by_node: dict[int, list[int]] = {}
    for partition, nodes in replicas.items():
        for node in nodes:
            by_node.setdefault(node, []).append(partition)
    sizes: dict[int, list[tuple[int, int]]] = {}
    errors: list[str] = []
    for node, partitions in sorted(by_node.items()):
        try:
            dirs = client.admin.describe_log_dirs(node, {name: partitions})
        except (KafkaError, BrokerConnectionError) as exc:
            errors.append(f"node {node}: {exc}")
            continue
        for d in dirs:
            if d["ErrorCode"]:
                errors.append(f"node {node} log dir {d['LogDir']}: {KafkaError(d['ErrorCode'])}")
                continue
            for t in d["Topics"]:
                if t["Name"] != name:
                    continue
                for p in t["Partitions"]:
                    if not p["IsFutureKey"]:
                        sizes.setdefault(p["PartitionIndex"], []).append((node, p["PartitionSize"]))
    return {p: sorted(v) for p, v in sizes.items()}, "; ".join(errors) or None


def _error_name(code: int) -> str:
    return KafkaError(code).name


def topics(client: KafkaClient) -> list[TopicRow]:
    """Every topic the principal may describe (Metadata with no topic list: the broker leaves out the others)."""
    md = client.metadata(None)
    rows = []
    for name, t in sorted(md.topics.items()):
        parts = list(t.partitions.values())
        rows.append(
            TopicRow(
                name,
                t.is_internal,
                len(parts),
                max((len(p.replicas) for p in parts), default=0),
                sum(1 for p in parts if len(p.isr) < len(p.replicas)),
                _error_name(t.error) if t.error else None,
            )
        )
    return rows


def _offsets(
    client: KafkaClient, tps: list[TopicPartition]
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], dict[TopicPartition, int]]:
    """Log start, high watermark and last stable offset of each partition (three ListOffsets)."""
    if not tps:
        return {}, {}, {}
    start = client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP))
    end = client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP))
    stable = client.list_offsets(
        dict.fromkeys(tps, LATEST_TIMESTAMP), isolation_level=IsolationLevel.READ_COMMITTED
    )
    return (
        {tp: v[0] for tp, v in start.items()},
        {tp: v[0] for tp, v in end.items()},
        {tp: v[0] for tp, v in stable.items()},
    )


def config_row(entry: ConfigEntry) -> ConfigRow:
    """A config as the console keeps it: a sensitive value is never kept, whatever the broker sent (Kafka's
    brokers send null for it)."""
    return ConfigRow(entry.name, None if entry.sensitive else entry.value, entry.sensitive, entry.source)


def topic(client: KafkaClient, name: str) -> TopicDetail:
    md = client.metadata([name])
    t = md.topics.get(name)
    if t is None or t.error:
        raise KafkaError(t.error if t else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r}")
    tps = [(name, p) for p in sorted(t.partitions)]
    start, end, stable = _offsets(client, tps)
    partitions = [
        PartitionRow(
            p.partition,
            p.leader,
            p.replicas,
            p.isr,
            start.get((name, p.partition), -1),
            end.get((name, p.partition), -1),
            stable.get((name, p.partition), -1),
            _error_name(p.error) if p.error else None,
        )
        for p in (t.partitions[i] for i in sorted(t.partitions))
    ]
    configs: list[ConfigRow] = []
    configs_error = None
    try:
        configs = [
            config_row(entry)
            for entry in client.admin.describe_config_entries(describe_configs.RESOURCE_TOPIC, name)
        ]
    except KafkaError as exc:
        configs_error = str(exc)
    sizes, sizes_error = _sizes(client, name, {p.partition: p.replicas for p in t.partitions.values()})
    return TopicDetail(
        name, partitions, sorted(configs, key=lambda c: c.name), configs_error, sizes, sizes_error
    )


# --- records --------------------------------------------------------------------------------------------------


def _batch_outcomes(
    batches: list[RecordBatch], aborted: Iterable[tuple[int, int]] | None, last_stable: int
) -> dict[int, str]:
    """base offset of each transactional data batch -> "committed", "aborted" or "open"."""
    outcome: dict[int, str] = {}
    pending: dict[int, list[int]] = {}  # producer id -> base offsets waiting for their marker
    for batch in batches:
        if batch.is_control:
            kind, _ = batch.control_record()
            verdict = "aborted" if kind == CONTROL_ABORT else "committed" if kind == CONTROL_COMMIT else ""
            for base in pending.pop(batch.producer_id, []):
                outcome[base] = verdict
        elif batch.is_transactional:
            pending.setdefault(batch.producer_id, []).append(batch.base_offset)
    # Left without a marker in the page: the aborted-transactions list says which were aborted (each entry is
    # (producer id, first offset of the aborted transaction)); a batch below the LSO otherwise committed.
    firsts: dict[int, list[int]] = {}
    for pid, first in aborted or ():
        firsts.setdefault(pid, []).append(first)
    for pid, bases in pending.items():
        for base in bases:
            if any(first <= base for first in firsts.get(pid, ())):
                outcome[base] = "aborted"
            elif base < last_stable:
                outcome[base] = "committed"
            else:
                outcome[base] = "open"
    return outcome


def _read_chunk(
    client: KafkaClient, tp: TopicPartition, start: int, max_bytes: int, read_committed: bool, stable: int
) -> tuple[list[RecordRow], int, int]:
    """One bounded Fetch from ``start``: its rows (control and transactional batches marked, see the module
    docstring), the offset after it, and the bytes it returned."""
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    answer = client.fetch(
        {tp: start},
        max_bytes=max_bytes,
        partition_max_bytes=max_bytes,
        max_wait_ms=0,
        isolation_level=isolation,
    )[tp]
    if answer.error:
        raise KafkaError(answer.error, f"fetch {tp[0]}-{tp[1]} at offset {start}")
    data = answer.records or b""
    batches = [b for b in read_batches(data, allow_partial_tail=True) if b.next_offset > start]
    aborted = answer.aborted_transactions
    if (
        not read_committed
        and any(b.is_transactional and not b.is_control for b in batches)
        and aborted is None
    ):
        # read_uncommitted answers carry no aborted-transactions list: ask for it as a read_committed consumer.
        again = client.fetch(
            {tp: start},
            max_bytes=max_bytes,
            partition_max_bytes=max_bytes,
            max_wait_ms=0,
            isolation_level=IsolationLevel.READ_COMMITTED,
        )[tp]
        aborted = again.aborted_transactions if not again.error else None
    outcomes = _batch_outcomes(batches, aborted, stable)
    rows: list[RecordRow] = []
    next_offset = start
    for batch in batches:
        next_offset = max(next_offset, batch.next_offset)
        ts_type = "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"
        if batch.is_control:
            kind, _ = batch.control_record()
            label = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT"}.get(kind, str(kind))
            rows.append(
                RecordRow(
                    batch.base_offset,
                    batch.max_timestamp,
                    ts_type,
                    None,
                    None,
                    [],
                    batch.producer_id,
                    True,
                    f"control:{label}",
                )
            )
            continue
        verdict = outcomes.get(batch.base_offset, "") if batch.is_transactional else ""
        if read_committed and verdict == "aborted":
            continue
        for record in batch:
            if record.offset < start:
                continue
            rows.append(
                RecordRow(
                    record.offset,
                    record.timestamp,
                    ts_type,
                    record.key,
                    record.value,
                    [(k, v) for k, v in record.headers],
                    batch.producer_id,
                    batch.is_transactional,
                    verdict,
                )
            )
    return rows, next_offset, len(data)


def matches(row: RecordRow, needle: bytes) -> bool:
    """The filter's rule: ``needle`` is a substring of the record's key or value bytes (a marker never matches)."""
    if row.txn.startswith("control:"):
        return False
    return (row.key is not None and needle in row.key) or (row.value is not None and needle in row.value)


def record_page(
    client: KafkaClient,
    topic_name: str,
    partition: int,
    *,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    max_bytes: int = DEFAULT_PAGE_BYTES,
    read_committed: bool = False,
    contains: str | None = None,
    scan_bytes: int = DEFAULT_SCAN_BYTES,
) -> RecordPage:
    """One page of records of a partition from ``offset`` (default: the log start), or from the first offset
    whose timestamp is at or after ``timestamp_ms`` (ListOffsets); at most ``max_bytes`` fetched.

    With ``contains`` (the filter), only records whose key or value holds it (UTF-8 bytes) are kept, and
    Fetches of ``max_bytes`` follow one another from the start until the first of: ``scan_bytes`` fetched
    (bounded by :data:`MAX_SCAN_BYTES`), :data:`MAX_FILTER_ROWS` matches, the end of what the isolation level
    may read; :attr:`RecordPage.scan` says which, and the next page starts where the scan stopped."""
    max_bytes = max(1024, min(int(max_bytes), MAX_PAGE_BYTES))
    scan_bytes = max(max_bytes, min(int(scan_bytes), MAX_SCAN_BYTES))
    tp = (topic_name, partition)
    start_map, end_map, stable_map = _offsets(client, [tp])
    log_start, high, stable = start_map[tp], end_map[tp], stable_map[tp]
    note = ""
    if timestamp_ms is not None:
        found, found_ts = client.list_offsets({tp: timestamp_ms})[tp]
        if found < 0:
            note = f"no record with a timestamp at or after {timestamp_ms}: showing the end of the log"
            offset = high
        else:
            note = f"timestamp {timestamp_ms} -> offset {found} (its record's timestamp {found_ts})"
            offset = found
    start = log_start if offset is None else offset
    if not contains:
        rows, next_offset, _ = _read_chunk(client, tp, start, max_bytes, read_committed, stable)
        scan = None
    else:
        needle = contains.encode("utf-8")
        end = stable if read_committed else high
        rows, next_offset, scanned = [], start, 0
        reason = "end"
        while next_offset < end:
            if scanned >= scan_bytes:
                reason = "bytes"
                break
            if len(rows) >= MAX_FILTER_ROWS:
                reason = "rows"
                break
            chunk, after, size = _read_chunk(
                client, tp, next_offset, min(max_bytes, scan_bytes - scanned), read_committed, stable
            )
            scanned += size
            rows += [r for r in chunk if matches(r, needle)]
            if after <= next_offset:  # nothing more to read below the end (e.g. the LSO moved): stop here
                break
            next_offset = after
        if len(rows) > MAX_FILTER_ROWS:
            next_offset = rows[MAX_FILTER_ROWS].offset
            rows = rows[:MAX_FILTER_ROWS]
            reason = "rows"
        scan = FilterScan(contains, start, next_offset, scanned, scan_bytes, reason)
    return RecordPage(
        topic_name,
        partition,
        start,
        log_start,
        high,
        stable,
        "read_committed" if read_committed else "read_uncommitted",
        max_bytes,
        rows,
        next_offset,
        note,
        scan,
    )


def render_bytes(data: bytes | None, how: str = "auto") -> tuple[str, str]:
    """``(kind, text)`` of a key, value or header: ``null``; ``json`` (pretty, when it parses as an object or
    array); ``text`` (valid UTF-8 without control characters other than whitespace); else ``hex``. ``how``
    forces ``text`` (invalid bytes replaced), ``json`` (falls back to auto when it does not parse) or ``hex``.
    The text is NOT escaped: the renderer escapes everything it writes."""
    if data is None:
        return "null", "null"
    if how == "hex":
        return "hex", data.hex(" ")
    if how == "text":
        return "text", data.decode("utf-8", errors="replace")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", data.hex(" ")
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            return "json", json.dumps(json.loads(stripped), indent=2, ensure_ascii=False)
        except ValueError:
            pass
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):
        return "hex", data.hex(" ")
    return "text", text


# --- groups ---------------------------------------------------------------------------------------------------


def groups(client: KafkaClient) -> list[GroupRow]:
    return [
        GroupRow(g["GroupId"], g.get("ProtocolType") or "", g.get("GroupState") or "")
        for g in client.groups.list_groups()
    ]


def group(client: KafkaClient, group_id: str) -> GroupDetail:
    described = client.groups.describe_group(group_id)
    committed = client.groups.committed_offsets(group_id)
    members = []
    owners: dict[TopicPartition, str] = {}
    for m in described["Members"]:
        assigned = decode_assignment(m["MemberAssignment"]) if described["ProtocolType"] == "consumer" else []
        members.append((m["MemberId"], m["ClientId"], m["ClientHost"], assigned))
        for tp in assigned:
            owners[tp] = m["MemberId"]
    tps = sorted(set(committed) | set(owners))
    ends = client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)) if tps else {}
    offsets = []
    for tp in tps:
        end = ends[tp][0]
        current = committed.get(tp)
        offsets.append(
            (
                tp[0],
                tp[1],
                current,
                end,
                None if current is None else max(end - current, 0),
                owners.get(tp, ""),
            )
        )
    return GroupDetail(
        group_id,
        described["GroupState"],
        described["ProtocolType"],
        described["ProtocolData"],
        members,
        offsets,
    )


# --- transactions ---------------------------------------------------------------------------------------------


def _list_transactions(client: KafkaClient, errors: list[str]) -> dict[str, int]:
    """transactional id -> producer id, from every broker (each lists the ids it coordinates)."""
    found: dict[str, int] = {}
    for node in sorted(client.metadata([]).brokers):
        _, body = client.connection(node).request(
            ApiKey.LIST_TRANSACTIONS, {"StateFilters": [], "ProducerIdFilters": [], "DurationFilter": -1}
        )
        if body["ErrorCode"]:
            errors.append(f"list transactions of node {node}: {KafkaError(body['ErrorCode'])}")
            continue
        for t in body["TransactionStates"]:
            found[t["TransactionalId"]] = t["ProducerId"]
    return found


def _describe_transactions(client: KafkaClient, ids: Iterable[str]) -> list[TxnRow]:
    by_node: dict[int, list[str]] = {}
    rows: list[TxnRow] = []
    for tid in ids:
        try:
            node = client.find_coordinator(tid, find_coordinator.KEY_TYPE_TRANSACTION, f"transaction {tid!r}")
        except KafkaError as exc:
            rows.append(TxnRow(tid, -1, -1, "", 0, -1, [], str(exc)))
            continue
        by_node.setdefault(node, []).append(tid)
    for node, wanted in sorted(by_node.items()):
        _, body = client.connection(node).request(ApiKey.DESCRIBE_TRANSACTIONS, {"TransactionalIds": wanted})
        for t in body["TransactionStates"]:
            rows.append(
                TxnRow(
                    t["TransactionalId"],
                    t["ProducerId"],
                    t["ProducerEpoch"],
                    t["TransactionState"],
                    t["TransactionTimeoutMs"],
                    t["TransactionStartTimeMs"],
                    sorted((x["Topic"], p) for x in t["Topics"] for p in x["Partitions"]),
                    str(KafkaError(t["ErrorCode"])) if t["ErrorCode"] else None,
                )
            )
    return sorted(rows, key=lambda r: r.transactional_id)


def hanging(
    open_txn: tuple[TopicPartition, Mapping[str, Any]],
    now_ms: int,
    max_timeout_ms: int,
    ids_by_producer: Mapping[int, str],
    described: Mapping[str, TxnRow],
) -> bool:
    """Kafka's ``find-hanging`` rule for one open transaction on one partition (see the module docstring)."""
    tp, producer = open_txn
    if now_ms - producer["LastTimestamp"] <= max_timeout_ms:
        return False
    tid = ids_by_producer.get(producer["ProducerId"])
    if tid is None:
        return True
    txn = described.get(tid)
    if txn is None or txn.error is not None:
        return True
    return tuple(tp) not in {tuple(p) for p in txn.partitions}


def transactions(
    client: KafkaClient, *, max_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS
) -> Transactions:
    """The coordinators' transactions, and every open transaction the partition leaders hold, with the
    hanging ones flagged (DescribeProducers on every partition the principal may describe)."""
    errors: list[str] = []
    listed = _list_transactions(client, errors)
    described = _describe_transactions(client, sorted(listed))
    now_ms = int(time.time() * 1000)
    md = client.metadata(None)
    tps = [
        (name, p)
        for name, t in sorted(md.topics.items())
        if not t.error and not t.is_internal
        for p in sorted(t.partitions)
    ]
    try:
        by_partition = client.admin.describe_producers(tps) if tps else {}
    except KafkaError:
        # One partition's error fails the whole call: ask partition by partition to name the ones refused.
        by_partition = {}
        for tp in tps:
            try:
                by_partition.update(client.admin.describe_producers([tp]))
            except KafkaError as exc:
                errors.append(f"describe producers of {tp[0]}-{tp[1]}: {exc}")
    open_found = [
        (tp, p)
        for tp, producers in sorted(by_partition.items())
        for p in producers
        if p["CurrentTxnStartOffset"] >= 0
    ]
    ids_by_producer = {pid: tid for tid, pid in listed.items()}
    by_id = {t.transactional_id: t for t in described}
    opens = [
        OpenTxn(
            tp[0],
            tp[1],
            p["ProducerId"],
            p["ProducerEpoch"],
            p["CurrentTxnStartOffset"],
            p["LastTimestamp"],
            ids_by_producer.get(p["ProducerId"]),
            hanging((tp, p), now_ms, max_timeout_ms, ids_by_producer, by_id),
        )
        for tp, p in open_found
    ]
    return Transactions(now_ms, max_timeout_ms, described, opens, errors)


# --- the plans of the state-changing actions (read only: what an action would do; console/actions.py does it) --

#: The group states in which ``kafka-consumer-groups --reset-offsets`` resets (a group without active members);
#: "Dead" is also how a group that does not exist yet is described.
RESETTABLE_STATES = ("Empty", "Dead")
RESET_TARGETS = ("earliest", "latest", "timestamp", "offset")


@dataclass(frozen=True)
class ResetPlan:
    """A reset of ``group``'s committed offsets for every partition of ``topic``, as ``kafka-consumer-groups
    --reset-offsets --topic T --to-...`` computes it. ``rows``: (partition, committed offset or None, new offset,
    note); a note says when the wanted offset was clamped (``--to-offset`` outside [log start, end]) or when no
    record is at or after the timestamp (the end is taken)."""

    group: str
    state: str
    topic: str
    target: str
    value: int | None
    rows: list[tuple[int, int | None, int, str]]


@dataclass(frozen=True)
class DeletePlan:
    """DeleteRecords of ``topic``-``partition`` before ``before`` (-1: the high watermark, Kafka's
    ``kafka-delete-records`` convention): the log start and high watermark now, and the offsets that go."""

    topic: str
    partition: int
    before: int
    log_start: int
    high_watermark: int

    @property
    def new_log_start(self) -> int:
        return self.high_watermark if self.before == -1 else self.before

    @property
    def deleted(self) -> tuple[int, int]:
        """The offsets ``[first, end)`` that go (an empty range when nothing does; a compacted log holds fewer
        records than the range)."""
        end = min(self.new_log_start, self.high_watermark)
        return self.log_start, max(end, self.log_start)


def _partitions_of(client: KafkaClient, topic: str) -> list[TopicPartition]:
    found = client.metadata([topic]).topics.get(topic)
    if found is None:
        raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r}")
    if found.error:
        raise KafkaError(found.error, f"topic {topic!r}")
    return [(topic, p) for p in sorted(found.partitions)]


def group_state(client: KafkaClient, group_id: str) -> str:
    """The group's state (DescribeGroups); "Dead" for a group the coordinator does not know (GROUP_ID_NOT_FOUND,
    as Kafka 4 answers it), as Kafka's admin client describes it."""
    try:
        return str(client.groups.describe_group(group_id)["GroupState"])
    except KafkaError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            return "Dead"
        raise


def reset_plan(client: KafkaClient, group_id: str, topic: str, target: str, value: int | None) -> ResetPlan:
    """What resetting ``group_id``'s offsets of ``topic`` to ``target`` (earliest, latest, timestamp ``value``
    ms, offset ``value``) would commit; see :class:`ResetPlan`. Reads only."""
    state = group_state(client, group_id)
    tps = _partitions_of(client, topic)
    committed = client.groups.committed_offsets(group_id)
    earliest = {tp: o for tp, (o, _) in client.list_offsets(dict.fromkeys(tps, EARLIEST_TIMESTAMP)).items()}
    latest = {tp: o for tp, (o, _) in client.list_offsets(dict.fromkeys(tps, LATEST_TIMESTAMP)).items()}
    rows: list[tuple[int, int | None, int, str]] = []
    found = (
        client.list_offsets(dict.fromkeys(tps, value)) if target == "timestamp" and value is not None else {}
    )
    for tp in tps:
        note = ""
        if target == "earliest":
            new = earliest[tp]
        elif target == "latest":
            new = latest[tp]
        elif target == "timestamp":
            new = found[tp][0]
            if new < 0:
                new, note = latest[tp], "no record at or after the time: the end"
        else:
            assert value is not None
            new = min(max(value, earliest[tp]), latest[tp])
            if new != value:
                side = "lower than the earliest" if value < earliest[tp] else "higher than the latest"
                note = f"{value} is {side} offset: set to {new}"
        rows.append((tp[1], committed.get(tp), new, note))
    return ResetPlan(group_id, state, topic, target, value, rows)


def delete_plan(client: KafkaClient, topic: str, partition: int, before: int) -> DeletePlan:
    """What DeleteRecords of ``topic``-``partition`` before ``before`` would delete; reads only."""
    tp = (topic, partition)
    if tp not in _partitions_of(client, topic):
        raise KafkaError(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic!r} has no partition {partition}"
        )
    start = client.list_offsets({tp: EARLIEST_TIMESTAMP})[tp][0]
    end = client.list_offsets({tp: LATEST_TIMESTAMP})[tp][0]
    return DeletePlan(topic, partition, before, start, end)
