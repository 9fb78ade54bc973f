"""FindCoordinator (key 10, v0-5): the group coordinator of a group id, the transaction coordinator of a
transactional id.

Where the coordinator is comes from the deployment (:meth:`~broker_runtime.server.context.Deployment.
find_coordinator`). Key type 1 (transaction): a single node answers itself for every transactional id (it leads
every partition of ``__transaction_state``). In a cluster the coordinator of an id is the leader of its ``__transaction_state``
partition (Kafka's ``abs(hashCode) % transaction.state.log.num.partitions``), from this node's cluster metadata;
the first such lookup creates the topic (see :mod:`broker_runtime.server.transactions`); while the partition has
no live leader the answer is COORDINATOR_NOT_AVAILABLE (retriable). v4 answers each key of the batch.

Key type 0 (group): a single node answers itself for every group (it leads every partition of
``__consumer_offsets``, see :mod:`broker_runtime.coordinator.group`). In a cluster the coordinator of a group is
the leader of its ``__consumer_offsets`` partition (Kafka's ``abs(hashCode) % offsets.topic.num.partitions``); the
first such lookup creates the topic, which needs ``offsets.topic.replication.factor`` live brokers (see
:mod:`broker_runtime.server.groups`); until then, and while the partition has no live leader, the answer is
COORDINATOR_NOT_AVAILABLE (retriable) with a message saying why.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, find_coordinator
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = find_coordinator.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def _answer(ctx: BrokerContext, key_type: int, key: str) -> tuple[ErrorCode, str | None, int, str, int]:
    if key_type == find_coordinator.KEY_TYPE_GROUP and not ctx.authorized(
        AclOperation.DESCRIBE, ResourceType.GROUP, key
    ):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, f"DESCRIBE on group {key} is not allowed", -1, "", -1
    if key_type == find_coordinator.KEY_TYPE_TRANSACTION and not ctx.authorized(
        AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        return code, f"DESCRIBE on transactional id {key} is not allowed", -1, "", -1
    if key_type in (find_coordinator.KEY_TYPE_GROUP, find_coordinator.KEY_TYPE_TRANSACTION):
        return ctx.deployment.find_coordinator(ctx, key_type, key)
    return ErrorCode.INVALID_REQUEST, f"unknown coordinator key type {key_type}", -1, "", -1


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    if header.api_version >= 4:
        return {
            "ThrottleTimeMs": 0,
            "Coordinators": [
                _coordinator(key, *_answer(ctx, body["KeyType"], key)) for key in body["CoordinatorKeys"]
            ],
        }
    code, message, node, host, port = _answer(ctx, body["KeyType"], body["Key"])
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": code,
        "ErrorMessage": message,
        "NodeId": node,
        "Host": host,
        "Port": port,
    }


def _coordinator(
    key: str, code: ErrorCode, message: str | None, node: int, host: str, port: int
) -> dict[str, Any]:
    return {
        "Key": key,
        "NodeId": node,
        "Host": host,
        "Port": port,
        "ErrorCode": code,
        "ErrorMessage": message,
    }
