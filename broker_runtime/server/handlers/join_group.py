"""JoinGroup (key 11, v0-9): a member joins a classic group; answered once the join phase completes.

Thin: decode, call :meth:`~broker_runtime.coordinator.group.GroupCoordinator.join`, encode. From v4 a member
without a member id is told MEMBER_ID_REQUIRED first (KIP-394). Without a group coordinator (a broker of a
cluster, for now) the answer is NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, join_group
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = join_group.REQUEST
MIN_VERSION = 0
MAX_VERSION = 9


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.group_coordinator
    if coordinator is None:
        return {"ErrorCode": ErrorCode.NOT_COORDINATOR, "MemberId": body["MemberId"], "ProtocolName": ""}
    result = coordinator.join(
        body["GroupId"],
        body["MemberId"],
        body["GroupInstanceId"],
        body["SessionTimeoutMs"],
        body["RebalanceTimeoutMs"] if header.api_version >= 1 else body["SessionTimeoutMs"],
        body["ProtocolType"],
        [(p["Name"], bytes(p["Metadata"])) for p in body["Protocols"]],
        header.client_id or "",
        "",
        header.api_version >= 4,
    )
    if isinstance(result, asyncio.Future):
        return result
    return result
