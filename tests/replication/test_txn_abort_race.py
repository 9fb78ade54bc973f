"""A transactional producer that aborts right after a commit must not be fatally failed (issue 36).

The race, as librdkafka 2.16 (confluent-kafka) runs it: a transaction is committed (EndTxn answered once the
PrepareCommit record is durable; the markers are still being written), the next one begins, a record is produced,
its AddPartitionsToTxn finds the previous transaction in PrepareCommit and is answered CONCURRENT_TRANSACTIONS,
and the application aborts at once. librdkafka counts that AddPartitionsToTxn as a request the coordinator may
have seen (``txn_req_cnt``), so the abort sends EndTxn(abort); once the markers are written the coordinator is in
CompleteCommit, and EndTxn(abort) from CompleteCommit is INVALID_TXN_STATE, which librdkafka makes FATAL.

:func:`_abort_right_after_commit` is the client code, run the same way against three brokers:

* Apache Kafka 4.4.0 (the session's node): its markers cannot be held, so the race is repeated a bounded number of
  times. Kafka answers exactly so (its ``endTransactionWithTV1``: CompleteCommit accepts only COMMIT), and the
  test records it: a round whose AddPartitionsToTxn was answered CONCURRENT_TRANSACTIONS ends FATAL
  INVALID_TXN_STATE, the others abort.
* pylog, one node and a 3-node cluster in this process, with the markers held back by
  ``pylog.test.transaction.markers.hold.file`` (a cluster's coordinator holds them after the Prepare record is
  replicated; a single node's marker writes fail while the file exists and the periodic check retries them), so
  the window is open every time. pylog's answer differs from Kafka's here: a request that finds its transactional
  id's markers being written waits for them (:mod:`broker_runtime.server.txn_parking`) instead of answering
  CONCURRENT_TRANSACTIONS, so the abort finds the new transaction Ongoing and succeeds.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from broker_runtime.launch import create_topic
from tests.support.apache_kafka import KafkaCluster
from tests.support.brokers import start_node_brokers
from tests.support.cluster import FAST, metadata, wait_for
from tests.support.transactions import HOLD_MARKERS, broker_holding_markers

pytestmark = pytest.mark.timeout(120)

PEER = "kafka-broker"

TOPIC = "abort-race"
#: Fast retries of the transaction coordinator's periodic check (a single node's held markers are retried there).
SETTINGS = {
    "transaction.state.log.num.partitions": "5",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
    "auto.leader.rebalance.enable": "false",
}
#: How long a held AddPartitionsToTxn may stay unanswered before the test counts it as parked by the broker.
PARKED_AFTER_S = 0.5


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def having(self, *words: str) -> list[str]:
        return [line for line in self.lines if all(w in line for w in words)]


@dataclass
class Round:
    """What librdkafka saw in one round (from its ``debug=eos,protocol`` log)."""

    add_partitions: str = "unanswered"  # "NONE", "CONCURRENT_TRANSACTIONS", another error, or "unanswered"
    end_txn: list[str] = field(default_factory=list)  # EndTxn(abort) answers, in order
    outcome: str = "aborted"  # or the abort's error name, with " FATAL" when fatal
    log: list[str] = field(default_factory=list)

    @property
    def fatal(self) -> bool:
        return self.outcome.endswith("FATAL")


def _producer(bootstrap: str, txn_id: str, lines: _Lines) -> Producer:
    logger = logging.getLogger(f"test.librdkafka.{txn_id}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    logger.handlers[:] = [lines]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60000,
            "debug": "eos,protocol",
        },
        logger=logger,
    )
    producer.init_transactions(60)
    return producer


def _abort_right_after_commit(producer: Producer, lines: _Lines, n: int, hold: Path | None = None) -> Round:
    """One round: commit a transaction (its markers held while ``hold`` exists), begin the next, produce, wait for
    the AddPartitionsToTxn answer (or, held, :data:`PARKED_AFTER_S` without one), release the markers, abort."""
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"committed-%d" % n, partition=0)
    if hold is not None:
        hold.touch()
    producer.commit_transaction(30)
    lines.lines.clear()
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"aborted-%d" % n, partition=0)
    sent_at = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not lines.having("Received AddPartitionsToTxnResponse"):
        producer.poll(0.002)  # serves librdkafka's log lines
        if sent_at is None and lines.having("Sent AddPartitionsToTxnRequest"):
            sent_at = time.monotonic()
        if hold is not None and sent_at is not None and time.monotonic() - sent_at > PARKED_AFTER_S:
            break
    if hold is not None:
        hold.unlink()
    seen = Round()
    try:
        producer.abort_transaction(30)
    except KafkaException as e:
        error = e.args[0]
        seen.outcome = error.name() + (" FATAL" if error.fatal() else "")
    with contextlib.suppress(KafkaException):  # a fatal error is raised again by poll
        producer.poll(0)
    if lines.having("Received AddPartitionsToTxnResponse"):
        failed = lines.having("AddPartitionsToTxn response: partition")
        concurrent = any("concurrent operation" in line for line in failed[:1])
        seen.add_partitions = "CONCURRENT_TRANSACTIONS" if concurrent else (failed[0] if failed else "NONE")
    seen.end_txn = [
        line.split("EndTxn returned ", 1)[1].split()[0] for line in lines.having("EndTxn returned")
    ]
    seen.log = [
        line
        for line in lines.lines
        if any(k in line for k in ("AddPartitionsToTxn", "EndTxn", "Transaction state change", "TXNERR"))
    ]
    return seen


def _visible(bootstrap: str, until: bytes) -> list[bytes]:
    """read_committed values of the topic, up to and including ``until``."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed"}
    )
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 20
        while until not in got and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
    finally:
        consumer.close()
    return got


def _check_pylog(bootstrap: str, hold: Path, txn_id: str) -> None:
    lines = _Lines()
    producer = _producer(bootstrap, txn_id, lines)
    seen = _abort_right_after_commit(producer, lines, 0, hold)
    assert not seen.fatal and seen.outcome == "aborted", (
        f"the abort right after a commit failed: {seen.outcome}; librdkafka saw:\n" + "\n".join(seen.log)
    )
    assert "INVALID_TXN_STATE" not in seen.end_txn, seen.end_txn
    producer.begin_transaction()  # the producer goes on
    producer.produce(TOPIC, value=b"after", partition=0)
    producer.commit_transaction(30)
    assert _visible(bootstrap, b"after") == [b"committed-0", b"after"], "aborted records must stay invisible"


def test_single_node_abort_right_after_a_commit_whose_markers_are_pending_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Then the bound of the wait: a request still waiting after ``COMPLETION_WAIT_MS`` gets Kafka's
    CONCURRENT_TRANSACTIONS (WARNING, counted), which librdkafka retries; the transaction commits once the
    markers are written."""
    from broker_runtime.server import txn_parking

    with broker_holding_markers(tmp_path, SETTINGS) as (broker, hold):
        create_topic(broker.bootstrap, TOPIC, 1)
        _check_pylog(broker.bootstrap, hold, "abort-race-single")

        monkeypatch.setattr(txn_parking, "COMPLETION_WAIT_MS", 300)
        coordinator = broker.ctx.txn_coordinator
        lines = _Lines()
        producer = _producer(broker.bootstrap, "abort-race-bound", lines)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"first", partition=0)
        hold.touch()
        producer.commit_transaction(30)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"second", partition=0)
        wait_for(lambda: coordinator.completion_wait_timeouts > 0, 10, "a parked request answered")
        hold.unlink()
        producer.commit_transaction(30)
        assert any("CONCURRENT_TRANSACTIONS (the client retries)" in r.getMessage() for r in caplog.records)
        assert _visible(broker.bootstrap, b"second")[-2:] == [b"first", b"second"]


def test_cluster_abort_right_after_a_commit_whose_markers_are_pending_succeeds(tmp_path: Path) -> None:
    hold = tmp_path / "hold-markers"
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "pylog.cluster.dir": str(cluster_dir),
        **FAST,
        **SETTINGS,
        HOLD_MARKERS: str(hold),
    }
    brokers = start_node_brokers(tmp_path, props, nodes=3)
    try:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        create_topic(bootstrap, TOPIC, 1, {"min.insync.replicas": "2"}, replication_factor=3)
        for b in brokers:
            wait_for(lambda a=b.bootstrap: len(metadata(a, [TOPIC])["Topics"][0]["Partitions"]) == 1)
        _check_pylog(bootstrap, hold, "abort-race-cluster")
    finally:
        for b in brokers:
            b.stop()


#: Rounds of the race against Apache Kafka (it stops at the first fatal one: a fatal producer is replaced).
KAFKA_ROUNDS = 8


@pytest.mark.compat(
    PEER,
    "librdkafka transactional producer aborting right after a commit (AddPartitionsToTxn in the markers' window)",
    differs="Kafka answers CONCURRENT_TRANSACTIONS, then the abort's EndTxn INVALID_TXN_STATE (fatal for "
    "librdkafka); pylog holds the request until the markers are written, and the abort succeeds",
)
def test_apache_kafka_fails_the_same_race_fatally(apache_kafka: KafkaCluster, record_property: Any) -> None:
    """What Kafka answers in the race (recorded, not steered: its markers cannot be held): every round whose
    AddPartitionsToTxn was answered CONCURRENT_TRANSACTIONS ends with EndTxn(abort) INVALID_TXN_STATE, fatal; a
    round whose AddPartitionsToTxn succeeded aborts."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        future.result(30)
    lines = _Lines()
    producer = _producer(apache_kafka.bootstrap, "abort-race-kafka", lines)
    rounds = []
    for n in range(KAFKA_ROUNDS):
        seen = _abort_right_after_commit(producer, lines, n)
        rounds.append(seen)
        if seen.fatal:
            break
    record_property(
        "rounds", json.dumps([{k: v for k, v in asdict(r).items() if k != "log"} for r in rounds])
    )
    for n, seen in enumerate(rounds):
        if seen.add_partitions == "CONCURRENT_TRANSACTIONS":
            assert seen.outcome == "INVALID_TXN_STATE FATAL" and seen.end_txn[-1:] == ["INVALID_TXN_STATE"], (
                f"round {n}: Kafka answered otherwise than recorded: {seen.outcome}, EndTxn {seen.end_txn}:\n"
                + "\n".join(seen.log)
            )
        else:
            assert seen.outcome == "aborted", (n, seen.outcome, seen.log)
