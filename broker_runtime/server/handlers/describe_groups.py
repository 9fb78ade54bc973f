"""DescribeGroups (key 15, v0-6): each group's state, protocol type and members, as Kafka's summary.

In Stable the answer has the chosen protocol and every member's metadata and assignment; in other states the
protocol is empty and so are the members' metadata and assignment (Kafka's ``GroupMetadata.summary``). An
unknown group is described as ``Dead`` with no member (v6: GROUP_ID_NOT_FOUND, as Kafka from v6); so is a consumer
group of KIP-848 ("is not a classic group", as Kafka's; ConsumerGroupDescribe describes it). The client
host is not recorded (empty). Without a group coordinator each group answers NOT_COORDINATOR, as does, in a
cluster, a group of a ``__consumer_offsets`` partition this node does not lead.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.coordinator.group import GroupState
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_groups
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = describe_groups.REQUEST
MIN_VERSION = 0
MAX_VERSION = 6


def _describe(ctx: BrokerContext, group_id: str, version: int) -> dict[str, Any]:
    coordinator = ctx.group_coordinator
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return {"ErrorCode": ErrorCode.GROUP_AUTHORIZATION_FAILED, "GroupId": group_id}
    if coordinator.owner_error(group_id) != ErrorCode.NONE:
        return {"ErrorCode": ErrorCode.NOT_COORDINATOR, "GroupId": group_id}
    group = coordinator.group(group_id)
    if group is None or group.state == GroupState.DEAD or group.consumer is not None:
        what = "not found" if group is None or group.consumer is None else "is not a classic group"
        return {
            "ErrorCode": ErrorCode.GROUP_ID_NOT_FOUND if version >= 6 else ErrorCode.NONE,
            "ErrorMessage": f"group {group_id} {what}" if version >= 6 else None,
            "GroupId": group_id,
            "GroupState": GroupState.DEAD.value,
        }
    stable = group.state == GroupState.STABLE
    return {
        "ErrorCode": ErrorCode.NONE,
        "GroupId": group_id,
        "GroupState": group.state.value,
        "ProtocolType": group.protocol_type or "",
        "ProtocolData": (group.protocol or "") if stable else "",
        "Members": [
            {
                "MemberId": m.member_id,
                "GroupInstanceId": m.group_instance_id,
                "ClientId": m.client_id,
                "ClientHost": m.client_host,
                "MemberMetadata": m.metadata_for(group.protocol or "") if stable else b"",
                "MemberAssignment": m.assignment if stable else b"",
            }
            for m in group.members.values()
        ],
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return {"ThrottleTimeMs": 0, "Groups": [_describe(ctx, g, header.api_version) for g in body["Groups"]]}
