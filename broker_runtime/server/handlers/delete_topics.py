"""DeleteTopics (key 20, v0-6): delete topics by name (any broker may take the request).

Per topic (Kafka's ``ControllerApis.deleteTopics`` checks): a name given twice -> INVALID_REQUEST; deletion by
topic id only (v6, no name) -> UNKNOWN_TOPIC_ID (pylog keeps no topic ids); an unknown name -> UNKNOWN_TOPIC_OR_PARTITION; an internal topic (``__consumer_offsets``,
``__transaction_state``) -> INVALID_REQUEST (pylog does not delete its coordinators' state). A single node
deletes the local logs at once; in a cluster the topic leaves the metadata and every replica deletes its logs
when it sees that (this broker before answering, the others within the metadata poll interval).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, delete_topics
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.topics import TopicError

__all__ = ["INTERNAL_TOPICS", "MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = delete_topics.REQUEST
MIN_VERSION = 0
MAX_VERSION = 6

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    if header.api_version >= 6:
        wanted = [(t["Name"], t["TopicId"]) for t in body["Topics"]]
    else:
        wanted = [(name, None) for name in body["TopicNames"]]
    counts = Counter(name for name, _ in wanted if name is not None)
    results: list[dict[str, Any]] = []
    for name, topic_id in wanted:
        result: dict[str, Any] = {"Name": name, "ErrorCode": ErrorCode.NONE, "ErrorMessage": None}
        if topic_id is not None:
            result["TopicId"] = topic_id
        if name is None:
            result.update(
                ErrorCode=ErrorCode.UNKNOWN_TOPIC_ID, ErrorMessage="pylog deletes topics by name only"
            )
        elif counts[name] > 1:
            result.update(
                ErrorCode=ErrorCode.INVALID_REQUEST, ErrorMessage=f"Duplicate topic name {name} in request."
            )
        elif not ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, name):
            result.update(
                ErrorCode=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ErrorMessage=f"DELETE on topic {name} is not allowed",
            )
        elif name in INTERNAL_TOPICS:
            result.update(
                ErrorCode=ErrorCode.INVALID_REQUEST,
                ErrorMessage=f"Topic {name} is internal and cannot be deleted.",
            )
        else:
            ctx.refresh_cluster()
            try:
                ctx.cluster.delete_topic(name)
            except TopicError as exc:
                result.update(ErrorCode=exc.code, ErrorMessage=exc.detail)
            else:
                ctx.replicas.forget_topic(name)
                ctx.refresh_cluster()
        results.append(result)
    return {"ThrottleTimeMs": 0, "Responses": results}
