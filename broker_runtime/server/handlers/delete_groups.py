"""DeleteGroups (key 42, v0-3): remove groups that have no member, with their committed offsets.

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.delete_groups` (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP). Without a group coordinator each group answers NOT_COORDINATOR. In a cluster a group of a
``__consumer_offsets`` partition this node does not lead answers NOT_COORDINATOR, and the answer waits for the
replication of what the request wrote (:mod:`broker_runtime.server.groups`). v3's per-group ``ErrorMessage`` is
null (the spec's default: the error code says it all).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, delete_groups
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import answer_after_group_write

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = delete_groups.REQUEST
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.group_coordinator
    names = list(body["GroupsNames"])
    refused = [g for g in names if not ctx.authorized(AclOperation.DELETE, ResourceType.GROUP, g)]
    allowed = [g for g in names if g not in refused]
    if allowed:
        coordinator.take_appended()
        errors = coordinator.delete_groups(allowed)
    else:
        errors = {}
    errors.update(dict.fromkeys(refused, ErrorCode.GROUP_AUTHORIZATION_FAILED))

    def answer(failed: ErrorCode | None) -> dict[str, Any]:
        final = {
            g: failed if failed is not None and code == ErrorCode.NONE else code for g, code in errors.items()
        }
        return {"ThrottleTimeMs": 0, "Results": [{"GroupId": g, "ErrorCode": final[g]} for g in names]}

    return answer_after_group_write(ctx, answer)
