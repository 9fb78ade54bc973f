"""EndTxn (key 26, v0-4): commit or abort a producer's transaction.

Decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.end_txn`: PrepareX logged, markers written, CompleteX logged, all before the answer on
one node), encodes its error. A request that finds the transaction's markers still being written (a retry, or
an abort right after a commit) waits for them instead of answering CONCURRENT_TRANSACTIONS
(:mod:`broker_runtime.server.txn_parking`). v5 (transaction version 2, an epoch bump per transaction) is not advertised.
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
MAX_VERSION = 4


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
    code = coordinator.end_txn(
        body["TransactionalId"], body["ProducerId"], body["ProducerEpoch"], body["Committed"]
    )
    return answer_or_park(ctx, code, body["TransactionalId"], "EndTxn", lambda: _handle(ctx, header, body))
