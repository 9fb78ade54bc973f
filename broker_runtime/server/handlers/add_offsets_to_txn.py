"""AddOffsetsToTxn (key 25, v0-4): a transactional producer is about to commit a group's offsets.

Decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.add_offsets`) to add the group's ``__consumer_offsets`` partition to the transaction,
encodes its error. The partition is Kafka's ``abs(groupId.hashCode) % offsets.topic.num.partitions``; on a single
node the group coordinator creates the topic if needed, in a cluster it is created in the cluster metadata as
FindCoordinator creates it (this node need not be the group's coordinator: the marker reaches the partition's
leader through WriteTxnMarkers). Without the topic (too few brokers for ``offsets.topic.replication.factor``)
the answer is COORDINATOR_NOT_AVAILABLE, which the producer retries. A request that finds the previous
transaction's markers being written waits for them instead of answering CONCURRENT_TRANSACTIONS
(:mod:`broker_runtime.server.txn_parking`).
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.coordinator.group.log_format import CONSUMER_OFFSETS_TOPIC
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, add_offsets_to_txn
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.txn_parking import answer_or_park, in_order

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

REQUEST = add_offsets_to_txn.REQUEST
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
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, body["GroupId"]):
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    coordinator.take_appended()  # only this request's state writes are waited for
    partition, why = ctx.deployment.offsets_partition(ctx, body["GroupId"])
    if partition is None:
        _log.warning("AddOffsetsToTxn for group %r: %s", body["GroupId"], why)
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    code = coordinator.add_offsets(
        body["TransactionalId"],
        body["ProducerId"],
        body["ProducerEpoch"],
        (CONSUMER_OFFSETS_TOPIC, partition),
    )
    return answer_or_park(
        ctx, code, body["TransactionalId"], "AddOffsetsToTxn", lambda: _handle(ctx, header, body)
    )
