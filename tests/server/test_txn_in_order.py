"""Requests of one transactional id are decided one at a time, in the order they came (issue 36, found by the
nemesis): an EndTxn(abort) pipelined behind an AddPartitionsToTxn that waits for the previous transaction's
markers is decided after it, also when it arrives in the very moment the markers complete.

The moment, held open on one broker in this process: the previous transaction is committed with its markers held
(``pylog.test.transaction.markers.hold.file``: a single node's marker writes fail while the file exists, so the
transaction stays in PrepareCommit), an AddPartitionsToTxn for the next transaction parks; then, in one turn of
the broker's event loop, the markers are released and written (the coordinator's periodic check) -- which
completes the commit and schedules the parked request's rerun -- and the EndTxn(abort) arrives. Decided at once,
it met CompleteCommit: INVALID_TXN_STATE, which librdkafka makes fatal. In Kafka the network layer reads a
connection's next request only after answering the previous one, so it can never overtake it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch import create_topic
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.server.handlers import add_partitions_to_txn, end_txn
from tests.support.transactions import broker_holding_markers, commit_held

pytestmark = pytest.mark.timeout(60)

TOPIC, TXN_ID = "in-order", "in-order-txn"
SETTINGS = {
    "transaction.state.log.num.partitions": "1",
    # the periodic check must not write the markers before the test's moment: it runs in the moment itself
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "600000",
}


async def _answer(result: Any) -> Any:
    return await result if isinstance(result, asyncio.Future) else result


def test_end_txn_arriving_as_the_markers_complete_waits_for_the_parked_add_partitions(tmp_path: Path) -> None:
    with broker_holding_markers(tmp_path, SETTINGS) as (broker, hold):
        create_topic(broker.bootstrap, TOPIC, 2)
        producer, meta = commit_held(broker, hold, TOPIC, TXN_ID)
        ctx = broker.ctx
        coordinator = ctx.txn_coordinator
        header = RequestHeader(0, 0, 1, "test")
        add_body = {
            "V3AndBelowTransactionalId": TXN_ID,
            "V3AndBelowProducerId": meta.producer_id,
            "V3AndBelowProducerEpoch": meta.producer_epoch,
            "V3AndBelowTopics": [{"Name": TOPIC, "Partitions": [1]}],
        }
        end_body = {
            "TransactionalId": TXN_ID,
            "ProducerId": meta.producer_id,
            "ProducerEpoch": meta.producer_epoch,
            "Committed": False,
        }

        async def the_moment() -> tuple[Any, Any]:
            added = add_partitions_to_txn.handle(ctx, header, add_body)
            assert isinstance(added, asyncio.Future), (
                f"AddPartitionsToTxn did not wait for the markers: {added}"
            )
            hold.unlink()
            coordinator.abort_timed_out()  # markers written, CompleteCommit logged, the parked rerun scheduled
            ended = end_txn.handle(ctx, header, end_body)  # the same turn of the loop
            return await _answer(added), await _answer(ended)

        added, ended = asyncio.run_coroutine_threadsafe(the_moment(), ctx.loop).result(30)
        codes = [
            p["PartitionErrorCode"]
            for t in added["ResultsByTopicV3AndBelow"]
            for p in t["ResultsByPartition"]
        ]
        assert codes == [ErrorCode.NONE], added
        assert ended["ErrorCode"] == ErrorCode.NONE, (
            f"EndTxn(abort) answered {ErrorCode(ended['ErrorCode']).name}: decided before the AddPartitionsToTxn "
            "it followed"
        )
        producer.flush(0)
