"""JoinGroup (key 11, v0-9): a member joins a classic group; answered once the join phase completes.

Thin: decode, call :meth:`~broker_runtime.coordinator.group.GroupCoordinator.join`, encode. From v4 a member
without a member id is told MEMBER_ID_REQUIRED first (KIP-394). The member's ClientHost is the address its
connection comes from, written as Kafka's ``InetAddress.toString`` of an address without a host name
(``/127.0.0.1``). In a cluster a group of a ``__consumer_offsets`` partition this node does not lead answers NOT_COORDINATOR, and an
answer whose request wrote the group's metadata waits for its replication (:mod:`broker_runtime.server.groups`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, join_group
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import answer_after_group_write

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = join_group.REQUEST
MIN_VERSION = 0
MAX_VERSION = 9


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.group_coordinator
    member_id = body["MemberId"]
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, body["GroupId"]):
        return {"ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED, "MemberId": member_id, "ProtocolName": ""}
    coordinator.take_appended()
    result = coordinator.join(
        body["GroupId"],
        member_id,
        body["GroupInstanceId"],
        body["SessionTimeoutMs"],
        body["RebalanceTimeoutMs"] if header.api_version >= 1 else body["SessionTimeoutMs"],
        body["ProtocolType"],
        [(p["Name"], bytes(p["Metadata"])) for p in body["Protocols"]],
        header.client_id or "",
        _client_host(ctx.request_session.client_address),
        header.api_version >= 4,
    )

    def answer(failed: ErrorCode | None) -> Any:
        if failed is None:
            return result
        return {"ErrorCode": failed, "GenerationId": -1, "MemberId": member_id, "ProtocolName": ""}

    return answer_after_group_write(ctx, answer)


def _client_host(address: str) -> str:
    """``/HOST`` of a connection's ``HOST:PORT`` (``[v6]:port`` too); empty when unknown."""
    host = address.rpartition(":")[0].strip("[]")
    return f"/{host}" if host else ""
