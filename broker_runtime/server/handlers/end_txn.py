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

import logging
from typing import Any

from broker_runtime.coordinator.transaction import TRANSACTION_STATE_TOPIC
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, end_txn
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.txn_parking import answer_or_park, in_order

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

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
    if result.error == ErrorCode.INVALID_TXN_STATE:
        _log_invalid_state(ctx, body, header.api_version)
    extra = {"ProducerId": result.producer_id, "ProducerEpoch": result.producer_epoch} if tv2 else None
    return answer_or_park(
        ctx, result.error, body["TransactionalId"], "EndTxn", lambda: _handle(ctx, header, body), extra
    )


def _log_invalid_state(ctx: BrokerContext, body: dict[str, Any], version: int) -> None:
    """WARNING: what an EndTxn answered INVALID_TXN_STATE met (librdkafka and the Java client fail fatally on
    that answer, so the line says why a producer died): the coordinator's node and epoch, the state, producer id
    and epoch, partitions, the age of the state, and whether its last record is replicated yet."""
    coordinator = ctx.txn_coordinator
    txn_id = body["TransactionalId"]
    meta = coordinator.metadata(txn_id)
    if meta is None:
        return  # not answered INVALID_TXN_STATE from a state
    end = coordinator.state_end(txn_id)
    replica = ctx.replicas.partition(TRANSACTION_STATE_TOPIC, end[0]) if end is not None else None
    if end is None:
        record = "its state as loaded at this coordinator epoch"
    elif replica is None:
        record = f"its last record ends at offset {end[1]} (no local replica)"
    else:
        hw = replica.log.high_watermark
        record = f"its last record ends at offset {end[1]}, {'replicated' if hw >= end[1] else 'NOT replicated'} (high watermark {hw})"
    _log.warning(
        "transactional id %r: EndTxn v%d (%s) of producer %d epoch %d answered INVALID_TXN_STATE by node %d "
        "(coordinator epoch %d of %s-%d): the transaction is %s (producer %d epoch %d, partitions %s, state "
        "%d ms old; %s)",
        txn_id,
        version,
        "commit" if body["Committed"] else "abort",
        body["ProducerId"],
        body["ProducerEpoch"],
        ctx.config.node_id,
        coordinator.epoch_for(txn_id),
        TRANSACTION_STATE_TOPIC,
        coordinator.partition_for(txn_id),
        meta.state.kafka_name,
        meta.producer_id,
        meta.producer_epoch,
        sorted(f"{t}-{p}" for t, p in meta.partitions) or "none",
        max(0, ctx.wall_ms() - meta.last_update_ms) if meta.last_update_ms >= 0 else -1,
        record,
    )
