"""DescribeTransactions (key 65, v0): the transaction coordinator's state of each named transactional id.

Per id: TRANSACTIONAL_ID_NOT_FOUND when the coordinator does not know it (or it expired), else its state
(Kafka's name), timeout, start time (-1 with no transaction started), producer id and epoch, and the partitions
of the open transaction (empty once complete). A broker with no transaction coordinator answers
COORDINATOR_NOT_AVAILABLE for every id.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_transactions
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = describe_transactions.REQUEST
MIN_VERSION = 0
MAX_VERSION = 0


def _describe(ctx: BrokerContext, transactional_id: str) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "ErrorCode": ErrorCode.NONE,
        "TransactionalId": transactional_id,
        "TransactionState": "",
        "TransactionTimeoutMs": 0,
        "TransactionStartTimeMs": -1,
        "ProducerId": -1,
        "ProducerEpoch": -1,
        "Topics": [],
    }
    code, meta = ctx.txn_coordinator.describe(transactional_id)
    answer["ErrorCode"] = code
    if meta is None:
        return answer
    topics: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        topics.setdefault(topic, []).append(partition)
    answer.update(
        TransactionState=meta.state.kafka_name,
        TransactionTimeoutMs=meta.timeout_ms,
        TransactionStartTimeMs=meta.start_ms,
        ProducerId=meta.producer_id,
        ProducerEpoch=meta.producer_epoch,
        Topics=[{"Topic": t, "Partitions": ps} for t, ps in topics.items()],
    )
    return answer


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "ThrottleTimeMs": 0,
        "TransactionStates": [
            _describe(ctx, tid)
            if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
            else {
                "ErrorCode": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "TransactionalId": tid,
                "TransactionState": "",
                "TransactionTimeoutMs": 0,
                "TransactionStartTimeMs": -1,
                "ProducerId": -1,
                "ProducerEpoch": -1,
                "Topics": [],
            }
            for tid in body["TransactionalIds"]
        ],
    }
