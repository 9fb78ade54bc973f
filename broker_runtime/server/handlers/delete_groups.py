"""DeleteGroups (key 42, v0-2): remove groups that have no member, with their committed offsets.

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.delete_groups` (GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP). Without a group coordinator each group answers NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, delete_groups
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = delete_groups.REQUEST
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    coordinator = ctx.group_coordinator
    names = list(body["GroupsNames"])
    if coordinator is None:
        errors = dict.fromkeys(names, ErrorCode.NOT_COORDINATOR)
    else:
        errors = coordinator.delete_groups(names)
    return {"ThrottleTimeMs": 0, "Results": [{"GroupId": g, "ErrorCode": errors[g]} for g in names]}
