"""The transaction coordinator's one code path on both deployments' shapes, against real logs: a single node's
marker sender writes before it returns, so EndTxn and a producer's re-initialization complete at once; a
cluster's sends in the background, so the transaction stays in its Prepare state (CONCURRENT_TRANSACTIONS to the
producer) until the sender calls back, and a sender that gave up (``None``) leaves it for the next coordinator.
A single node leads every ``__transaction_state`` partition at coordinator epoch 0 (``load``); a coordinator that
leads nothing answers NOT_COORDINATOR."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.coordinator.transaction import (
    TRANSACTION_STATE_TOPIC,
    MarkerDone,
    MarkerRequest,
    TransactionConfig,
    TransactionCoordinator,
    TxnState,
)
from broker_runtime.coordinator.transaction.state import MAX_PRODUCER_EPOCH
from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.records import CONTROL_COMMIT, RecordBatchBuilder
from broker_runtime.server.node.internal_topics import LocalInternalTopic
from broker_runtime.server.replica_manager import ReplicaManager
from broker_runtime.server.topics import TopicManager
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager

STATE_PARTITIONS = 3
DATA = ("data", 0)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Node:
    """Real logs, topics and replica manager of one node, and a producer-id counter."""

    def __init__(self, root: Path) -> None:
        self.logs = LogManager([root], LogConfig())
        self.logs.startup()
        self.topics = TopicManager(self.logs, LogConfig())
        self.topics.load()
        if self.topics.partition_count(DATA[0]) is None:
            self.topics.create(DATA[0], 1)
        self.replicas = ReplicaManager(self.topics, wall_ms=_wall_ms)
        self.state = LocalInternalTopic(self.topics, TRANSACTION_STATE_TOPIC, STATE_PARTITIONS)
        self._next_id = 1000
        #: Cluster-shaped sender: the requests it was given, with their callbacks.
        self.deferred: list[tuple[MarkerRequest, MarkerDone]] = []

    def next_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def write_markers(self, request: MarkerRequest, done: MarkerDone) -> None:
        """A single node's sender: every marker appended before it returns."""
        done(
            {
                (topic, p): self.replicas.write_txn_marker(
                    topic,
                    p,
                    request.producer_id,
                    request.producer_epoch,
                    request.coordinator_epoch,
                    request.control_type,
                ).error
                for topic, p in request.partitions
            }
        )

    def defer_markers(self, request: MarkerRequest, done: MarkerDone) -> None:
        self.deferred.append((request, done))

    def coordinator(self, *, deferred: bool = False) -> TransactionCoordinator:
        return TransactionCoordinator(
            TransactionConfig(num_partitions=STATE_PARTITIONS),
            self.state,
            self.defer_markers if deferred else self.write_markers,
            self.next_id,
            _wall_ms,
            lambda topic: self.topics.partition_count(topic) is not None,
        )


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    found = Node(tmp_path)
    yield found
    found.logs.shutdown()


def _ongoing(coordinator: TransactionCoordinator, tid: str) -> tuple[int, int]:
    init = coordinator.init_producer_id(tid, 60_000)
    assert init.error == ErrorCode.NONE
    added = coordinator.add_partitions(tid, init.producer_id, init.producer_epoch, [DATA])
    assert added == {DATA: ErrorCode.NONE}
    return init.producer_id, init.producer_epoch


def test_a_single_node_leads_every_partition_and_completes_transactions_before_answering(node: Node) -> None:
    coordinator = node.coordinator()
    assert coordinator.init_producer_id("t", 60_000).error == ErrorCode.NOT_COORDINATOR  # leads nothing yet
    coordinator.load()
    assert coordinator.owned_partitions == dict.fromkeys(range(STATE_PARTITIONS), 0)
    pid, epoch = _ongoing(coordinator, "t")
    data_log = node.topics.get_log(*DATA)
    assert data_log is not None
    end_before = data_log.log_end_offset
    assert coordinator.end_txn("t", pid, epoch, commit=True) == ErrorCode.NONE
    meta = coordinator.metadata("t")
    assert meta is not None and meta.state == TxnState.COMPLETE_COMMIT
    assert data_log.log_end_offset == end_before + 1  # the COMMIT marker
    # A new producer instance over an open transaction: fenced and aborted at once, so it gets its epoch now.
    pid, epoch = _ongoing(coordinator, "t")
    again = coordinator.init_producer_id("t", 60_000)
    assert (
        again.error == ErrorCode.NONE and again.producer_epoch == epoch + 3
    )  # fence, abort (server TV 2), then its own
    meta = coordinator.metadata("t")
    assert meta is not None and meta.state == TxnState.EMPTY
    # What was written replays on a new coordinator over the same logs.
    replayed = node.coordinator()
    replayed.load()
    meta = replayed.metadata("t")
    assert meta is not None and (meta.producer_id, meta.producer_epoch) == (
        again.producer_id,
        again.producer_epoch,
    )


def test_a_background_sender_keeps_the_transaction_prepared_until_it_calls_back(node: Node) -> None:
    coordinator = node.coordinator(deferred=True)
    for partition in range(STATE_PARTITIONS):
        coordinator.become_leader(partition, 7)
    pid, epoch = _ongoing(coordinator, "t")
    assert coordinator.end_txn("t", pid, epoch, commit=True) == ErrorCode.NONE
    meta = coordinator.metadata("t")
    assert meta is not None and meta.state == TxnState.PREPARE_COMMIT
    [(request, done)] = node.deferred
    assert request.coordinator_epoch == 7 and request.control_type == CONTROL_COMMIT
    assert request.partitions == (DATA,)
    assert request.state_partition == coordinator.partition_for("t")
    assert coordinator.init_producer_id("t", 60_000).error == ErrorCode.CONCURRENT_TRANSACTIONS
    done(None)  # the sender gave up (no longer the coordinator): nothing is completed here
    assert meta.state == TxnState.PREPARE_COMMIT
    coordinator.abort_timed_out()  # the periodic task sends the Prepare state's markers again
    [_, (_, done)] = node.deferred
    done({DATA: ErrorCode.NONE})
    assert meta.state == TxnState.COMPLETE_COMMIT
    assert coordinator.init_producer_id("t", 60_000).error == ErrorCode.NONE


def _txn_batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    builder = RecordBatchBuilder(
        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence, is_transactional=True
    )
    builder.append(_wall_ms(), b"k", b"v")
    return bytes(builder.build())


def test_a_timed_out_transaction_at_the_exhausted_epoch_is_aborted_under_its_own_producer_id(
    node: Node,
) -> None:
    """At epoch MAX_PRODUCER_EPOCH (reached every 32767 transactions with transaction version 2) the timeout's
    fence and abort share Short.MAX_VALUE under the transaction's OWN producer id, so its ABORT marker closes
    the transaction on the data partition (the last stable offset reaches the high watermark); the next producer
    id takes over only once that marker is written (Kafka's prepareComplete)."""
    coordinator = node.coordinator()
    coordinator.load()
    init = coordinator.init_producer_id("t", 60_000)
    meta = coordinator.metadata("t")
    assert meta is not None
    pid = init.producer_id
    meta.producer_epoch = MAX_PRODUCER_EPOCH  # as after 32766 transactions (the next write logs it)
    added = coordinator.add_partitions("t", pid, MAX_PRODUCER_EPOCH, [DATA], client_version=2)
    assert added == {DATA: ErrorCode.NONE}
    assert (
        node.replicas.append(*DATA, _txn_batch(pid, MAX_PRODUCER_EPOCH, 0), 9, acks=-1).error
        == ErrorCode.NONE
    )
    assert node.replicas.last_stable_offset(*DATA) < node.replicas.high_watermark(*DATA)  # type: ignore[operator]
    meta.start_ms = _wall_ms() - 120_000  # past its timeout
    assert coordinator.abort_timed_out() == 1
    assert node.replicas.has_ongoing_transaction(*DATA, pid, MAX_PRODUCER_EPOCH) is False
    assert node.replicas.last_stable_offset(*DATA) == node.replicas.high_watermark(*DATA)
    assert meta.state == TxnState.COMPLETE_ABORT
    assert meta.producer_id != pid and meta.producer_epoch == 0 and meta.previous_producer_id == pid
    # The old producer is fenced: its partition refuses its epoch, its coordinator its id.
    late = node.replicas.append(*DATA, _txn_batch(pid, MAX_PRODUCER_EPOCH, 1), 9, acks=-1)
    assert late.error in (ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED), late
    assert coordinator.add_partitions("t", pid, MAX_PRODUCER_EPOCH, [DATA], client_version=2) == {
        DATA: ErrorCode.INVALID_PRODUCER_ID_MAPPING
    }
    replayed = node.coordinator()
    replayed.load()
    again = replayed.metadata("t")
    assert again is not None and (again.state, again.producer_id, again.producer_epoch) == (
        TxnState.COMPLETE_ABORT,
        meta.producer_id,
        0,
    )


def test_a_timeout_abort_whose_state_write_fails_is_retried_by_the_next_pass(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing written (an injected ``__transaction_state`` failure, as a short ISR raises it): the transaction
    stays Ongoing at its epoch, so the next timeout pass fences and aborts it (not parked in the in-memory
    PrepareEpochFence state, which no pass looks at)."""
    coordinator = node.coordinator()
    coordinator.load()
    pid, epoch = _ongoing(coordinator, "t")
    assert node.replicas.append(*DATA, _txn_batch(pid, epoch, 0), 9, acks=-1).error == ErrorCode.NONE
    meta = coordinator.metadata("t")
    assert meta is not None
    meta.start_ms = _wall_ms() - 120_000  # past its timeout
    append = coordinator._append

    def refused(*args: object) -> None:
        raise KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "__transaction_state-0: ISR [1] below 2 (injected)")

    monkeypatch.setattr(coordinator, "_append", refused)
    assert coordinator.abort_timed_out() == 0
    assert (meta.state, meta.producer_id, meta.producer_epoch) == (TxnState.ONGOING, pid, epoch)
    monkeypatch.setattr(coordinator, "_append", append)
    assert coordinator.abort_timed_out() == 1
    assert meta.state == TxnState.COMPLETE_ABORT
    assert node.replicas.last_stable_offset(*DATA) == node.replicas.high_watermark(*DATA)
