"""ConsumerGroupHeartbeat (key 68, v0-1): a member of a consumer group (KIP-848) joins, heartbeats, reports the
partitions it owns, learns its assignment, or leaves.

Thin: see :meth:`~broker_runtime.coordinator.group.consumer.ConsumerGroups.heartbeat`; topic ids are translated
by :mod:`broker_runtime.server.consumer_group_topics`. Authorization as Kafka's ``KafkaApis``: READ on the group
(else GROUP_AUTHORIZATION_FAILED), DESCRIBE on every subscribed topic (else TOPIC_AUTHORIZATION_FAILED: a client
does not learn of topics it may not describe); a ``SubscribedTopicRegex`` resolves to the topics the principal may
DESCRIBE only (the others are left out silently, as Kafka does). The answer waits for the replication of what the heartbeat wrote
to ``__consumer_offsets`` (:func:`~broker_runtime.server.groups.answer_after_group_write`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.coordinator.group import HeartbeatRequest
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, consumer_group
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.consumer_group_topics import by_id, named_assignment, owned_by_name, topic_ids
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import answer_after_group_write
from broker_runtime.server.handlers.join_group import _client_host

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = consumer_group.HEARTBEAT_REQUEST
MIN_VERSION = 0
MAX_VERSION = 1


def _error(code: ErrorCode, message: str | None = None) -> dict[str, Any]:
    return {"ThrottleTimeMs": 0, "ErrorCode": code, "ErrorMessage": message, "MemberEpoch": -1}


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    group_id = body["GroupId"]
    if not ctx.authorized(AclOperation.READ, ResourceType.GROUP, group_id):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    subscribed = body["SubscribedTopicNames"]
    if subscribed:
        denied = sorted(
            {t for t in subscribed if not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, t)}
        )
        if denied:
            return _error(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"The client is not authorized to describe the subscribed topic(s) {', '.join(denied)}.",
            )
    ids = topic_ids(ctx)
    coordinator = ctx.group_coordinator
    coordinator.take_appended()
    result = coordinator.consumer_heartbeat(
        HeartbeatRequest(
            group_id,
            body["MemberId"],
            body["MemberEpoch"],
            body["InstanceId"],
            body["RackId"],
            body["RebalanceTimeoutMs"],
            None if subscribed is None else tuple(subscribed),
            body.get("SubscribedTopicRegex"),
            body["ServerAssignor"],
            owned_by_name(body["TopicPartitions"], by_id(ids)),
            header.client_id or "",
            _client_host(ctx.request_session.client_address),
            header.api_version,
        ),
        lambda name: name in ids,
        lambda topic: ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, topic),
    )
    answer_body: dict[str, Any] = {
        "ThrottleTimeMs": 0,
        "ErrorCode": result.error,
        "ErrorMessage": result.message,
        "MemberId": result.member_id,
        "MemberEpoch": result.member_epoch,
        "HeartbeatIntervalMs": result.heartbeat_interval_ms,
        "Assignment": None
        if result.assignment is None
        else {"TopicPartitions": named_assignment(result.assignment, ids)},
    }

    def answer(failed: ErrorCode | None) -> Any:
        return answer_body if failed is None else _error(failed)

    return answer_after_group_write(ctx, answer)
