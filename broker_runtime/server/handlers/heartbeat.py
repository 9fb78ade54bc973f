"""Heartbeat (key 12, v0-4): a member of a classic group is alive; REBALANCE_IN_PROGRESS tells it to rejoin.

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.heartbeat`. Without a group coordinator the
answer is NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, heartbeat
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = heartbeat.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    coordinator = ctx.group_coordinator
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, body["GroupId"]):
        return {"ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    code = coordinator.heartbeat(
        body["GroupId"], body["GenerationId"], body["MemberId"], body["GroupInstanceId"]
    )
    return {"ThrottleTimeMs": 0, "ErrorCode": code}
