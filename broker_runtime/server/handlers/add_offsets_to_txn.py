"""AddOffsetsToTxn (key 25, v0-4): a transactional producer is about to commit a group's offsets.

Decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.add_offsets`) to add the group's ``__consumer_offsets`` partition to the transaction,
encodes its error. The partition is Kafka's ``abs(groupId.hashCode) % offsets.topic.num.partitions``; on a single
node the group coordinator creates the topic if needed, in a cluster it is created in the cluster metadata as
FindCoordinator creates it (this node need not be the group's coordinator: the marker reaches the partition's
leader through WriteTxnMarkers). Without the topic (too few brokers for ``offsets.topic.replication.factor``)
the answer is COORDINATOR_NOT_AVAILABLE, which the producer retries.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.coordinator.group.log_format import CONSUMER_OFFSETS_TOPIC
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, add_offsets_to_txn
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import ensure_offsets_topic
from broker_runtime.server.transactions import answer_after_state_write

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

REQUEST = add_offsets_to_txn.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.txn_coordinator
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["TransactionalId"]):
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED}
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, body["GroupId"]):
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if coordinator is None:
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    coordinator.take_appended()  # only this request's state writes are waited for
    groups = ctx.group_coordinator
    offsets_partition = None
    if groups is not None and ctx.config.cluster_dir is not None:
        why = ensure_offsets_topic(ctx)
        if why is not None:
            _log.warning("AddOffsetsToTxn for group %r: %s", body["GroupId"], why)
            return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.COORDINATOR_NOT_AVAILABLE}
        offsets_partition = (CONSUMER_OFFSETS_TOPIC, groups.partition_for(body["GroupId"]))
    elif groups is not None:
        try:
            offsets_partition = (CONSUMER_OFFSETS_TOPIC, groups.offsets_partition(body["GroupId"]))
        except Exception as exc:
            _log.warning(
                "AddOffsetsToTxn for group %r: cannot create __consumer_offsets: %s", body["GroupId"], exc
            )
            return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    code = coordinator.add_offsets(
        body["TransactionalId"], body["ProducerId"], body["ProducerEpoch"], offsets_partition
    )
    if code == ErrorCode.NONE and groups is None:
        _log.warning(
            "AddOffsetsToTxn from client %r for group %r: there is no group coordinator, so the offsets of this "
            "transaction cannot be committed with it",
            header.client_id,
            body["GroupId"],
        )
    return answer_after_state_write(ctx, lambda failed: {"ThrottleTimeMs": 0, "ErrorCode": failed or code})
