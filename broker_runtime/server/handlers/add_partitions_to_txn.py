"""AddPartitionsToTxn (key 24, v0-3): a transactional producer adds partitions to its open transaction.

Decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.add_partitions`, which holds the rules), encodes one error per partition. A request that
finds the previous transaction's markers being written waits for them instead of answering
CONCURRENT_TRANSACTIONS (:mod:`broker_runtime.server.txn_parking`). v4+ (the
KIP-890 broker-to-coordinator batch and verification) is not advertised. Without a coordinator (a cluster, for
now) every partition gets COORDINATOR_NOT_AVAILABLE.
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
MAX_VERSION = 3


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    # after every earlier unanswered request of the same transactional id, as Kafka (txn_parking.in_order)
    return in_order(ctx, body["V3AndBelowTransactionalId"], lambda: _handle(ctx, header, body))


def _handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    partitions = [(t["Name"], p) for t in body["V3AndBelowTopics"] for p in t["Partitions"]]
    coordinator = ctx.txn_coordinator
    txn_id = body["V3AndBelowTransactionalId"]
    denied = {t for t, _ in partitions if not ctx.authorized(AclOperation.WRITE, ResourceType.TOPIC, t)}
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
    return answer_after_state_write(ctx, answer)
