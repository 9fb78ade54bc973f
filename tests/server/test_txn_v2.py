"""Transactions v2 (KIP-890 part 2) on a broker, over real sockets with raw requests, so a test can send what a
late or retried request of a v2 producer looks like: Produce v12 and TxnOffsetCommit v5 add their partition to the
transaction through the coordinator (no AddPartitionsToTxn / AddOffsetsToTxn), EndTxn v5 bumps the epoch on every
commit and abort and answers it, the markers carry it, so a batch of the previous epoch arriving after the commit
is refused and appends nothing (no hanging transaction: the last stable offset reaches the high watermark). The
same sequence with the partition's leader not the coordinator (AddPartitionsToTxn v5 over the wire) runs in
``test_txn_verification.py``'s cluster test (:func:`v2_commit_then_late_produce`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body
from tests.server.test_txn_verification import Txn
from tests.support.brokers import start_broker
from tests.support.cluster import wait_for

pytestmark = pytest.mark.timeout(60)

HOLD = "hold-markers"


def end_v2(txn: Txn, commit: bool, epoch: int | None = None) -> dict[str, Any]:
    """EndTxn v5 at the producer's epoch (or ``epoch``): the answer."""
    body = {
        "TransactionalId": txn.txn_id,
        "ProducerId": txn.pid,
        "ProducerEpoch": txn.epoch if epoch is None else epoch,
        "Committed": commit,
    }
    answer: dict[str, Any] = txn.coord.call(ApiKey.END_TXN, 5, body)
    return answer


def _produce(txn: Txn) -> dict[str, Any]:
    """Produce v12, retried while the answer is the retriable NOT_ENOUGH_REPLICAS (in a cluster the coordinator
    may still be writing the previous transaction's markers: CONCURRENT_TRANSACTIONS), as a producer retries."""
    answer: dict[str, Any] = wait_for(
        lambda: (a := txn.produce(version=12))["ErrorCode"] != ErrorCode.NOT_ENOUGH_REPLICAS and a,
        what="a produce the coordinator can add",
    )
    return answer


def v2_commit_then_late_produce(txn: Txn) -> None:
    """A v2 transaction committed, then a batch of it arriving late: refused (the markers carry the bumped epoch),
    nothing appended; the producer's next transaction at the answered epoch works, and the retry of its EndTxn
    is answered as the first one was."""
    epoch, (base, _) = txn.epoch, txn.offsets()
    assert _produce(txn)["ErrorCode"] == 0  # no AddPartitionsToTxn: the leader adds the partition
    answer = end_v2(txn, commit=True)
    assert answer["ErrorCode"] == 0
    after_commit = wait_for(
        lambda: txn.offsets() == (base + 3,) * 2 and txn.offsets(), what="the COMMIT marker"
    )
    late = txn.produce(version=12)  # the old epoch, the next sequence: a retry delayed past the commit
    assert txn.offsets() == after_commit, "a late batch was appended: its transaction would hang, LSO held"
    assert late["ErrorCode"] == ErrorCode.INVALID_PRODUCER_EPOCH, late
    assert (answer["ProducerId"], answer["ProducerEpoch"]) == (txn.pid, epoch + 1)
    txn.epoch, txn.sequence = epoch + 1, 0  # what the Java producer does with the answer
    assert _produce(txn)["ErrorCode"] == 0
    answer = end_v2(txn, commit=False)
    assert (answer["ErrorCode"], answer["ProducerEpoch"]) == (0, epoch + 2)
    wait_for(lambda: txn.offsets() == (base + 6,) * 2, what="the ABORT marker")
    txn.completed("CompleteAbort")  # the retry below meets CompleteAbort, not PrepareAbort (parked)
    retry = end_v2(txn, commit=False)  # the answer lost: the same request again
    assert (retry["ErrorCode"], retry["ProducerId"], retry["ProducerEpoch"]) == (0, txn.pid, epoch + 2)
    assert end_v2(txn, commit=True)["ErrorCode"] == ErrorCode.INVALID_TXN_STATE  # not a retry of that abort


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One broker for the module; its markers are held while the file ``HOLD`` names in its directory exists."""
    root = tmp_path_factory.mktemp("txnv2")
    settings = {"pylog.test.transaction.markers.hold.file": str(root / HOLD)}
    found = start_broker(root, settings)
    try:
        with RawConnection(found.bootstrap) as conn:
            for name in ("v2late", "v2offsets", "v2mixed", "v2next"):
                assert (
                    conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body(name))["Topics"][0]["ErrorCode"] == 0
                )
        yield found
    finally:
        (root / HOLD).unlink(missing_ok=True)
        found.stop()


@pytest.fixture(scope="module")
def single(broker: Any) -> str:
    bootstrap: str = broker.bootstrap
    return bootstrap


def test_a_late_batch_after_a_v2_commit_is_refused_and_the_epoch_moves_per_transaction(single: str) -> None:
    with RawConnection(single) as conn:
        v2_commit_then_late_produce(Txn(conn, conn, "v2-late", "v2late", 0))


def test_v2_abort_with_nothing_added_bumps_the_epoch_and_v1_requests_still_work(single: str) -> None:
    """A v2 producer may abort a transaction whose partitions never reached the coordinator (Empty): logged,
    epoch bumped; a commit there is INVALID_TXN_STATE. The v1 form (AddPartitionsToTxn, EndTxn v3) on the same
    broker keeps its epoch across transactions."""
    with RawConnection(single) as conn:
        txn = Txn(conn, conn, "v2-empty", "v2mixed", 0)
        assert end_v2(txn, commit=True)["ErrorCode"] == ErrorCode.INVALID_TXN_STATE
        answer = end_v2(txn, commit=False)
        assert (answer["ErrorCode"], answer["ProducerEpoch"]) == (0, txn.epoch + 1)
        old = Txn(conn, conn, "v1-same-broker", "v2mixed", 0)
        epoch = old.epoch
        for commit in (True, False):
            old.add()
            assert old.produce()["ErrorCode"] == 0
            old.end(commit=commit)
        assert old.epoch == epoch and old.produce()["ErrorCode"] == ErrorCode.INVALID_TXN_STATE


def _txn_commit(txn: Txn, group: str, version: int, offset: int) -> int:
    """TxnOffsetCommit of ``offset`` for the producer's partition: the partition's error."""
    body = {
        "TransactionalId": txn.txn_id,
        "GroupId": group,
        "ProducerId": txn.pid,
        "ProducerEpoch": txn.epoch,
        "GenerationId": -1,
        "MemberId": "",
        "GroupInstanceId": None,
        "Topics": [
            {
                "Name": txn.topic,
                "Partitions": [
                    {
                        "PartitionIndex": txn.partition,
                        "CommittedOffset": offset,
                        "CommittedLeaderEpoch": -1,
                        "CommittedMetadata": "",
                    }
                ],
            }
        ],
    }
    code: int = txn.coord.call(ApiKey.TXN_OFFSET_COMMIT, version, body)["Topics"][0]["Partitions"][0][
        "ErrorCode"
    ]
    return code


def _committed(txn: Txn, group: str) -> tuple[int, int]:
    """OffsetFetch (stable offsets only) of the producer's partition: (error, offset)."""
    body = {
        "GroupId": group,
        "Topics": [{"Name": txn.topic, "PartitionIndexes": [txn.partition]}],
        "RequireStable": True,
    }
    part = txn.coord.call(ApiKey.OFFSET_FETCH, 7, body)["Topics"][0]["Partitions"][0]
    return part["ErrorCode"], part["CommittedOffset"]


def test_txn_offset_commit_v5_adds_the_offsets_partition(single: str) -> None:
    """No AddOffsetsToTxn: TxnOffsetCommit v5 adds the group's ``__consumer_offsets`` partition, so the commit's
    marker makes the offsets visible; a v4 commit of the next transaction is only verified (refused)."""
    group = "v2-offsets-group"
    with RawConnection(single) as conn:
        txn = Txn(conn, conn, "v2-offsets", "v2offsets", 0)

        def commit(version: int, offset: int) -> int:
            return _txn_commit(txn, group, version, offset)

        def committed() -> tuple[int, int]:
            return _committed(txn, group)

        assert commit(5, 42) == ErrorCode.NONE
        answer = end_v2(txn, commit=True)
        assert answer["ErrorCode"] == 0
        assert committed() == (ErrorCode.NONE, 42)
        txn.epoch = answer["ProducerEpoch"]
        assert commit(4, 43) == ErrorCode.TRANSACTION_ABORTABLE  # v4 verifies only: nothing added it
        assert committed() == (ErrorCode.NONE, 42)


def test_a_produce_of_the_next_transaction_never_joins_the_previous_one_still_open(broker: Any) -> None:
    """EndTxn v5 is answered before its markers land; the producer's next transaction, at the bumped epoch, may
    reach a partition where the previous one is still open. Its Produce v12 must go to the coordinator
    (CONCURRENT_TRANSACTIONS until the markers are written: the retriable NOT_ENOUGH_REPLICAS), never join the
    open transaction (whose COMMIT would then commit the next transaction's records)."""
    hold = Path(broker.ctx.config.test_transaction_markers_hold_file)
    with RawConnection(broker.bootstrap) as conn:
        txn = Txn(conn, conn, "v2-next", "v2next", 0)
        epoch = txn.epoch
        assert _produce(txn)["ErrorCode"] == 0  # transaction N: offsets 0-1
        hold.touch()
        try:
            answer = end_v2(txn, commit=True)  # answered with N's markers held: PrepareCommit
            assert (answer["ErrorCode"], answer["ProducerEpoch"]) == (0, epoch + 1)
            txn.epoch, txn.sequence = epoch + 1, 0
            early = txn.produce(version=12)  # transaction N+1, N still open on the partition
            assert early["ErrorCode"] == ErrorCode.NOT_ENOUGH_REPLICAS, early
            assert "CONCURRENT_TRANSACTIONS" in (early["ErrorMessage"] or ""), early
            assert txn.offsets() == (2, 0), "the next transaction's batch joined the open one"
        finally:
            hold.unlink()
        asyncio.run_coroutine_threadsafe(_release(broker), broker.ctx.loop).result(10)
        assert txn.offsets() == (3, 3)  # N's COMMIT marker, over N's records only
        assert _produce(txn)["ErrorCode"] == 0  # now added to N+1
        assert txn.offsets() == (5, 3)  # N+1 open: its records were not committed by N's marker
        assert end_v2(txn, commit=False)["ErrorCode"] == 0
        wait_for(lambda: txn.offsets() == (6, 6), what="N+1's ABORT marker")


def test_a_txn_offset_commit_of_the_next_transaction_never_joins_the_previous_one_still_open(
    broker: Any,
) -> None:
    """The same for TxnOffsetCommit v5 on the group's offsets partition: an offset committed by transaction N+1
    while N's markers are pending is refused (COORDINATOR_NOT_AVAILABLE, retriable), so N's COMMIT marker does
    not make it visible."""
    hold = Path(broker.ctx.config.test_transaction_markers_hold_file)
    group = "v2-next-group"
    with RawConnection(broker.bootstrap) as conn:
        txn = Txn(conn, conn, "v2-next-offsets", "v2next", 0)
        assert _txn_commit(txn, group, 5, 10) == ErrorCode.NONE  # transaction N
        hold.touch()
        try:
            answer = end_v2(txn, commit=True)
            assert answer["ErrorCode"] == 0
            txn.epoch = answer["ProducerEpoch"]
            assert _txn_commit(txn, group, 5, 11) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        finally:
            hold.unlink()
        asyncio.run_coroutine_threadsafe(_release(broker), broker.ctx.loop).result(10)
        assert _committed(txn, group) == (ErrorCode.NONE, 10), "N's marker committed N+1's offset"
        assert _txn_commit(txn, group, 5, 11) == ErrorCode.NONE  # now added to N+1
        assert end_v2(txn, commit=False)["ErrorCode"] == 0
        assert _committed(txn, group) == (ErrorCode.NONE, 10)


async def _release(broker: Any) -> None:
    """The coordinator's periodic check, now: writes the held markers."""
    broker.ctx.txn_coordinator.abort_timed_out()
