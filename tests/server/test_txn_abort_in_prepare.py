"""EndTxn at transaction version 1 while the previous transaction's markers are still being written (issue 36,
nemesis seed 1894834725): an abort there is INVALID_TXN_STATE at once, as Kafka answers it; a retry of the
commit waits for the markers.

The sequence the nemesis saw: a transaction is committed while one of its partitions has no leader, so its
markers wait (PrepareCommit, about 20 s); the next transaction's AddPartitionsToTxn is answered
CONCURRENT_TRANSACTIONS again and again (each after waiting :data:`~broker_runtime.server.txn_parking.
COMPLETION_WAIT_MS` for the markers); its records time out in the client (``message.timeout.ms``), which makes the
transaction abortable, and the application aborts. librdkafka sends EndTxn(abort) because it counts every
AddPartitionsToTxn answered with a broker error as one the coordinator may have applied (``txn_req_cnt`` in
``rd_kafka_txn_handle_AddPartitionsToTxn``; ``rd_kafka_txn_op_abort_transaction`` skips EndTxn only when that
count is 0). Kafka's ``TransactionCoordinator.endTransaction`` (transaction version 1) answers an abort in
PrepareCommit, CompleteCommit or Empty INVALID_TXN_STATE, which ``rd_kafka_txn_handle_EndTxn`` makes FATAL: with
Kafka this client fails the same way (tests/replication/test_txn_abort_race.py records Kafka doing it in the
short form of the race). pylog used to answer the abort CONCURRENT_TRANSACTIONS in PrepareCommit, park it until
the markers were written and then answer INVALID_TXN_STATE from CompleteCommit: the same fatal error, later.

Held on one broker in this process: the markers are held by ``pylog.test.transaction.markers.hold.file`` (a
single node's marker writes fail while the file exists), the requests go to the handlers on the broker's loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import create_topic
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.server import txn_parking
from broker_runtime.server.handlers import end_txn
from tests.support.nemesis.workload import AddsSeen
from tests.support.transactions import broker_holding_markers, commit_held

pytestmark = pytest.mark.timeout(60)

TOPIC, TXN_ID = "abort-in-prepare", "abort-in-prepare-txn"
SETTINGS = {
    "transaction.state.log.num.partitions": "1",
    # the markers are released by the test (the coordinator's periodic check runs when the test calls it)
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "600000",
}


def test_abort_while_the_commit_markers_are_written_is_invalid_txn_state_at_once(tmp_path: Path) -> None:
    with broker_holding_markers(tmp_path, SETTINGS) as (broker, hold):
        create_topic(broker.bootstrap, TOPIC, 1)
        producer, meta = commit_held(broker, hold, TOPIC, TXN_ID)
        ctx = broker.ctx
        coordinator = ctx.txn_coordinator
        header = RequestHeader(26, 3, 1, "test")  # EndTxn v3: transaction version 1

        def body(commit: bool) -> dict[str, Any]:
            return {
                "TransactionalId": TXN_ID,
                "ProducerId": meta.producer_id,
                "ProducerEpoch": meta.producer_epoch,
                "Committed": commit,
            }

        async def in_prepare() -> tuple[Any, Any]:
            aborted = end_txn.handle(ctx, header, body(False))
            committed = end_txn.handle(ctx, header, body(True))  # the commit's retry: waits for the markers
            assert isinstance(committed, asyncio.Future), committed
            hold.unlink()
            coordinator.abort_timed_out()  # markers written, CompleteCommit logged, the parked retry rerun
            return aborted, await committed

        aborted, committed = asyncio.run_coroutine_threadsafe(in_prepare(), ctx.loop).result(30)
        assert not isinstance(aborted, asyncio.Future), (
            "EndTxn(abort) in PrepareCommit was parked until the markers were written; Kafka answers it "
            "INVALID_TXN_STATE at once"
        )
        assert aborted["ErrorCode"] == ErrorCode.INVALID_TXN_STATE, aborted
        assert committed["ErrorCode"] == ErrorCode.NONE, committed
        assert coordinator.end_txn(TXN_ID, meta.producer_id, meta.producer_epoch, commit=False) == (
            ErrorCode.INVALID_TXN_STATE
        )  # and from CompleteCommit, as Kafka
        producer.flush(0)


def test_librdkafka_abort_after_concurrent_adds_is_fatal_and_named_as_kafka_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The nemesis's sequence with librdkafka: the next transaction's AddPartitionsToTxn are answered
    CONCURRENT_TRANSACTIONS (parked a short while here, instead of 10 s) while the markers are held, the
    application aborts: FATAL INVALID_TXN_STATE, which :class:`~tests.support.nemesis.workload.AddsSeen` names
    an error Kafka gives this client too; with a partition accepted first, the abort succeeds."""
    monkeypatch.setattr(txn_parking, "COMPLETION_WAIT_MS", 200)
    with broker_holding_markers(tmp_path, SETTINGS) as (broker, hold):
        create_topic(broker.bootstrap, TOPIC, 1)
        adds = AddsSeen()
        logger = logging.getLogger(f"{__name__}.librdkafka")
        logger.setLevel(logging.DEBUG)
        logger.addFilter(adds)
        producer, _ = commit_held(broker, hold, TOPIC, TXN_ID, debug="eos", logger=logger)
        producer.begin_transaction()
        producer.produce(TOPIC, value=b"never registered", partition=0)
        deadline = time.monotonic() + 20
        while adds.concurrent < 2 and time.monotonic() < deadline:
            producer.poll(0.05)
        assert adds.concurrent >= 2 and not adds.registered, vars(adds)
        with pytest.raises(KafkaException) as raised:
            producer.abort_transaction(30)
        err = raised.value.args[0]
        assert err.code() == KafkaError.INVALID_TXN_STATE and err.fatal(), err
        with pytest.raises(KafkaException):  # a fatally failed producer raises its error again (the nemesis's
            producer.poll(0)  # workload died of that once), after serving librdkafka's log lines
        assert "CONCURRENT_TRANSACTIONS" in adds.kafka_too(err), vars(adds)
        story = adds.story()  # what a nemesis failure report prints of this transaction
        assert "2 x Producer attempted to update a transaction while another concurrent" in story, story
        assert "partitions registered: none" in story and "EndTxn returned INVALID_TXN_STATE" in story, story
        adds.registered = 1  # had the coordinator accepted a partition, Kafka's abort would have succeeded
        assert adds.kafka_too(err) == "", "an abort of an Ongoing transaction named as failing with Kafka too"
