"""A transaction coordinator answers from a transactional id's state only once that state is replicated (issue 36,
the nemesis soak's fatal INVALID_TXN_STATE on abort, seed 997525811).

pylog's coordinator applies a state record in memory as soon as the leader of its ``__transaction_state``
partition appended it; the request that wrote it is answered once it is replicated, or with a retriable error
when that fails (COORDINATOR_NOT_AVAILABLE: the ISR shrank, the wait timed out). The record stays in memory all
the same. The sequence under faults (a slow disk and late heartbeats on the coordinator's node):

1. AddPartitionsToTxn of a new transaction: Ongoing is appended and applied; its replication fails, the client
   is answered COORDINATOR_NOT_AVAILABLE and retries;
2. the retry finds its partitions already in the Ongoing transaction (Kafka's shortcut: "already in the metadata,
   reply OK immediately") and was answered NONE at once, with nothing replicated: librdkafka registers the
   partitions and produces;
3. the coordinator's node is fenced; the new leader of the partition, elected from the ISR, never had the
   Ongoing record and loads the previous transaction's CompleteCommit;
4. the application aborts: EndTxn(abort) meets CompleteCommit, INVALID_TXN_STATE, FATAL for librdkafka.

Kafka's cache holds only replicated states (``TransactionStateManager.appendTransactionToLog`` completes the
transition in its replication callback and drops the pending one when the append fails), so step 2 appends again
and waits for replication: the client is told NONE only about a state any new coordinator loads. pylog now waits
for the id's last state record before any answer read from its state (``answer_after_state_write`` with the ids).

Held in one moment on two in-process brokers: on the coordinator's event loop, with no turn for the follower's
fetch in between, the Ongoing state is written (as step 1's request did) and the retry arrives.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC
from broker_runtime.errors import ErrorCode
from broker_runtime.launch import create_topic
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.server.handlers import add_partitions_to_txn
from broker_runtime.server.transactions import ensure_state_topic
from tests.support.brokers import start_node_brokers
from tests.support.cluster import FAST, wait_for

pytestmark = pytest.mark.timeout(60)

TOPIC, TXN_ID = "unreplicated-state", "unreplicated-state-txn"


def test_add_partitions_already_in_an_unreplicated_transaction_waits_for_its_replication(
    tmp_path: Path,
) -> None:
    cluster_dir = tmp_path / "cluster"
    cluster_dir.mkdir()
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "pylog.cluster.dir": str(cluster_dir),
        **FAST,
        "transaction.state.log.num.partitions": "1",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "600000",
        "auto.leader.rebalance.enable": "false",
    }
    brokers = start_node_brokers(tmp_path, props, nodes=2)
    try:
        bootstrap = ",".join(b.bootstrap for b in brokers)
        create_topic(bootstrap, TOPIC, 1)
        first = brokers[0].ctx
        asyncio.run_coroutine_threadsafe(_call(ensure_state_topic, first), first.loop).result(30)
        leader = wait_for(
            lambda: next((b for b in brokers if 0 in b.ctx.txn_coordinator.owned_partitions), None),
            what=f"a coordinator of {TRANSACTION_STATE_TOPIC}-0",
        )
        ctx = leader.ctx
        coordinator = ctx.txn_coordinator
        replica = wait_for(
            lambda: (
                (p := ctx.replicas.partition(TRANSACTION_STATE_TOPIC, 0)) is not None
                and len(p.isr) == 2
                and p
            ),
            what=f"both brokers in the ISR of {TRANSACTION_STATE_TOPIC}-0",
        )
        init = asyncio.run_coroutine_threadsafe(
            _call(coordinator.init_producer_id, TXN_ID, 60_000), ctx.loop
        ).result(30)
        assert init.error == ErrorCode.NONE, init
        wait_for(lambda: replica.log.high_watermark == replica.log.log_end_offset, what="the init replicated")

        async def the_moment() -> tuple[Any, int, int]:
            # 1. the first AddPartitionsToTxn's write: appended and applied, its answer (an error) not awaited
            coordinator.take_appended()
            added = coordinator.add_partitions(TXN_ID, init.producer_id, init.producer_epoch, [(TOPIC, 0)])
            assert set(added.values()) == {ErrorCode.NONE}, added
            coordinator.take_appended()
            # 2. its retry, in the same turn of the loop: nothing new to write
            body = {
                "V3AndBelowTransactionalId": TXN_ID,
                "V3AndBelowProducerId": init.producer_id,
                "V3AndBelowProducerEpoch": init.producer_epoch,
                "V3AndBelowTopics": [{"Name": TOPIC, "Partitions": [0]}],
            }
            answer = add_partitions_to_txn.handle(ctx, RequestHeader(24, 3, 1, "test"), body)
            return answer, replica.log.high_watermark, replica.log.log_end_offset

        answer, hw, leo = asyncio.run_coroutine_threadsafe(the_moment(), ctx.loop).result(30)
        assert hw < leo, "the follower fetched the Ongoing record within the moment; the test held nothing"
        assert isinstance(answer, asyncio.Future), (
            f"AddPartitionsToTxn answered {answer} at once from an Ongoing state not replicated (high watermark "
            f"{hw}, its record ends at {leo}): a coordinator elected from the ISR would not know the transaction, "
            "and the client's abort would be INVALID_TXN_STATE"
        )
        answered = asyncio.run_coroutine_threadsafe(_awaited(answer), ctx.loop).result(30)
        codes = {
            p["PartitionErrorCode"]
            for t in answered["ResultsByTopicV3AndBelow"]
            for p in t["ResultsByPartition"]
        }
        assert codes == {ErrorCode.NONE}, answered  # once replicated, the partitions are in the transaction
        assert replica.log.high_watermark >= leo
    finally:
        for b in brokers:
            b.stop()


async def _call(fn: Any, *args: Any) -> Any:
    return fn(*args)


async def _awaited(future: Any) -> Any:
    return await future
