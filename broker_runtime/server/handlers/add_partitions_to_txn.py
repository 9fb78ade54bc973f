"""AddPartitionsToTxn (key 24, v0-5): a transactional producer adds partitions to its open transaction (v0-3);
a partition leader asks whether partitions are in a transaction (v4-5, KIP-890 part 1).

v0-3 (clients): decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.add_partitions`, which holds the rules), encodes one error per partition. A request that
finds the previous transaction's markers being written waits for them instead of answering
CONCURRENT_TRANSACTIONS (:mod:`broker_runtime.server.txn_parking`). Authorization: WRITE on the transactional id
and on every topic.

v4-5 (brokers; Kafka's client builder never sends them): a batch of transactions. Authorization, as Kafka's
``handleAddPartitionsToTxnRequest``: CLUSTER_ACTION on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED.
A transaction with ``VerifyOnly`` is answered by :meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.verify_partitions` (nothing written; a partition leader asks it before the first
transactional batch of a producer, :mod:`broker_runtime.server.txn_verification`); one without adds its
partitions as v0-3 do (no request parking: the asking broker retries): at v5 that is a partition leader adding
the partition of a transaction version 2 producer (Produce v12, TxnOffsetCommit v5), and the coordinator records
the transaction as version 2 (Kafka's ``transactionVersionForAddPartitionsToTxn``). v5 also adds
TRANSACTION_ABORTABLE to the errors a v4 asker may get.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, add_partitions_to_txn
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.transactions import answer_after_state_write
from broker_runtime.server.txn_parking import in_order, park_until_completed

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = add_partitions_to_txn.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    if header.api_version >= 4:
        return _handle_batch(ctx, body, header.api_version)
    if not ctx.authorized(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["V3AndBelowTransactionalId"]
    ):
        return _handle(ctx, header, body)  # refused at once: never queued behind the id's own requests
    # after every earlier unanswered request of the same transactional id, as Kafka (txn_parking.in_order)
    return in_order(ctx, body["V3AndBelowTransactionalId"], lambda: _handle(ctx, header, body))


def _handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    partitions = [(t["Name"], p) for t in body["V3AndBelowTopics"] for p in t["Partitions"]]
    coordinator = ctx.txn_coordinator
    txn_id = body["V3AndBelowTransactionalId"]
    denied = {t for t, _ in partitions if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, t)}
    read: list[str] = []  # the transactional id whose state the answer comes from
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        results = dict.fromkeys(partitions, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif denied:
        # Kafka: the refused topics' partitions fail, the others are not attempted.
        results = {
            tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in partitions
        }
    else:
        if any(ctx.topics.partition_count(t) is None for t, _ in partitions):
            ctx.refresh_cluster()
        coordinator.take_appended()  # only this request's state writes are waited for
        results = coordinator.add_partitions(
            body["V3AndBelowTransactionalId"],
            body["V3AndBelowProducerId"],
            body["V3AndBelowProducerEpoch"],
            partitions,
        )
        read.append(txn_id)

    def answer(failed: ErrorCode | None) -> dict[str, Any]:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), code in results.items():
            topics.setdefault(topic, []).append(
                {"PartitionIndex": partition, "PartitionErrorCode": failed or code}
            )
        return {
            "ThrottleTimeMs": 0,
            "ResultsByTopicV3AndBelow": [{"Name": t, "ResultsByPartition": ps} for t, ps in topics.items()],
        }

    if results and set(results.values()) == {ErrorCode.CONCURRENT_TRANSACTIONS}:
        parked = park_until_completed(
            ctx, txn_id, "AddPartitionsToTxn", lambda: _handle(ctx, header, body), lambda: answer(None)
        )
        if parked is not None:
            return parked
    return answer_after_state_write(ctx, answer, read)


def _handle_batch(ctx: BrokerContext, body: dict[str, Any], version: int) -> Any:
    """v4+: the transactions of a partition leader's verification (or addition), one result each."""
    transactions = body["Transactions"]
    if not ctx.inter_broker_allowed():
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "ResultsByTransaction": [],
        }
    coordinator = ctx.txn_coordinator
    coordinator.take_appended()  # only this request's state writes are waited for
    results: list[tuple[str, dict[tuple[str, int], ErrorCode]]] = []
    for txn in transactions:
        partitions = [(t["Name"], p) for t in txn["Topics"] for p in t["Partitions"]]
        if not txn["TransactionalId"]:
            codes = dict.fromkeys(partitions, ErrorCode.INVALID_REQUEST)
        elif txn["VerifyOnly"]:
            codes = coordinator.verify_partitions(
                txn["TransactionalId"], txn["ProducerId"], txn["ProducerEpoch"], partitions
            )
        else:
            codes = coordinator.add_partitions(
                txn["TransactionalId"],
                txn["ProducerId"],
                txn["ProducerEpoch"],
                partitions,
                client_version=2 if version >= 5 else 0,
            )
        results.append((txn["TransactionalId"], codes))
    read = [txn_id for txn_id, _ in results if txn_id]

    def answer(failed: ErrorCode | None) -> dict[str, Any]:
        out = []
        for txn_id, codes in results:
            topics: dict[str, list[dict[str, Any]]] = {}
            for (topic, partition), code in codes.items():
                topics.setdefault(topic, []).append(
                    {"PartitionIndex": partition, "PartitionErrorCode": failed or code}
                )
            out.append(
                {
                    "TransactionalId": txn_id,
                    "TopicResults": [{"Name": t, "ResultsByPartition": ps} for t, ps in topics.items()],
                }
            )
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.NONE, "ResultsByTransaction": out}

    return answer_after_state_write(ctx, answer, read)
