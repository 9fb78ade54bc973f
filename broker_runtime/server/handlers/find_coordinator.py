"""FindCoordinator (key 10, v0-4): the transaction coordinator is this broker; there is no group coordinator.

Key type 1 (transaction): a single node answers itself for every transactional id (it hosts every partition of
``__transaction_state``). In a cluster the coordinator of an id would be the leader of its
``__transaction_state`` partition (Kafka's ``abs(hashCode) % transaction.state.log.num.partitions``); the
coordinator does not run there yet, so the answer is COORDINATOR_NOT_AVAILABLE with a message.

Key type 0 (group): COORDINATOR_NOT_AVAILABLE and a message, so group-based clients back off instead of failing
hard; clients that use ``assign()`` never need a coordinator. Why advertise the API at all for groups:
librdkafka enables LZ4 compression only when the broker advertises FindCoordinator (its feature map ties LZ4 to
the API that shipped with Kafka 0.8.2).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, find_coordinator
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = find_coordinator.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4

_NO_GROUPS = "this broker has no group coordinator; use assign() with explicit offsets"
_NO_TXN = "the transaction coordinator does not run in a cluster yet (single-node brokers only)"


def _answer(ctx: BrokerContext, key_type: int) -> tuple[ErrorCode, str | None, int, str, int]:
    if key_type == find_coordinator.KEY_TYPE_TRANSACTION and ctx.txn_coordinator is not None:
        return ErrorCode.NONE, None, ctx.config.node_id, ctx.advertised_host, ctx.advertised_port
    message = _NO_TXN if key_type == find_coordinator.KEY_TYPE_TRANSACTION else _NO_GROUPS
    return ErrorCode.COORDINATOR_NOT_AVAILABLE, message, -1, "", -1


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    code, message, node, host, port = _answer(ctx, body["KeyType"])
    if header.api_version >= 4:
        return {
            "ThrottleTimeMs": 0,
            "Coordinators": [
                {
                    "Key": key,
                    "NodeId": node,
                    "Host": host,
                    "Port": port,
                    "ErrorCode": code,
                    "ErrorMessage": message,
                }
                for key in body["CoordinatorKeys"]
            ],
        }
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": code,
        "ErrorMessage": message,
        "NodeId": node,
        "Host": host,
        "Port": port,
    }
