"""The transaction coordinator's transaction version 2 (KIP-890 part 2, Kafka's ``endTransaction`` for a client that
``supportsEpochBump``), against real logs: the epoch bumped by every EndTxn v5 and carried by the markers, the
producer id rotated when the epoch runs out (markers at the exhausted epoch under the old id, the new id at epoch 0
once they are written), the retries told apart from the next transaction by the epoch, and a coordinator
restarted between the Prepare record and the markers finishing with the bumped epoch (the transaction log's
version 1 fields: ClientTransactionVersion, NextProducerId, PreviousProducerId)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.coordinator.transaction import TxnState
from broker_runtime.coordinator.transaction.log_format import TxnLogValue, decode_value, encode_value
from broker_runtime.coordinator.transaction.state import MAX_PRODUCER_EPOCH
from broker_runtime.errors import ErrorCode
from tests.coordinator.test_transaction_coordinator import DATA, Node

TV2 = 2


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    found = Node(tmp_path)
    yield found
    found.logs.shutdown()


def _partition_epoch(node: Node, pid: int) -> int:
    """The producer's epoch in the data partition's producer state (what its markers set)."""
    replica = node.replicas.partition(*DATA)
    assert replica is not None
    entry = replica.log.producer_state.last_entry(pid)
    assert entry is not None
    return entry.producer_epoch


def test_every_v2_end_bumps_the_epoch_and_its_markers_carry_it(node: Node) -> None:
    coordinator = node.coordinator()
    coordinator.load()
    init = coordinator.init_producer_id("t", 60_000)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions("t", pid, epoch, [DATA], client_version=TV2) == {DATA: ErrorCode.NONE}
    assert coordinator.end_transaction("t", pid, epoch, True, TV2) == (ErrorCode.NONE, pid, epoch + 1)
    meta = coordinator.metadata("t")
    assert meta is not None and (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_COMMIT, epoch + 1)
    assert _partition_epoch(node, pid) == epoch + 1
    # the old epoch is the retry of that commit (answered again), and fenced for anything else
    assert coordinator.end_transaction("t", pid, epoch, True, TV2) == (ErrorCode.NONE, pid, epoch + 1)
    assert coordinator.end_transaction("t", pid, epoch, False, TV2).error == ErrorCode.INVALID_TXN_STATE
    assert coordinator.add_partitions("t", pid, epoch, [DATA], client_version=TV2) == {
        DATA: ErrorCode.PRODUCER_FENCED
    }
    # the next transaction, at the answered epoch
    assert coordinator.add_partitions("t", pid, epoch + 1, [DATA], client_version=TV2) == {
        DATA: ErrorCode.NONE
    }
    assert coordinator.end_transaction("t", pid, epoch + 1, False, TV2) == (ErrorCode.NONE, pid, epoch + 2)
    assert _partition_epoch(node, pid) == epoch + 2
    # an abort after a completed transaction (the producer cannot know its implicit adds did not arrive)
    assert coordinator.end_transaction("t", pid, epoch + 2, False, TV2) == (ErrorCode.NONE, pid, epoch + 3)
    assert coordinator.end_transaction("t", pid, epoch + 3, True, TV2).error == ErrorCode.INVALID_TXN_STATE
    # a v1 EndTxn on the same coordinator keeps the epoch
    assert coordinator.add_partitions("t", pid, epoch + 3, [DATA]) == {DATA: ErrorCode.NONE}
    assert coordinator.end_txn("t", pid, epoch + 3, True) == ErrorCode.NONE
    assert coordinator.metadata("t").producer_epoch == epoch + 3  # type: ignore[union-attr]


def test_an_exhausted_epoch_rotates_the_producer_id_once_the_markers_are_written(node: Node) -> None:
    coordinator = node.coordinator()
    coordinator.load()
    init = coordinator.init_producer_id("t", 60_000)
    pid = init.producer_id
    meta = coordinator.metadata("t")
    assert meta is not None
    meta.producer_epoch = MAX_PRODUCER_EPOCH  # as after 32766 transactions
    assert coordinator.add_partitions("t", pid, MAX_PRODUCER_EPOCH, [DATA], client_version=TV2) == {
        DATA: ErrorCode.NONE
    }
    answer = coordinator.end_transaction("t", pid, MAX_PRODUCER_EPOCH, True, TV2)
    assert answer == (ErrorCode.NONE, pid, MAX_PRODUCER_EPOCH + 1)  # Kafka answers from the Prepare state
    assert _partition_epoch(node, pid) == MAX_PRODUCER_EPOCH + 1  # the markers: the old id, the last epoch
    new_pid = meta.producer_id
    assert new_pid != pid and meta.producer_epoch == 0 and meta.previous_producer_id == pid
    assert meta.next_producer_id == -1 and meta.state == TxnState.COMPLETE_COMMIT
    # the retry of that EndTxn names the old id at the exhausted epoch
    assert coordinator.end_transaction("t", pid, MAX_PRODUCER_EPOCH, True, TV2) == (
        ErrorCode.NONE,
        new_pid,
        0,
    )
    # the producer asking for an id again with what it was answered is not fenced
    again = coordinator.init_producer_id("t", 60_000, pid, MAX_PRODUCER_EPOCH + 1)
    assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.NONE, new_pid, 1)


def test_a_restart_between_prepare_and_markers_finishes_with_the_bumped_epoch(node: Node) -> None:
    """The cluster-shaped sender holds the markers (a crash before they were written); a coordinator started on
    the same logs finds PrepareCommit at epoch + 1 with the next producer id and writes the markers with them."""
    first = node.coordinator(deferred=True)
    first.load()
    init = first.init_producer_id("t", 60_000)
    pid = init.producer_id
    meta = first.metadata("t")
    assert meta is not None
    meta.producer_epoch = MAX_PRODUCER_EPOCH
    first.add_partitions("t", pid, MAX_PRODUCER_EPOCH, [DATA], client_version=TV2)
    assert first.end_transaction("t", pid, MAX_PRODUCER_EPOCH, True, TV2).error == ErrorCode.NONE
    assert meta.state == TxnState.PREPARE_COMMIT and node.deferred  # markers not written: "crash" now
    next_pid = meta.next_producer_id
    assert next_pid >= 0

    second = node.coordinator()
    second.load()  # replays the log, completes the Prepare state
    restored = second.metadata("t")
    assert restored is not None
    assert (restored.state, restored.producer_id, restored.producer_epoch) == (
        TxnState.COMPLETE_COMMIT,
        next_pid,
        0,
    )
    assert restored.previous_producer_id == pid and restored.client_version == TV2
    assert _partition_epoch(node, pid) == MAX_PRODUCER_EPOCH + 1
    third = node.coordinator()
    third.load()  # and the Complete record keeps all of it
    again = third.metadata("t")
    assert again is not None
    assert (again.producer_id, again.producer_epoch, again.previous_producer_id) == (next_pid, 0, pid)


def test_the_log_value_v1_fields_round_trip_and_v0_reads_with_defaults() -> None:
    value = TxnLogValue(7, 3, 60_000, int(TxnState.PREPARE_ABORT), frozenset({DATA}), 10, 5, 6, 8, TV2)
    data = encode_value(value)
    assert data[:2] == b"\x00\x01"  # value version 1, as Kafka from transaction.version 1
    assert decode_value(data) == value
    v0 = b"\x00\x00" + bytes.fromhex("0000000000000007" + "0003" + "0000ea60" + "03" + "00000000") + bytes(16)
    assert decode_value(v0) == TxnLogValue(7, 3, 60_000, 3, frozenset(), 0, 0)


def test_a_timed_out_v2_transaction_fences_its_producer(node: Node) -> None:
    """The periodic abort of a transaction past its timeout runs at the server's transaction version 2, as
    Kafka's: fence (epoch + 1) and abort (+ 1 again), markers at epoch + 2, so the producer's own EndTxn at its
    epoch is not mistaken for the retry of a v2 EndTxn: PRODUCER_FENCED."""
    coordinator = node.coordinator()
    coordinator.load()
    init = coordinator.init_producer_id("t", 1)
    pid, epoch = init.producer_id, init.producer_epoch
    assert coordinator.add_partitions("t", pid, epoch, [DATA], client_version=TV2) == {DATA: ErrorCode.NONE}
    meta = coordinator.metadata("t")
    assert meta is not None
    meta.start_ms -= 1_000  # past its 1 ms timeout
    assert coordinator.abort_timed_out() == 1
    assert (meta.state, meta.producer_epoch) == (TxnState.COMPLETE_ABORT, epoch + 2)
    assert _partition_epoch(node, pid) == epoch + 2
    assert coordinator.end_transaction("t", pid, epoch, False, TV2).error == ErrorCode.PRODUCER_FENCED
    assert coordinator.end_transaction("t", pid, epoch, True, TV2).error == ErrorCode.PRODUCER_FENCED
