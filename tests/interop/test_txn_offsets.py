"""Offsets committed inside transactions (AddOffsetsToTxn + TxnOffsetCommit) with real clients against the real
broker: confluent-kafka's consume-transform-produce loop (a read_committed group consumer, a transactional
producer calling ``send_offsets_to_transaction``). A commit makes the outputs and the offsets visible together,
an abort neither; while the transaction is open OffsetFetch shows the previous offset, or UNSTABLE_OFFSET_COMMIT
with RequireStable; a restarted consumer resumes at the committed offset, also after a broker restart."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker_runtime.errors import ErrorCode
from broker_runtime.launch.process import broker_process
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection

pytestmark = pytest.mark.timeout(180)

GROUP_CONF = {"group.min.session.timeout.ms": "500", "group.initial.rebalance.delay.ms": "0"}
IN, OUT, GROUP = "in", "out", "etl"


def _setup(bootstrap: str, count: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=1) for t in (IN, OUT)]
    ).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(IN, value=b"v%d" % i)
    assert producer.flush(30) == 0


def _consumer(bootstrap: str, isolation: str = "read_committed", group: str = GROUP) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 200,
        }
    )


def _take(consumer: Consumer, n: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            got.append(msg)
    assert len(got) == n, f"consumed {len(got)} of {n}"
    return got


def _transform(producer: Producer, consumer: Consumer, msgs: list[Any]) -> None:
    """One transaction: the transformed records and the consumer's next positions; left open."""
    producer.begin_transaction()
    for m in msgs:
        producer.produce(OUT, value=bytes(m.value()).upper())
    positions = [TopicPartition(IN, 0, msgs[-1].offset() + 1)]
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)


def _committed(bootstrap: str) -> int:
    """The group's committed offset as a read_uncommitted client sees it (OffsetFetch without RequireStable)."""
    probe = _consumer(bootstrap, "read_uncommitted", group=GROUP)
    try:
        return int(probe.committed([TopicPartition(IN, 0)], 30)[0].offset)
    finally:
        probe.close()


def _outputs(bootstrap: str) -> list[bytes]:
    reader = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "reader", "isolation.level": "read_committed"}
    )
    reader.assign([TopicPartition(OUT, 0, 0)])
    values: list[bytes] = []
    quiet = time.monotonic() + 3
    while time.monotonic() < quiet:
        msg = reader.poll(0.2)
        if msg is not None and not msg.error():
            values.append(bytes(msg.value()))
            quiet = time.monotonic() + 1
    reader.close()
    return values


def _fetch_stable(bootstrap: str) -> dict[str, Any]:
    with RawConnection(bootstrap) as conn:
        body = conn.call(
            ApiKey.OFFSET_FETCH,
            7,
            {"GroupId": GROUP, "Topics": [{"Name": IN, "PartitionIndexes": [0]}], "RequireStable": True},
        )
    part = body["Topics"][0]["Partitions"][0]
    return {"offset": part["CommittedOffset"], "error": part["ErrorCode"]}


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return dict(GROUP_CONF)


def test_consume_transform_produce_commit_and_abort(bootstrap: str) -> None:
    _setup(bootstrap, 15)
    consumer = _consumer(bootstrap)
    consumer.subscribe([IN])
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "etl-1"})
    producer.init_transactions(30)

    # commit: outputs and offsets visible together, and only at the commit
    _transform(producer, consumer, _take(consumer, 5))
    assert _committed(bootstrap) == -1001  # pending: OffsetFetch shows no committed offset yet
    assert _fetch_stable(bootstrap) == {"offset": -1, "error": ErrorCode.UNSTABLE_OFFSET_COMMIT}
    producer.commit_transaction(30)
    assert _committed(bootstrap) == 5
    assert _fetch_stable(bootstrap) == {"offset": 5, "error": ErrorCode.NONE}
    assert _outputs(bootstrap) == [b"V%d" % i for i in range(5)]

    # abort: neither the outputs nor the offsets
    _transform(producer, consumer, _take(consumer, 5))
    producer.abort_transaction(30)
    assert _committed(bootstrap) == 5
    assert _fetch_stable(bootstrap) == {"offset": 5, "error": ErrorCode.NONE}
    assert _outputs(bootstrap) == [b"V%d" % i for i in range(5)]
    consumer.close()

    # a restarted consumer resumes at the committed offset (the aborted records come again)
    consumer = _consumer(bootstrap)
    consumer.subscribe([IN])
    again = _take(consumer, 10)
    assert [m.offset() for m in again] == list(range(5, 15))
    _transform(producer, consumer, again[:5])
    # a second TxnOffsetCommit in the same transaction continues the producer's sequence on the offsets partition
    producer.send_offsets_to_transaction(
        [TopicPartition(IN, 0, again[-1].offset() + 1)], consumer.consumer_group_metadata(), 30
    )
    for m in again[5:]:
        producer.produce(OUT, value=bytes(m.value()).upper())
    producer.commit_transaction(30)
    consumer.close()
    assert _committed(bootstrap) == 15
    assert _outputs(bootstrap) == [b"V%d" % i for i in range(15)]


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "broker"


def test_transactional_offsets_survive_a_broker_restart(data_dir: Path) -> None:
    """Replay: a committed transaction's offsets are committed after a restart; an open one's stay pending
    (UNSTABLE with RequireStable) and its abort (by the transaction timeout) drops them."""
    with broker_process(data_dir, GROUP_CONF) as bootstrap:
        _setup(bootstrap, 10)
        consumer = _consumer(bootstrap)
        consumer.subscribe([IN])
        producer = Producer(
            {"bootstrap.servers": bootstrap, "transactional.id": "etl-2", "transaction.timeout.ms": 3000}
        )
        producer.init_transactions(30)
        first = _take(consumer, 4)
        _transform(producer, consumer, first[:2])
        # two TxnOffsetCommits in one transaction: both batches must be in the log (in sequence), else the
        # replay below would find offset 2
        producer.send_offsets_to_transaction(
            [TopicPartition(IN, 0, 4)], consumer.consumer_group_metadata(), 30
        )
        producer.commit_transaction(30)
        _transform(producer, consumer, _take(consumer, 3))  # left open across the restart
        consumer.close()
    with broker_process(
        data_dir, {**GROUP_CONF, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    ) as bootstrap:
        assert _committed(bootstrap) == 4
        assert _fetch_stable(bootstrap) == {"offset": -1, "error": ErrorCode.UNSTABLE_OFFSET_COMMIT}
        deadline = time.monotonic() + 30
        while _fetch_stable(bootstrap)["error"] != ErrorCode.NONE:
            assert time.monotonic() < deadline, "the open transaction was never aborted"
            time.sleep(0.2)
        assert _fetch_stable(bootstrap) == {"offset": 4, "error": ErrorCode.NONE}
        consumer = _consumer(bootstrap)
        consumer.subscribe([IN])
        assert [m.offset() for m in _take(consumer, 6)] == list(range(4, 10))
        consumer.close()
