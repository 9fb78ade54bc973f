"""ListTransactions (key 66, v0-1): the transactional ids this broker's coordinator knows, filtered.

Filters as Kafka's: ``StateFilters`` (Kafka's state names; names no state has are echoed in
``UnknownStateFilters`` and, given alone, match nothing), ``ProducerIdFilters``, and from v1 ``DurationFilter``
(transactions open longer than that many ms). Empty filters match everything. A broker with no transaction
coordinator answers COORDINATOR_NOT_AVAILABLE. An admin client asks every broker and merges the answers.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, list_transactions
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = list_transactions.REQUEST
MIN_VERSION = 0
MAX_VERSION = 1


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    unknown, found = ctx.txn_coordinator.list_transactions(
        list(body["StateFilters"]), list(body["ProducerIdFilters"]), body.get("DurationFilter", -1)
    )
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": ErrorCode.NONE,
        "UnknownStateFilters": unknown,
        "TransactionStates": [
            {
                "TransactionalId": meta.transactional_id,
                "ProducerId": meta.producer_id,
                "TransactionState": meta.state.kafka_name,
            }
            for meta in sorted(found, key=lambda m: m.transactional_id)
            if ctx.authorized(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, meta.transactional_id)
        ],
    }
