"""Transactions end to end: a real broker, confluent-kafka's transactional producer and read_committed /
read_uncommitted consumers (assign, no groups), the broker killed with SIGKILL mid-transaction and after
PrepareCommit, and the ``.txnindex`` files decoded against Kafka's 34-byte layout.

The tests that kill nothing share one in-process broker (module scope); the SIGKILL tests run a broker process
of their own, killed and started again on the same data."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC, partition_for
from broker_runtime.coordinator.transaction.log_format import (
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker_runtime.launch.layout import broker_log_dir
from broker_runtime.launch.process import broker_process
from broker_runtime.protocol.records import RecordBatch, RecordBatchBuilder
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.brokers import start_broker
from tests.support.processes import kill_broker
from tests.support.transactions import numbered_values, read_values, transactional_producer

pytestmark = pytest.mark.timeout(120)

#: The broker checks for timed-out transactions this often here (Kafka's default is 10 s).
TXN_CLEANUP_FAST = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}


def _create(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=n, replication_factor=1) for t, n in topics]
    ).values():
        future.result(30)


def _decode_txnindex(path: Path) -> list[tuple[int, int, int, int, int]]:
    """Kafka's AbortedTxn: version int16, producerId, firstOffset, lastOffset, lastStableOffset int64 (34 bytes)."""
    data = path.read_bytes()
    assert len(data) % 34 == 0
    return [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), 34)]


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One in-process broker for the tests that kill nothing (each uses topics and transactional ids of its
    own); the SIGKILL tests below run a broker process of their own."""
    instance = start_broker(tmp_path_factory.mktemp("txn"), TXN_CLEANUP_FAST)
    try:
        yield instance
    finally:
        instance.stop()


@pytest.fixture
def broker(shared_broker: Any) -> str:
    return str(shared_broker.bootstrap)


def test_commit_is_visible_and_abort_is_not_across_partitions_and_topics(
    broker: str, shared_broker: Any
) -> None:
    _create(broker, ("orders", 3), ("audit", 1))
    parts = [("orders", 0), ("orders", 1), ("orders", 2), ("audit", 0)]
    producer = transactional_producer(broker, "tx-commit-abort")
    committed, aborted = numbered_values("c", 30), numbered_values("a", 12)
    producer.begin_transaction()
    for i, value in enumerate(committed):
        topic, partition = parts[i % 4]
        producer.produce(topic, value=value, partition=partition)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i, value in enumerate(aborted):
        topic, partition = parts[i % 4]
        producer.produce(topic, value=value, partition=partition)
    producer.flush(30)
    producer.abort_transaction(30)
    after = numbered_values("z", 4)
    producer.begin_transaction()
    for i, value in enumerate(after):
        producer.produce("orders", value=value, partition=i % 3)
    producer.commit_transaction(30)

    everything = set(committed) | set(aborted) | set(after)
    uncommitted = read_values(broker, parts, "read_uncommitted", until=everything)
    assert sorted(uncommitted) == sorted(everything)
    read_committed = read_values(broker, parts, "read_committed", until=set(committed) | set(after))
    assert sorted(read_committed) == sorted(committed + after), (
        "aborted records must never reach read_committed"
    )

    # Every partition holds an ABORT marker: each has one .txnindex entry, decodable as Kafka's AbortedTxn.
    entries = {}
    for path in sorted(Path(shared_broker.config.log_dirs[0]).glob("*-*/*.txnindex")):
        if path.parent.name.startswith(("orders-", "audit-")):  # the other tests' topics share the broker
            entries[path.parent.name] = _decode_txnindex(path)
    assert set(entries) == {"orders-0", "orders-1", "orders-2", "audit-0"}
    for name, rows in entries.items():
        assert len(rows) == 1, (name, rows)
        version, pid, first, last, lso = rows[0]
        assert version == 0 and pid >= 0 and first < last < lso, (name, rows)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(broker: str) -> None:
    _create(broker, ("fence", 1))
    first = transactional_producer(broker, "tx-fence")
    first.begin_transaction()
    first.produce("fence", value=b"zombie", partition=0)
    first.flush(30)
    second = transactional_producer(
        broker, "tx-fence"
    )  # bumps the epoch, aborts the first one's open transaction
    second.begin_transaction()
    second.produce("fence", value=b"alive", partition=0)
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as raised:
        first.produce("fence", value=b"zombie-2", partition=0)
        first.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or "fenc" in error.str().lower(), error
    assert read_values(broker, [("fence", 0)], "read_committed", until={b"alive"}) == [b"alive"]


def test_transaction_timeout_aborts_an_abandoned_transaction(broker: str) -> None:
    _create(broker, ("abandon", 2))
    abandoned = transactional_producer(broker, "tx-abandoned", timeout_ms=1500)
    abandoned.begin_transaction()
    for i, value in enumerate(numbered_values("lost", 6)):
        abandoned.produce("abandon", value=value, partition=i % 2)
    abandoned.flush(30)  # written, never committed: the producer goes quiet
    other = transactional_producer(broker, "tx-other")
    other.begin_transaction()
    for i, value in enumerate(numbered_values("kept", 4)):
        other.produce("abandon", value=value, partition=i % 2)
    other.commit_transaction(30)
    # The open transaction holds the last stable offset until the broker aborts it at its timeout.
    got = read_values(
        broker, [("abandon", 0), ("abandon", 1)], "read_committed", until=set(numbered_values("kept", 4))
    )
    assert sorted(got) == sorted(numbered_values("kept", 4))


def test_sigkill_mid_transaction_then_restart_aborts_it(tmp_path: Path) -> None:
    with broker_process(tmp_path, TXN_CLEANUP_FAST) as bootstrap:
        _create(bootstrap, ("crash", 2))
        producer = transactional_producer(bootstrap, "tx-crash", timeout_ms=2000)
        producer.begin_transaction()
        for i, value in enumerate(numbered_values("before", 4)):
            producer.produce("crash", value=value, partition=i % 2)
        producer.commit_transaction(30)
        producer.begin_transaction()
        for i, value in enumerate(numbered_values("open", 6)):
            producer.produce("crash", value=value, partition=i % 2)
        producer.flush(30)
        kill_broker(tmp_path)
    del producer
    with broker_process(tmp_path, TXN_CLEANUP_FAST) as bootstrap:
        later = transactional_producer(bootstrap, "tx-later")
        later.begin_transaction()
        for i, value in enumerate(numbered_values("after", 4)):
            later.produce("crash", value=value, partition=i % 2)
        later.commit_transaction(30)
        want = set(numbered_values("before", 4)) | set(numbered_values("after", 4))
        got = read_values(bootstrap, [("crash", 0), ("crash", 1)], "read_committed", until=want)
        assert sorted(got) == sorted(want), "the interrupted transaction is aborted, nothing of it visible"
        raw = read_values(
            bootstrap,
            [("crash", 0), ("crash", 1)],
            "read_uncommitted",
            until=want | set(numbered_values("open", 6)),
        )
        assert set(numbered_values("open", 6)) <= set(raw), "the aborted records are still in the log"


def _log_prepare_commit(data_dir: Path, txn_id: str) -> None:
    """What a crash right after the coordinator logged PrepareCommit leaves: that record, no markers."""
    partition = partition_for(txn_id, 50)
    log = PartitionLog.load(
        broker_log_dir(data_dir) / f"{TRANSACTION_STATE_TOPIC}-{partition}",
        TRANSACTION_STATE_TOPIC,
        partition,
        LogConfig(),
    )
    try:
        data = log.read(0, 1 << 20)
        last = None
        pos = 0
        while pos < len(data.records):
            batch = RecordBatch(data.records, pos)
            for record in batch.records():
                if record.key is not None and decode_key(record.key) == txn_id and record.value is not None:
                    last = decode_value(record.value)
            pos += batch.header.size
        assert last is not None and last.status == 1, f"{txn_id} should be Ongoing, found {last}"
        builder = RecordBatchBuilder()
        prepare = type(last)(
            last.producer_id,
            last.producer_epoch,
            last.timeout_ms,
            2,
            last.partitions,
            last.last_update_ms,
            last.start_ms,
        )
        builder.append(last.last_update_ms, encode_key(txn_id), encode_value(prepare))
        log.append(builder.build())
    finally:
        log.close()


def test_sigkill_after_prepare_commit_then_restart_completes_the_commit(tmp_path: Path) -> None:
    with broker_process(tmp_path, TXN_CLEANUP_FAST) as bootstrap:
        _create(bootstrap, ("decided", 2))
        producer = transactional_producer(bootstrap, "tx-decided", timeout_ms=60000)
        producer.begin_transaction()
        for i, value in enumerate(numbered_values("p", 6)):
            producer.produce("decided", value=value, partition=i % 2)
        producer.flush(30)
        kill_broker(tmp_path)
    del producer
    _log_prepare_commit(tmp_path, "tx-decided")
    with broker_process(tmp_path, TXN_CLEANUP_FAST) as bootstrap:
        got = read_values(
            bootstrap, [("decided", 0), ("decided", 1)], "read_committed", until=set(numbered_values("p", 6))
        )
        assert sorted(got) == sorted(numbered_values("p", 6)), (
            "a logged commit decision is completed after a restart"
        )
