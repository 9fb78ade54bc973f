"""OffsetFetch (key 9, v0-9): a group's committed offsets (-1 and no error for a partition without one).

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.fetch_offsets`. A null topic list (v2+)
asks for every committed partition; v8 asks for several groups. With ``RequireStable`` (v7+, a read_committed
consumer) a partition whose offset was committed in a transaction not yet complete answers
UNSTABLE_OFFSET_COMMIT (the client retries), as Kafka. Without a group coordinator the answer is
NOT_COORDINATOR (top level from v2, per partition before); so does, in a cluster, a group of a
``__consumer_offsets`` partition this node does not lead. v9's ``MemberId`` and ``MemberEpoch`` are checked in
groups of the consumer group protocol (KIP-848) as Kafka checks them
(:meth:`~broker_runtime.coordinator.group.offsets.OffsetManager.validate_fetch`): UNKNOWN_MEMBER_ID or
STALE_MEMBER_EPOCH is the group's error, with no partition answered.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, offset_fetch
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = offset_fetch.REQUEST
MIN_VERSION = 0
MAX_VERSION = 9


def _group(
    ctx: BrokerContext,
    group_id: str,
    topics: list[dict[str, Any]] | None,
    require_stable: bool,
    member: tuple[str | None, int] = (None, -1),
) -> tuple[ErrorCode, list[Any]]:
    wanted = None if topics is None else [(t["Name"], p) for t in topics for p in t["PartitionIndexes"]]
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED, []
    coordinator = ctx.group_coordinator
    unstable: set[tuple[str, int]] = set()
    if coordinator.owner_error(group_id) != ErrorCode.NONE:
        found: dict[tuple[str, int], Any] = dict.fromkeys(wanted or [])
        code = ErrorCode.NOT_COORDINATOR
    else:
        refused = coordinator.validate_offset_fetch(group_id, *member)
        if refused != ErrorCode.NONE:
            return refused, []
        found = coordinator.fetch_offsets(group_id, wanted)
        code = ErrorCode.NONE
        if require_stable:
            unstable = coordinator.pending_offsets(group_id)
            if wanted is None:
                found.update({tp: found.get(tp) for tp in unstable})
    by_topic: dict[str, list[dict[str, Any]]] = {}
    visible: dict[str, bool] = {}
    for (topic, partition), committed in found.items():
        if topic not in visible:
            visible[topic] = ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
        if not visible[topic]:
            if wanted is None:
                continue  # all topics asked: the ones it may not DESCRIBE are left out (Kafka)
            committed, error = None, ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif (topic, partition) in unstable:
            committed, error = None, ErrorCode.UNSTABLE_OFFSET_COMMIT
        else:
            error = code
        by_topic.setdefault(topic, []).append(
            {
                "PartitionIndex": partition,
                "CommittedOffset": -1 if committed is None else committed.offset,
                "CommittedLeaderEpoch": -1 if committed is None else committed.leader_epoch,
                "Metadata": "" if committed is None else committed.metadata,
                "ErrorCode": error,
            }
        )
    return code, [{"Name": topic, "Partitions": parts} for topic, parts in by_topic.items()]


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    if header.api_version >= 8:
        groups = []
        for g in body["Groups"]:
            member = (g["MemberId"], g["MemberEpoch"]) if header.api_version >= 9 else (None, -1)
            code, topics = _group(ctx, g["GroupId"], g["Topics"], body["RequireStable"], member)
            groups.append({"GroupId": g["GroupId"], "Topics": topics, "ErrorCode": code})
        return {"ThrottleTimeMs": 0, "Groups": groups}
    code, topics = _group(
        ctx, body["GroupId"], body["Topics"], header.api_version >= 7 and body["RequireStable"]
    )
    return {"ThrottleTimeMs": 0, "Topics": topics, "ErrorCode": code}
