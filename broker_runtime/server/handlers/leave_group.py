"""LeaveGroup (key 13, v0-5): members leave a classic group (v3+: a batch, by member id or group instance id).

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.leave`. v0-2 answer with the member's
error as the top-level error; v3+ answer per member. Without a group coordinator the answer is NOT_COORDINATOR.
In a cluster a group of a ``__consumer_offsets`` partition this node does not lead answers NOT_COORDINATOR; as
Kafka's, the answer does not wait for the group's next metadata record (written when the rebalance completes).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, leave_group
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = leave_group.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    coordinator = ctx.group_coordinator
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, body["GroupId"]):
        return {"ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED}
    if header.api_version < 3:
        members: list[tuple[str, str | None]] = [(body["MemberId"], None)]
    else:
        members = [(m["MemberId"], m["GroupInstanceId"]) for m in body["Members"]]
    code, errors = coordinator.leave(body["GroupId"], members)
    return _answer(header.api_version, members, code, errors)


def _answer(
    version: int, members: list[tuple[str, str | None]], code: ErrorCode, errors: list[ErrorCode]
) -> dict[str, Any]:
    if version < 3:
        return {"ThrottleTimeMs": 0, "ErrorCode": errors[0] if code == ErrorCode.NONE else code}
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": code,
        "Members": [
            {"MemberId": member_id, "GroupInstanceId": instance_id, "ErrorCode": error}
            for (member_id, instance_id), error in zip(members, errors, strict=True)
        ],
    }
