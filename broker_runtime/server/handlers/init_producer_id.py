"""InitProducerId (key 22, v0-5): producer ids for idempotent and transactional producers.

With a transactional id the transaction coordinator answers (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.init_producer_id`: the id's producer id with a bumped epoch, fencing the previous
producer); an empty transactional id is INVALID_REQUEST.

Without a transactional id, as Kafka's coordinator does, every call gets a fresh producer id (from the
persistent ``ProducerIdManager`` blocks; in a cluster the blocks come from the cluster's metadata, so ids are
unique across nodes) with epoch 0, whatever ProducerId/ProducerEpoch it carried. When no block can be had (the
cluster lock is held too long), the answer is the retriable COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.errors import ErrorCode, StorageError, WaitTimeoutError
from broker_runtime.protocol.messages import RequestHeader, init_producer_id
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.transactions import answer_after_state_write

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

#: The request this module answers (its API key travels with the message definition).
REQUEST = init_producer_id.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    txn_id = body["TransactionalId"]
    if txn_id is not None and not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, txn_id):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return {"ThrottleTimeMs": 0, "ErrorCode": code, "ProducerId": -1, "ProducerEpoch": -1}
    if txn_id is None and not (
        ctx.authorized_cluster(AclOperation.IDEMPOTENT_WRITE)
        or ctx.authorized_any(AclOperation.WRITE, ResourceType.TOPIC)
    ):
        # Kafka (KIP-679): an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic.
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        return {"ThrottleTimeMs": 0, "ErrorCode": code, "ProducerId": -1, "ProducerEpoch": -1}
    if txn_id is not None:
        coordinator = ctx.txn_coordinator
        if txn_id == "":
            _log.warning(
                "InitProducerId from client %r with transactional id %r: an empty transactional id is invalid",
                header.client_id,
                txn_id,
            )
            code = ErrorCode.INVALID_REQUEST
            return {"ThrottleTimeMs": 0, "ErrorCode": code, "ProducerId": -1, "ProducerEpoch": -1}
        coordinator.take_appended()  # only this request's state writes are waited for
        result = coordinator.init_producer_id(
            txn_id, body["TransactionTimeoutMs"], body["ProducerId"], body["ProducerEpoch"]
        )
        return answer_after_state_write(
            ctx,
            lambda failed: {
                "ThrottleTimeMs": 0,
                "ErrorCode": failed or result.error,
                "ProducerId": -1 if failed else result.producer_id,
                "ProducerEpoch": -1 if failed else result.producer_epoch,
            },
        )
    try:
        producer_id = ctx.next_producer_id()
    except (WaitTimeoutError, StorageError, OSError) as exc:
        # As Kafka's broker does while it waits for a producer-id block: a retriable error, never an id that
        # another node may also hand out.
        _log.warning(
            "InitProducerId from client %r: no producer id block available: %s", header.client_id, exc
        )
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            "ProducerId": -1,
            "ProducerEpoch": -1,
        }
    return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.NONE, "ProducerId": producer_id, "ProducerEpoch": 0}
