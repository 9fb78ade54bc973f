"""ConsumerGroupDescribe (key 69, v0-1): consumer groups (KIP-848) with their epochs, assignor and members, each
member's current and target assignment.

Per group, as Kafka's ``KafkaApis``/``GroupMetadataManager``: no DESCRIBE on the group -> GROUP_AUTHORIZATION_FAILED;
another coordinator's group -> NOT_COORDINATOR; an unknown group -> GROUP_ID_NOT_FOUND; a classic group ->
GROUP_ID_NOT_FOUND ("is not a consumer group"); a group whose members subscribe to or are assigned a topic the
client may not DESCRIBE -> TOPIC_AUTHORIZATION_FAILED (the description would name it). ``MemberType`` (v1) is 1:
every member of a pylog consumer group speaks the consumer protocol. ``AuthorizedOperations`` is not computed
(Kafka's "not requested" value) even when asked for.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, consumer_group
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.consumer_group_topics import named_assignment, topic_ids
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = consumer_group.DESCRIBE_REQUEST
MIN_VERSION = 0
MAX_VERSION = 1

#: ``MemberType`` of a member using the consumer protocol (KIP-1099: -1 unknown, 0 classic, 1 consumer).
_CONSUMER_MEMBER = 1


def _failed(group_id: str, code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"ErrorCode": code, "ErrorMessage": message, "GroupId": group_id, "Members": []}


def _describe(ctx: BrokerContext, group_id: str) -> dict[str, Any]:
    if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return _failed(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    coordinator = ctx.group_coordinator
    if coordinator.owner_error(group_id) != ErrorCode.NONE:
        return _failed(group_id, ErrorCode.NOT_COORDINATOR)
    group = coordinator.group(group_id)
    if group is None or group.state.value == "Dead":
        return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
    cg = group.consumer
    if cg is None:
        return _failed(group_id, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
    topics = cg.subscribed_topics() | {
        t for m in cg.members.values() for t in (*m.assigned, *cg.target.get(m.member_id, {}))
    }
    if any(not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t) for t in topics):
        return _failed(
            group_id,
            ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            "The described group uses topics that the client is not authorized to describe.",
        )
    ids = topic_ids(ctx)
    return {
        "ErrorCode": ErrorCode.NONE,
        "ErrorMessage": None,
        "GroupId": group_id,
        "GroupState": cg.state(),
        "GroupEpoch": cg.group_epoch,
        "AssignmentEpoch": cg.assignment_epoch,
        "AssignorName": coordinator.consumer.assignor_of(cg),
        "Members": [
            {
                "MemberId": m.member_id,
                "InstanceId": m.instance_id,
                "RackId": m.rack_id,
                "MemberEpoch": m.member_epoch,
                "ClientId": m.client_id,
                "ClientHost": m.client_host,
                "SubscribedTopicNames": list(m.subscribed_topics),
                "SubscribedTopicRegex": m.subscribed_regex,
                "Assignment": {"TopicPartitions": named_assignment(m.assigned, ids, with_names=True)},
                "TargetAssignment": {
                    "TopicPartitions": named_assignment(cg.target.get(m.member_id, {}), ids, with_names=True)
                },
                "MemberType": _CONSUMER_MEMBER,
            }
            for m in cg.members.values()
        ],
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return {"ThrottleTimeMs": 0, "Groups": [_describe(ctx, g) for g in body["GroupIds"]]}
