"""SyncGroup (key 14, v0-5): a member collects its assignment; the leader's request carries everyone's.

Thin: decode, call :meth:`~broker_runtime.coordinator.group.GroupCoordinator.sync` (an answer now or a future of it),
encode. Without a group coordinator the answer is NOT_COORDINATOR. In a cluster a group of a ``__consumer_offsets``
partition this node does not lead answers NOT_COORDINATOR, and the answer waits for the replication of what the
request wrote (:mod:`broker_runtime.server.groups`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, sync_group
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import answer_after_group_write

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = sync_group.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.group_coordinator
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, body["GroupId"]):
        return {"ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    coordinator.take_appended()
    result = coordinator.sync(
        body["GroupId"],
        body["GenerationId"],
        body["MemberId"],
        body["GroupInstanceId"],
        {a["MemberId"]: bytes(a["Assignment"]) for a in body["Assignments"]},
    )
    return answer_after_group_write(
        ctx, lambda failed: result if failed is None else {"ErrorCode": failed, "Assignment": b""}
    )
