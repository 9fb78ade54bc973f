"""Files both ways: Apache Kafka's ``DumpLogSegments`` over the files pylog wrote, and pylog's readers over the
files Apache Kafka wrote.

Kafka over pylog: a pylog broker (a child process) takes an idempotent zstd producer writing a topic that rolls
segments (producer snapshots at each roll), a transactional producer committing and aborting on another topic
(control records, a ``.txnindex``, ``__transaction_state``) and a consumer group committing its offsets
(``__consumer_offsets``); then it is stopped cleanly, so that every index is final (trimmed), as Kafka's tool
expects of a segment that is not being appended to. ``DumpLogSegments`` (``kafka-dump-log``'s main class) runs
three times, at once: ``--deep-iteration --print-data-log`` over the data partitions' files (every kind: ``.log``,
``.index``, ``.timeindex``, ``.txnindex``, ``.snapshot``); ``--offsets-decoder --verify-index-only`` over
``__consumer_offsets`` and every index; ``--transaction-log-decoder --index-sanity-check`` over
``__transaction_state`` and every index. What they print is compared with what was produced, with what pylog
answered over the wire before the stop (committed offsets, DescribeProducers) and with what Kafka's rules make of
the dumped batches (a ``.txnindex`` entry, a producer snapshot); the tool's complaints (index mismatches,
non-consecutive offsets, out-of-order timestamps: on stderr, with exit status 0) must be absent.

pylog over Kafka: the session's Apache Kafka node (``apache_kafka``) takes a gzip batch with old timestamps (the
next append rolls the segment: Kafka's ``segment.ms`` counts from the segment's first timestamp), an idempotent
lz4 producer and a transactional producer that aborts and then commits. The partition's files are read IN PLACE,
while the node runs: Kafka writes a batch to the ``.log`` (a ``FileChannel`` write, in the page cache that every
reader of the file shares) before it answers the produce, nothing else writes this topic, the rolled segment and
its indexes are final, and pylog's readers take only the trusted prefix of the active segment's preallocated,
memory-mapped indexes (see ``broker_runtime/storage/index_file.py``). A copy after a clean stop would cost a
node of its own (about 8 s to start here) and prove no more. pylog's ``dump-log`` (the CLI) and the connector's
direct scan (``pylog.transport=local`` over ``pylog.logDirs``) are compared record for record with what Kafka's
own consumer (``kafka-console-consumer``) reads, in each isolation level.

Threading: pytest's main thread; the Kafka tool runs of a fixture are started together from a thread pool.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from broker_runtime.client import KafkaClient, NewTopic
from broker_runtime.launch import broker_log_dir, broker_process
from broker_runtime.storage.offset_index import OffsetIndex
from broker_runtime.storage.time_index import TimeIndex
from tests.support.apache_kafka import KafkaCluster, run_tool

pytestmark = [pytest.mark.timeout(180)]

PEER = "kafka-files"
#: Lines Kafka's DumpLogSegments prints on stderr when an index or a log does not hold up (it exits 0 anyway).
TOOL_COMPLAINTS = re.compile(
    r"Mismatches in|Non-consecutive offsets|timestamp mismatch|out of order timestamp|not found in the log"
    r"|failed sanity check|Exception|Error at offset|Unknown record type|Ignoring unknown file"
)


# ------------------------------------------------------------------------------------------ parsing the dumps


def _sections(stdout: str) -> dict[str, list[str]]:
    """Path -> the lines DumpLogSegments (or pylog's dump-log) printed for it (after its ``Dumping PATH``)."""
    sections: dict[str, list[str]] = {}
    current: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("Dumping "):
            current = sections.setdefault(line.removeprefix("Dumping ").strip(), [])
        else:
            current.append(line)
    return sections


def _fields(line: str) -> dict[str, str]:
    """``name: value`` pairs of one line, up to a ``key:`` (the record's data, which may hold spaces)."""
    head = line.split(" key: ", 1)[0]
    return dict(re.findall(r"(\w+): (\S+)", head))


@dataclass
class Dumped:
    """One ``.log`` as a dump printed it: its batches (field dicts, ``records`` added) in file order."""

    batches: list[dict[str, Any]] = field(default_factory=list)
    trailing: list[str] = field(default_factory=list)

    @property
    def records(self) -> list[dict[str, Any]]:
        return [r for b in self.batches for r in b["records"]]


def _parse_log(lines: list[str]) -> Dumped:
    dumped = Dumped()
    for line in lines:
        if line.startswith("baseOffset:"):
            dumped.batches.append({**_fields(line), "records": []})
        elif line.startswith("| offset:"):
            record: dict[str, Any] = _fields(line)
            if " key: " in line:
                data = line.split(" key: ", 1)[1]
                record["key"], _, record["payload"] = data.partition(" payload: ")
            dumped.batches[-1]["records"].append(record)
        elif line.startswith("Found ") and "invalid bytes" in line:
            dumped.trailing.append(line)
    return dumped


def _dump(*args: str) -> subprocess.CompletedProcess[str]:
    return run_tool("kafka-dump-log", *args)


def _complaints(stderr: str) -> list[str]:
    """The tool's complaints on stderr, less its own false alarm: each file's offsets are checked from -1, so a
    segment whose base offset is not 0 is always reported as "-1 is followed by BASE" (Kafka's segments too)."""
    lines, out = stderr.splitlines(), []
    for n, line in enumerate(lines):
        if line.startswith("Non-consecutive offsets in "):
            base = int(Path(line.removeprefix("Non-consecutive offsets in ")).stem)
            pairs = []
            for pair in lines[n + 1 :]:
                if not pair.startswith("  "):
                    break
                pairs.append(pair)
            if pairs == [f"  -1 is followed by {base}"]:
                continue
        if TOOL_COMPLAINTS.search(line):
            out.append(line)
    return out


# ------------------------------------------------------------------------------- pylog's files, Kafka's tool


@dataclass
class PylogFiles:
    """What was written to the pylog broker, what it answered, and the Kafka tool's dumps of its files."""

    logs: Path
    data_topic: str
    txn_topic: str
    group: str
    transactional_id: str
    #: (offset, timestamp, key, value, header keys) of every record produced to the data topic.
    data_records: list[tuple[int, int, str, str, list[str]]]
    #: (offset, key, value, committed) of every transactional record.
    txn_records: list[tuple[int, str, str, bool]]
    committed: dict[tuple[str, int], int]
    #: Topic -> DescribeProducers of its partition 0, before the stop.
    producers: dict[str, list[dict[str, Any]]]
    deep: subprocess.CompletedProcess[str] | None = None
    offsets: subprocess.CompletedProcess[str] | None = None
    txn_state: subprocess.CompletedProcess[str] | None = None

    def files(self, partition: str, *suffixes: str) -> list[Path]:
        return sorted(p for p in (self.logs / partition).iterdir() if p.suffix in suffixes)

    def all_index_files(self) -> list[Path]:
        return sorted(p for p in self.logs.glob("*/*") if p.suffix in (".index", ".timeindex"))


def _delivered(offsets: dict[int, int], n: int) -> Any:
    def on_delivery(err: Any, msg: Any) -> None:
        assert err is None, err
        offsets[n] = msg.offset()

    return on_delivery


@pytest.fixture(scope="module")
def pylog_files(tmp_path_factory: pytest.TempPathFactory, apache_kafka_tools: Path) -> PylogFiles:
    data_dir = tmp_path_factory.mktemp("pylog-files-for-kafka")
    suffix = uuid.uuid4().hex[:6]
    data_topic, txn_topic = f"kf-data-{suffix}", f"kf-txn-{suffix}"
    group, transactional_id = f"kf-group-{suffix}", f"kf-tx-{suffix}"
    # One partition for each internal topic, so that a dump of it holds everything; no wait for more members.
    overrides = {
        "group.initial.rebalance.delay.ms": "0",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.num.partitions": "1",
    }
    base_ts = int(time.time() * 1000) - 60_000
    with broker_process(data_dir, overrides=overrides) as address:
        with KafkaClient(address) as client:
            client.admin.create_topics(
                [
                    # A sparse offset index of one entry per ~100 bytes, and a segment of 2 batches.
                    NewTopic(
                        data_topic, 1, 1, configs={"index.interval.bytes": "100", "segment.bytes": "400"}
                    ),
                    NewTopic(txn_topic, 1, 1),
                ]
            )
        data_records: list[tuple[int, int, str, str, list[str]]] = []
        offsets: dict[int, int] = {}
        producer = Producer(
            {
                "bootstrap.servers": address,
                "enable.idempotence": True,
                "compression.type": "zstd",
                "linger.ms": 5,
            }
        )
        for i in range(40):
            # Batches of 7 (a flush each); the fourth batch's timestamps go back in time (the time index keeps
            # the maximum so far, as Kafka's does).
            ts = base_ts + 10 * i - (5_000 if 21 <= i < 28 else 0)
            headers = [("h", b"x"), ("n", None)] if i % 2 else [("h", b"y")]
            producer.produce(
                data_topic,
                key=f"k{i}".encode(),
                value=f"v{i}".encode() * 10,
                headers=headers,
                timestamp=ts,
                on_delivery=_delivered(offsets, i),
            )
            data_records.append((i, ts, f"k{i}", f"v{i}" * 10, [k for k, _ in headers]))
            if i % 7 == 6:
                producer.flush(10)
        assert producer.flush(10) == 0
        assert offsets == {i: i for i in range(40)}

        txn = Producer({"bootstrap.servers": address, "transactional.id": transactional_id, "linger.ms": 5})
        txn.init_transactions(10)
        for key, commit in (("a", True), ("b", False), ("c", True)):
            txn.begin_transaction()
            txn.produce(
                txn_topic, key=key.encode(), value=f"{key}-{'committed' if commit else 'aborted'}".encode()
            )
            txn.flush(10)
            if commit:
                txn.commit_transaction(10)
            else:
                txn.abort_transaction(10)
        # One batch then its marker per transaction: offsets 0, 2, 4 hold data, 1, 3, 5 the markers.
        txn_records = [
            (0, "a", "a-committed", True),
            (2, "b", "b-aborted", False),
            (4, "c", "c-committed", True),
        ]

        consumer = Consumer(
            {
                "bootstrap.servers": address,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([data_topic])
        seen, deadline = 0, time.monotonic() + 30
        while seen < 25 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            seen += message is not None and message.error() is None
        assert seen >= 25
        consumer.commit(asynchronous=False)
        consumer.close()
        del producer, txn  # librdkafka's handles, before their broker goes away
        with KafkaClient(address) as client:
            committed = client.groups.committed_offsets(group)
            described = client.admin.describe_producers([(data_topic, 0), (txn_topic, 0)])
        producers = {tp[0]: states for tp, states in described.items()}
    files = PylogFiles(
        broker_log_dir(data_dir),
        data_topic,
        txn_topic,
        group,
        transactional_id,
        data_records,
        txn_records,
        committed,
        producers,
    )
    every_kind = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
    data_files = files.files(f"{data_topic}-0", *every_kind) + files.files(f"{txn_topic}-0", *every_kind)
    indexes = files.all_index_files()
    offsets_logs = files.files("__consumer_offsets-0", ".log")
    txn_state_logs = files.files("__transaction_state-0", ".log")

    def joined(paths: list[Path]) -> str:
        return ",".join(map(str, paths))

    with ThreadPoolExecutor(3) as pool:
        deep = pool.submit(_dump, "--deep-iteration", "--print-data-log", "--files", joined(data_files))
        offsets_dump = pool.submit(
            _dump, "--offsets-decoder", "--verify-index-only", "--files", joined(offsets_logs + indexes)
        )
        txn_dump = pool.submit(
            _dump,
            "--transaction-log-decoder",
            "--index-sanity-check",
            "--files",
            joined(txn_state_logs + indexes),
        )
        files.deep, files.offsets, files.txn_state = deep.result(), offsets_dump.result(), txn_dump.result()
    return files


def _section(run: subprocess.CompletedProcess[str] | None, path: Path) -> list[str]:
    assert run is not None
    sections = _sections(run.stdout)
    assert str(path) in sections, f"DumpLogSegments printed nothing for {path}:\n{run.stdout[-2000:]}"
    return sections[str(path)]


def _log_of(files: PylogFiles, partition: str) -> tuple[list[Path], Dumped]:
    """The partition's ``.log`` files and their batches as the deep dump printed them, in offset order."""
    logs = files.files(partition, ".log")
    dumped = Dumped()
    for log in logs:
        part = _parse_log(_section(files.deep, log))
        for batch in part.batches:
            batch["file"] = log
        dumped.batches += part.batches
        dumped.trailing += part.trailing
    return logs, dumped


@pytest.mark.compat(
    PEER, "DumpLogSegments --deep-iteration --print-data-log: pylog's segments, records as written"
)
def test_kafka_dump_log_reads_pylogs_segments_record_for_record(pylog_files: PylogFiles) -> None:
    """Every record of every segment as produced (offset, timestamp, key, value, header keys, sequence), every
    batch valid, of one idempotent producer, zstd, contiguous sequences; the transactional topic's batches and
    their COMMIT/ABORT control records at the offsets the transactions put them."""
    files = pylog_files
    assert files.deep is not None and not _complaints(files.deep.stderr), files.deep.stderr
    logs, data = _log_of(files, f"{files.data_topic}-0")
    assert len(logs) >= 3, "the data topic should have rolled segments (segment.bytes=400)"
    assert not data.trailing
    assert [
        (int(r["offset"]), int(r["CreateTime"]), r["key"], r["payload"], r["headerKeys"])
        for r in data.records
    ] == [(o, ts, k, v, f"[{','.join(h)}]") for o, ts, k, v, h in files.data_records]
    assert [int(r["sequence"]) for r in data.records] == list(range(40))
    (state,) = files.producers[files.data_topic]
    assert {
        (b["producerId"], b["producerEpoch"], b["compresscodec"], b["isTransactional"], b["isvalid"])
        for b in data.batches
    } == {(str(state["ProducerId"]), str(state["ProducerEpoch"]), "zstd", "false", "true")}
    for batch in data.batches:
        count, base = int(batch["count"]), int(batch["baseOffset"])
        assert int(batch["lastOffset"]) == base + count - 1 and len(batch["records"]) == count
        assert int(batch["baseSequence"]) == base and int(batch["lastSequence"]) == base + count - 1
        assert int(batch["CreateTime"]) == max(int(r["CreateTime"]) for r in batch["records"])
    # Positions: each batch starts where the one before it in its file ends.
    for log in logs:
        in_file = [b for b in data.batches if b["file"] == log]
        assert [int(b["position"]) for b in in_file] == [
            sum(int(b["size"]) for b in in_file[:n]) for n in range(len(in_file))
        ]
        assert sum(int(b["size"]) for b in in_file) == log.stat().st_size

    _, txn = _log_of(files, f"{files.txn_topic}-0")
    (txn_state,) = files.producers[files.txn_topic]
    assert {(b["producerId"], b["isTransactional"], b["isvalid"]) for b in txn.batches} == {
        (str(txn_state["ProducerId"]), "true", "true")
    }
    data_records = [r for b in txn.batches if b["isControl"] == "false" for r in b["records"]]
    assert [(int(r["offset"]), r["key"], r["payload"]) for r in data_records] == [
        (o, k, v) for o, k, v, _ in files.txn_records
    ]
    assert [int(r["sequence"]) for r in data_records] == [0, 1, 2]
    markers = [
        (int(r["offset"]), r["endTxnMarker"])
        for b in txn.batches
        if b["isControl"] == "true"
        for r in b["records"]
    ]
    assert markers == [(o + 1, "COMMIT" if commit else "ABORT") for o, _, _, commit in files.txn_records]
    assert {r["coordinatorEpoch"] for b in txn.batches if b["isControl"] == "true" for r in b["records"]} == {
        str(txn_state["CoordinatorEpoch"])
    }


def _kafka_index_entries(
    batches: list[dict[str, Any]], interval: int
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """The offset- and time-index entries Kafka's ``LogSegment`` makes for a closed segment of these batches:
    before appending a batch, once more than ``interval`` bytes went in since the last entry, an offset entry
    (the batch's last offset, its position) and a time entry (the largest timestamp so far and the last offset
    of its batch) when that timestamp grew; when the segment is closed, that time entry once more if it grew."""
    offsets: list[tuple[int, int]] = []
    times: list[tuple[int, int]] = []
    since = 0
    max_so_far: tuple[int, int] | None = None

    def time_entry() -> None:
        if max_so_far is not None and (not times or max_so_far[0] > times[-1][0]):
            times.append(max_so_far)

    for batch in batches:
        ts, last = int(batch["CreateTime"]), int(batch["lastOffset"])
        if max_so_far is None or ts > max_so_far[0]:
            max_so_far = (ts, last)
        if since > interval:
            offsets.append((last, int(batch["position"])))
            time_entry()
            since = 0
        since += int(batch["size"])
    time_entry()
    return offsets, times


@pytest.mark.compat(PEER, "DumpLogSegments: pylog's offset and time indexes entry for entry")
def test_kafka_dump_log_reads_pylogs_offset_and_time_indexes(pylog_files: PylogFiles) -> None:
    """Every segment's offset and time index holds the entries Kafka's rule makes of its batches (sparse, one per
    ``index.interval.bytes``; the time index keeps the maximum timestamp so far, which the fourth batch does not
    raise) as Kafka's tool prints them, and as pylog's own reader finds them; the tool, which checks each entry
    against the log, complains about none."""
    files = pylog_files
    assert files.deep is not None and not _complaints(files.deep.stderr), files.deep.stderr
    logs, data = _log_of(files, f"{files.data_topic}-0")
    for log in logs:
        base, size = int(log.stem), log.stat().st_size
        index, time_index = log.with_suffix(".index"), log.with_suffix(".timeindex")
        text = "\n".join(_section(files.deep, index))
        entries = [(int(o), int(p)) for o, p in re.findall(r"^offset: (\d+) position: (\d+)$", text, re.M)]
        text = "\n".join(_section(files.deep, time_index))
        time_entries = [
            (int(t), int(o)) for t, o in re.findall(r"^timestamp: (\d+) offset: (\d+)$", text, re.M)
        ]
        expected = _kafka_index_entries([b for b in data.batches if b["file"] == log], 100)
        assert (entries, time_entries) == expected, log
        assert entries, f"{index}: index.interval.bytes=100 indexes every batch but a segment's first"
        ours = OffsetIndex.open_read_only(index, base, size)
        ours_t = TimeIndex.open_read_only(time_index, base, size)
        assert entries == [tuple(ours.entry(n)) for n in range(ours.entries)]
        assert time_entries == [tuple(ours_t.entry(n)) for n in range(ours_t.entries)]


@pytest.mark.compat(PEER, "DumpLogSegments --verify-index-only and --index-sanity-check over pylog's indexes")
def test_kafka_verifies_and_sanity_checks_every_pylog_index(pylog_files: PylogFiles) -> None:
    """Every ``.index`` and ``.timeindex`` pylog left (data, transactional and internal topics) passes Kafka's
    verification (no entries printed, no complaint) and its sanity check (the one Kafka's broker runs at startup
    to decide whether to rebuild an index)."""
    files = pylog_files
    indexes = files.all_index_files()
    assert files.offsets is not None and files.txn_state is not None
    for run in (files.offsets, files.txn_state):
        assert not _complaints(run.stderr), run.stderr
    for path in indexes:
        verified = _section(files.offsets, path)
        assert verified in ([], [f"{path} is empty."]), verified
        checked = _section(files.txn_state, path)
        assert checked in ([f"{path} passed sanity check."], [f"{path} is empty."]), checked


def _expected_txn_index(batches: list[dict[str, Any]]) -> list[str]:
    """The ``.txnindex`` lines (as DumpLogSegments prints them) Kafka's ``LogSegment.updateTxnIndex`` makes of
    these batches: per ABORT marker, its producer, the first offset of the transaction it ends, its own offset,
    and the last stable offset after it (the next offset: no other transaction is open in these logs)."""
    lines = []
    for n, marker in enumerate(batches):
        if marker["isControl"] != "true" or marker["records"][0]["endTxnMarker"] != "ABORT":
            continue
        first = int(marker["baseOffset"])
        for batch in reversed(batches[:n]):  # back to the producer's previous marker
            if batch["producerId"] == marker["producerId"]:
                if batch["isControl"] == "true":
                    break
                first = int(batch["baseOffset"])
        at = int(marker["baseOffset"])
        lines.append(
            f"version: 0 producerId: {marker['producerId']} firstOffset: {first} lastOffset: {at} "
            f"lastStableOffset: {at + 1}"
        )
    return lines


def _expected_snapshot(batches: list[dict[str, Any]], offset: int) -> list[str]:
    """The lines DumpLogSegments prints for the producer snapshot at ``offset`` of a partition of these batches:
    per producer of the batches below it, the state Kafka's ``ProducerStateManager`` keeps (its epoch, the
    coordinator epoch of its last marker, no open transaction, its last timestamp, its last data batch)."""
    below = [b for b in batches if int(b["lastOffset"]) < offset]
    lines = []
    for pid in sorted({b["producerId"] for b in below if b["producerId"] != "-1"}, key=int):
        own = [b for b in below if b["producerId"] == pid]
        data = [b for b in own if b["isControl"] == "false"][-1]
        markers = [r for b in own if b["isControl"] == "true" for r in b["records"]]
        lines.append(
            f"producerId: {pid} producerEpoch: {own[-1]['producerEpoch']} coordinatorEpoch: "
            f"{markers[-1]['coordinatorEpoch'] if markers else -1} currentTxnFirstOffset: OptionalLong.empty"
            f" lastTimestamp: {own[-1]['CreateTime']} firstSequence: {data['baseSequence']} lastSequence: "
            f"{data['lastSequence']} lastOffset: {data['lastOffset']} offsetDelta: "
            f"{int(data['lastOffset']) - int(data['baseOffset'])} timestamp: {own[-1]['CreateTime']}"
        )
    return lines


@pytest.mark.compat(PEER, "DumpLogSegments: pylog's .txnindex (aborted transactions)")
def test_kafka_dump_log_reads_pylogs_transaction_index(pylog_files: PylogFiles) -> None:
    """The aborted transaction's entry as Kafka's ``LogSegment.updateTxnIndex`` makes it from the log: the
    producer, the transaction's first offset, its ABORT marker's offset and the last stable offset after it."""
    files = pylog_files
    (txnindex,) = files.files(f"{files.txn_topic}-0", ".txnindex")
    _, txn = _log_of(files, f"{files.txn_topic}-0")
    expected = _expected_txn_index(txn.batches)
    assert len(expected) == 1 and _section(files.deep, txnindex) == expected


@pytest.mark.compat(PEER, "DumpLogSegments: pylog's producer snapshots (.snapshot)")
def test_kafka_dump_log_reads_pylogs_producer_snapshots(pylog_files: PylogFiles) -> None:
    """Each ``.snapshot`` (one per roll and one at the clean stop) holds, for every producer of the batches below
    its offset, the state Kafka's ``ProducerStateManager`` keeps; the newest equals what DescribeProducers
    answered before the stop."""
    files = pylog_files
    for topic in (files.data_topic, files.txn_topic):
        partition = f"{topic}-0"
        snapshots = files.files(partition, ".snapshot")
        _, dumped = _log_of(files, partition)
        assert snapshots, f"no producer snapshot in {partition}"
        for snapshot in snapshots:
            assert _section(files.deep, snapshot) == _expected_snapshot(dumped.batches, int(snapshot.stem)), (
                snapshot
            )
        (state,) = files.producers[topic]
        newest = _fields(_section(files.deep, snapshots[-1])[0])
        assert (
            newest["producerId"],
            newest["producerEpoch"],
            newest["lastSequence"],
            newest["lastTimestamp"],
            newest["coordinatorEpoch"],
        ) == tuple(
            str(state[k])
            for k in ("ProducerId", "ProducerEpoch", "LastSequence", "LastTimestamp", "CoordinatorEpoch")
        )


def _decoded(lines: list[str]) -> list[tuple[int, dict[str, Any], dict[str, Any] | str]]:
    """(offset, key, value) of every decoded coordinator record of a dump (``<DELETE>`` for a tombstone)."""
    out = []
    for batch in _parse_log(lines).batches:
        for record in batch["records"]:
            if "key" in record:
                value = record["payload"]
                out.append(
                    (
                        int(record["offset"]),
                        json.loads(record["key"]),
                        value if value == "<DELETE>" else json.loads(value),
                    )
                )
    return out


@pytest.mark.compat(PEER, "DumpLogSegments --offsets-decoder: pylog's __consumer_offsets")
def test_kafka_offsets_decoder_reads_pylogs_consumer_offsets(pylog_files: PylogFiles) -> None:
    """Kafka decodes every record of pylog's ``__consumer_offsets``: the group's offset commit (the offsets
    pylog answers in OffsetFetch), and its group metadata (the classic consumer group, its range assignment of
    the topic, then the empty group after the member left)."""
    files = pylog_files
    assert files.offsets is not None
    (log,) = files.files("__consumer_offsets-0", ".log")
    records = _decoded(_section(files.offsets, log))
    assert records and not _complaints(files.offsets.stdout)
    commits = {
        (k["data"]["topic"], k["data"]["partition"]): v["data"]["offset"]
        for _, k, v in records
        if k["type"] == "1" and k["data"]["group"] == files.group and isinstance(v, dict)
    }
    assert commits == files.committed and commits == {
        (files.data_topic, 0): files.committed[(files.data_topic, 0)]
    }
    groups = [v for _, k, v in records if k["type"] == "2" and k["data"]["group"] == files.group]
    assert [isinstance(v, dict) and v["data"]["protocolType"] for v in groups] == ["consumer"] * len(groups)
    stable, *_, left = groups
    assert isinstance(stable, dict) and isinstance(left, dict)
    (member,) = stable["data"]["members"]
    assert stable["data"]["leader"] == member["memberId"] and stable["data"]["protocol"] == "range"
    assert member["subscription"]["topics"] == [files.data_topic]
    assert member["assignment"]["assignedPartitions"] == [{"topic": files.data_topic, "partitions": [0]}]
    assert left["data"]["members"] == [] and left["data"]["generation"] == stable["data"]["generation"] + 1


@pytest.mark.compat(PEER, "DumpLogSegments --transaction-log-decoder: pylog's __transaction_state")
def test_kafka_transaction_log_decoder_reads_pylogs_transaction_state(pylog_files: PylogFiles) -> None:
    """Kafka decodes every record of pylog's ``__transaction_state``: the transactional id's states through
    commit, abort and commit, with the producer id and epoch its batches carry and the partition it wrote."""
    files = pylog_files
    assert files.txn_state is not None
    (log,) = files.files("__transaction_state-0", ".log")
    records = _decoded(_section(files.txn_state, log))
    (txn_state,) = files.producers[files.txn_topic]
    mine = [
        v for _, k, v in records if k == {"type": "0", "data": {"transactionalId": files.transactional_id}}
    ]
    assert len(mine) == len(records) and all(isinstance(v, dict) for v in mine)
    states = [
        (v["data"]["transactionStatus"], v["data"]["transactionPartitions"])
        for v in mine
        if isinstance(v, dict)
    ]
    wrote = [{"topic": files.txn_topic, "partitionIds": [0]}]
    one_txn = [("Ongoing", wrote), ("PrepareX", wrote), ("CompleteX", [])]
    expected = [("Empty", [])]
    for outcome in ("Commit", "Abort", "Commit"):
        expected += [(s.replace("X", outcome), p) for s, p in one_txn]
    assert states == expected
    assert {(v["data"]["producerId"], v["data"]["producerEpoch"]) for v in mine if isinstance(v, dict)} == {
        (txn_state["ProducerId"], txn_state["ProducerEpoch"])
    }


# ------------------------------------------------------------------------------- Kafka's files, pylog's readers


@dataclass
class KafkaFiles:
    """A partition Apache Kafka wrote, what Kafka's consumer read of it, and pylog's dump-log of its files."""

    bootstrap: str
    log_dirs: Path
    topic: str
    partition_dir: Path
    #: kafka-console-consumer's lines (read_uncommitted, read_committed): (offset, timestamp, headers, key, value).
    uncommitted: list[tuple[int, int, str, str, str]]
    committed: list[tuple[int, int, str, str, str]]
    dump: subprocess.CompletedProcess[str]
    verify: subprocess.CompletedProcess[str]


#: What kafka-console-consumer prints per record with the print options below, tab-separated.
CONSOLE_FORMAT = (
    *("--formatter-property", "print.timestamp=true", "--formatter-property", "print.partition=true"),
    *("--formatter-property", "print.offset=true", "--formatter-property", "print.headers=true"),
    *("--formatter-property", "print.key=true"),
)


def _console_consumer(
    bootstrap: str, topic: str, isolation: str, count: int
) -> list[tuple[int, int, str, str, str]]:
    done = run_tool(
        "kafka-console-consumer",
        *("--bootstrap-server", bootstrap, "--topic", topic, "--partition", "0", "--offset", "earliest"),
        *("--isolation-level", isolation, "--max-messages", str(count), "--timeout-ms", "30000"),
        *CONSOLE_FORMAT,
    )
    rows = []
    for line in done.stdout.splitlines():
        ts, partition, offset, headers, key, value = line.split("\t")
        assert partition == "Partition:0", line
        rows.append(
            (int(offset.removeprefix("Offset:")), int(ts.removeprefix("CreateTime:")), headers, key, value)
        )
    assert f"Processed a total of {count} messages" in done.stderr, done.stderr[-2000:]
    return rows


def _pylog_dump_log(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker_runtime", "dump-log", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


# librdkafka sends a batch uncompressed when its compressed form is larger (rd_kafka_msgset_writer_compress):
# short values with varying timestamps sometimes are, so the values carry text every codec shrinks.
COMPRESSIBLE = "compressible " * 8


@pytest.fixture(scope="module")
def kafka_files(apache_kafka: KafkaCluster) -> Iterator[KafkaFiles]:
    bootstrap = apache_kafka.bootstrap
    topic = f"kf-kafka-{uuid.uuid4().hex[:6]}"
    with KafkaClient(bootstrap) as client:
        client.admin.create_topics([NewTopic(topic, 1, 1, configs={"index.interval.bytes": "100"})])
    # 1. An idempotent lz4 batch with timestamps of 2023: Kafka's segment.ms (7 days) counts from a segment's
    #    first timestamp, so the next append rolls the segment (and takes a producer snapshot holding this one).
    idempotent = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "compression.type": "lz4",
            "linger.ms": 5,
        }
    )
    for i in range(10):
        idempotent.produce(
            topic,
            key=f"i{i}".encode(),
            value=f"lz4-{i}-{COMPRESSIBLE}".encode(),
            headers=[("h", b"i")],
            timestamp=1_700_000_000_000 + i,
        )
    assert idempotent.flush(10) == 0
    # 2. Two gzip batches of a plain producer: null keys, null values, headers with null values, out-of-order
    #    timestamps within a batch.
    now = int(time.time() * 1000)
    plain = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": False,
            "compression.type": "gzip",
            # The flushes alone end the batches (a flush sends at once whatever linger.ms): with 5 ms a loaded
            # machine's slow produce calls split the second batch in two.
            "linger.ms": 1000,
        }
    )
    for i in range(12):
        plain.produce(
            topic,
            key=None if i % 5 == 3 else f"g{i}".encode(),
            value=None if i % 5 == 4 else f"gzip-{i}-{COMPRESSIBLE}".encode(),
            headers=[("h", b"g"), ("n", None)] if i % 2 else [],
            timestamp=now - 1000 + (7 * i) % 11,
        )
        if i == 5:
            plain.flush(10)
    assert plain.flush(10) == 0
    # 3. A transaction aborted, then one committed (two records each, no compression).
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-tx", "linger.ms": 5})
    txn.init_transactions(30)
    for outcome in ("aborted", "committed"):
        txn.begin_transaction()
        for n in range(2):
            txn.produce(topic, key=f"t-{outcome}-{n}".encode(), value=f"txn-{outcome}-{n}".encode())
        txn.flush(10)
        if outcome == "aborted":
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)
    del idempotent, plain, txn

    log_dirs = apache_kafka.nodes[0].data_dir
    partition_dir = log_dirs / f"{topic}-0"
    every_kind = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
    segment_files = sorted(p for p in partition_dir.iterdir() if p.suffix in every_kind)
    indexes = [p for p in segment_files if p.suffix in (".index", ".timeindex")]
    with ThreadPoolExecutor(4) as pool:
        uncommitted = pool.submit(_console_consumer, bootstrap, topic, "read_uncommitted", 26)
        committed = pool.submit(_console_consumer, bootstrap, topic, "read_committed", 24)
        dump = pool.submit(
            _pylog_dump_log,
            "--deep-iteration",
            "--print-data-log",
            "--files",
            ",".join(map(str, segment_files)),
        )
        verify = pool.submit(_pylog_dump_log, "--verify-index-only", "--files", ",".join(map(str, indexes)))
        yield KafkaFiles(
            bootstrap,
            log_dirs,
            topic,
            partition_dir,
            uncommitted.result(),
            committed.result(),
            dump.result(),
            verify.result(),
        )


def _consumed_header_keys(headers: str) -> str:
    return (
        "[]"
        if headers == "NO_HEADERS"
        else "[" + ",".join(h.split(":", 1)[0] for h in headers.split(",")) + "]"
    )


@pytest.mark.compat(
    PEER, "pylog's dump-log over Apache Kafka's segments (compressed, idempotent, transactional)"
)
def test_pylog_dump_log_reads_apache_kafkas_segments(kafka_files: KafkaFiles) -> None:
    """pylog's ``dump-log`` over the partition Kafka wrote (a rolled segment and the active one, read in place):
    every batch valid, no trailing bytes; its data records are, record for record, what Kafka's consumer reads
    with read_uncommitted; the records that consumer skips are the COMMIT and ABORT markers; the codecs and the
    producers are those that wrote them; ``--verify-index-only`` finds Kafka's offset and time indexes sound."""
    files = kafka_files
    assert files.dump.returncode == 0, files.dump.stdout[-3000:] + files.dump.stderr
    sections = _sections(files.dump.stdout)
    logs = sorted(files.partition_dir.glob("*.log"))
    assert len(logs) == 2, "the 2023 timestamps should have rolled the first segment"
    dumped = Dumped()
    for log in logs:
        part = _parse_log(sections[str(log)])
        dumped.batches += part.batches
        assert re.match(
            r"Summary: \d+ batches, .* 0 with a bad CRC, 0 trailing invalid bytes$", sections[str(log)][-1]
        )
    assert {b["isvalid"] for b in dumped.batches} == {"true"}
    data = [r for b in dumped.batches if b["isControl"] == "false" for r in b["records"]]
    assert [
        (int(r["offset"]), int(r["CreateTime"]), r["headerKeys"], r["key"], r["payload"]) for r in data
    ] == [(o, ts, _consumed_header_keys(h), k, v) for o, ts, h, k, v in files.uncommitted]
    consumed = {o for o, *_ in files.uncommitted}
    markers = [
        (int(r["offset"]), r["endTxnMarker"])
        for b in dumped.batches
        if b["isControl"] == "true"
        for r in b["records"]
    ]
    # Every offset is a record Kafka's consumer read or a marker it skipped: an ABORT, then a COMMIT.
    marker_offsets = {o for o, _ in markers}
    assert [int(r["offset"]) for r in dumped.records] == sorted(consumed | marker_offsets)
    assert not consumed & marker_offsets and [m for _, m in markers] == ["ABORT", "COMMIT"]
    codecs = [(b["compresscodec"], b["isTransactional"], int(b["producerId"]) >= 0) for b in dumped.batches]
    gzip_end = next(n for n, codec in enumerate(codecs[1:], 1) if codec != ("gzip", "false", False))
    assert codecs[0] == ("lz4", "false", True) and gzip_end >= 3, codecs  # at least the two flushed batches
    assert set(codecs[gzip_end:]) == {("none", "true", True)}, codecs
    assert files.verify.returncode == 0, files.verify.stdout + files.verify.stderr
    verified = _sections(files.verify.stdout)
    assert set(verified) == {
        str(p) for p in files.partition_dir.iterdir() if p.suffix in (".index", ".timeindex")
    }
    for path, lines in verified.items():
        assert len(lines) == 1 and lines[0].endswith(", verified"), (path, lines)
    # The active segment's index is Kafka's, preallocated: pylog trusted its entries and not the zeros after them.
    active_index = max(files.partition_dir.glob("*.index"))
    assert re.match(
        r"Summary: [1-9]\d* entries, \d+ unused or untrusted slots, verified", verified[str(active_index)][0]
    )


@pytest.mark.compat(PEER, "pylog's dump-log over Apache Kafka's .txnindex and producer snapshots")
def test_pylog_dump_log_reads_apache_kafkas_txnindex_and_snapshot(kafka_files: KafkaFiles) -> None:
    """pylog's ``dump-log`` prints Kafka's ``.txnindex`` (the aborted transaction) and its producer snapshot (taken
    when the segment rolled: the idempotent producer of the first segment) as Kafka's DumpLogSegments prints them,
    with the values Kafka's rules make of the log."""
    files = kafka_files
    sections = _sections(files.dump.stdout)
    batches = [
        b for log in sorted(files.partition_dir.glob("*.log")) for b in _parse_log(sections[str(log)]).batches
    ]
    (txnindex,) = files.partition_dir.glob("*.txnindex")
    expected = _expected_txn_index(batches)
    assert len(expected) == 1 and sections[str(txnindex)] == expected
    snapshots = sorted(files.partition_dir.glob("*.snapshot"))
    assert [int(s.stem) for s in snapshots] == [10], "Kafka takes a producer snapshot when it rolls a segment"
    assert sections[str(snapshots[0])] == _expected_snapshot(batches, 10)
    assert sections[str(snapshots[0])][0].startswith("producerId: ")


@pytest.mark.compat(
    PEER, "the connector's direct scan (pylog.transport=local) of Apache Kafka's segments, read_committed"
)
def test_connector_direct_scan_reads_apache_kafkas_segments(spark: Any, kafka_files: KafkaFiles) -> None:
    """The connector reading Kafka's files itself (``pylog.logDirs``, ``pylog.transport=local``, read_committed:
    Kafka's ``.txnindex`` drops the aborted transaction) gives, row for row, what Kafka's consumer reads with
    read_committed: offsets, timestamps, keys, values and headers."""
    files = kafka_files
    df = (
        spark.read.format("pylog")
        .option("kafka.bootstrap.servers", files.bootstrap)
        .option("pylog.logDirs", str(files.log_dirs))
        .option("pylog.transport", "local")
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        .option("subscribe", files.topic)
        .load()
    )
    rows = (
        df.selectExpr("offset", "unix_millis(timestamp) AS ts", "headers", "key", "value")
        .orderBy("offset")
        .collect()
    )

    def text(data: bytes | bytearray | None) -> str:
        return "null" if data is None else bytes(data).decode()

    got = [
        (
            r.offset,
            r.ts,
            ",".join(f"{h.key}:{text(h.value)}" for h in r.headers) if r.headers else "NO_HEADERS",
            text(r.key),
            text(r.value),
        )
        for r in rows
    ]
    assert got == files.committed
    aborted = {o for o, *_ in files.uncommitted} - {o for o, *_ in files.committed}
    assert len(aborted) == 2
