"""EndTxn (key 26, v0-5): commit or abort a producer's transaction.

Decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.end_txn`: PrepareX logged, markers written, CompleteX logged, all before the answer on
one node), encodes its error. A request that finds the transaction's markers still being written (a retry, or
an abort right after a commit) waits for them instead of answering CONCURRENT_TRANSACTIONS
(:mod:`broker_runtime.server.txn_parking`). v5 is transaction version 2 (KIP-890; Kafka's
``transactionVersionForEndTxn``): the coordinator bumps the producer epoch on every commit or abort and the answer
carries the producer id and epoch the producer uses next (-1 / -1 on an error).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, end_txn
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.txn_parking import answer_or_park, in_order

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = end_txn.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5
#: The first EndTxn version of transaction version 2.
_TV2_SINCE = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["TransactionalId"]):
        return _handle(ctx, header, body)  # refused at once: never queued behind the id's own requests
    # after every earlier unanswered request of the same transactional id, as Kafka (txn_parking.in_order)
    return in_order(ctx, body["TransactionalId"], lambda: _handle(ctx, header, body))


def _handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.txn_coordinator
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["TransactionalId"]):
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    coordinator.take_appended()  # only this request's state writes are waited for
    tv2 = header.api_version >= _TV2_SINCE
    result = coordinator.end_transaction(
        body["TransactionalId"],
        body["ProducerId"],
        body["ProducerEpoch"],
        body["Committed"],
        client_version=2 if tv2 else 0,
    )
    extra = {"ProducerId": result.producer_id, "ProducerEpoch": result.producer_epoch} if tv2 else None
    return answer_or_park(
        ctx, result.error, body["TransactionalId"], "EndTxn", lambda: _handle(ctx, header, body), extra
    )
