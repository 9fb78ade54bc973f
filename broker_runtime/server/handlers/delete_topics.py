"""DeleteTopics (key 20, v0-6): delete topics by name, or by topic id from v6 (any broker may take the request).

Per topic (Kafka's ``ControllerApis.deleteTopics`` checks): a name or topic id given twice, or an entry naming
both (v6) -> INVALID_REQUEST; v6 by topic id (null name): an unknown id, or one whose topic the principal may
not DESCRIBE -> UNKNOWN_TOPIC_ID (its existence is not revealed); an unknown name ->
UNKNOWN_TOPIC_OR_PARTITION; no DELETE on the topic -> TOPIC_AUTHORIZATION_FAILED; an internal topic
(``__consumer_offsets``, ``__transaction_state``) -> INVALID_REQUEST (pylog does not delete its coordinators'
state). Every topic of the request is checked and authorized before the first is deleted (as Kafka authorizes
the whole request first). A deletion answers the topic's name and id (v6). An id names one incarnation of a topic: the id of a
topic deleted and created again is UNKNOWN_TOPIC_ID, never the new topic. A single node
deletes the local logs at once; in a cluster the topic leaves the metadata and every replica deletes its logs
when it sees that (this broker before answering, the others within the metadata poll interval).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, delete_topics
from broker_runtime.protocol.topic_id import ZERO_TOPIC_ID
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
        wanted = [(name, ZERO_TOPIC_ID) for name in body["TopicNames"]]
    counts = Counter(name for name, _ in wanted if name is not None)
    id_counts = Counter(topic_id for _, topic_id in wanted if topic_id != ZERO_TOPIC_ID)
    ctx.refresh_cluster()
    view = ctx.cluster.view
    by_id = view.names_by_id()
    results: list[dict[str, Any]] = []
    deletions: list[tuple[str, dict[str, Any]]] = []
    for name, topic_id in wanted:
        result: dict[str, Any] = {
            "Name": name,
            "TopicId": topic_id,
            "ErrorCode": ErrorCode.NONE,
            "ErrorMessage": None,
        }
        if name is not None and topic_id != ZERO_TOPIC_ID:
            result.update(
                ErrorCode=ErrorCode.INVALID_REQUEST,
                ErrorMessage="You may not specify both topic name and topic id.",
            )
            results.append(result)
            continue
        if name is None:
            found = by_id.get(topic_id)
            if id_counts[topic_id] > 1:
                result.update(
                    ErrorCode=ErrorCode.INVALID_REQUEST,
                    ErrorMessage=f"Duplicate topic id {topic_id} in request.",
                )
            elif found is None or not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, found):
                result.update(
                    ErrorCode=ErrorCode.UNKNOWN_TOPIC_ID, ErrorMessage=f"Unknown topic id {topic_id}"
                )
            else:
                name = found
                result["Name"] = name
        else:
            result["TopicId"] = view.topic_id(name)
        if result["ErrorCode"] == ErrorCode.NONE and name is not None:
            _check_one(ctx, name, counts[name], result)
            if result["ErrorCode"] == ErrorCode.NONE:
                deletions.append((name, result))
        results.append(result)
    # Every check (and authorization) first, against the view before any deletion, as Kafka authorizes the
    # whole request before it deletes: each deletion changes the view, and reading it between deletions would
    # rebuild it once per topic.
    for name, result in deletions:
        _delete_one(ctx, name, result)
    return {"ThrottleTimeMs": 0, "Responses": results}


def _check_one(ctx: BrokerContext, name: str, times_named: int, result: dict[str, Any]) -> None:
    """The name checks of one topic to delete; a refusal goes into ``result``."""
    if times_named > 1:
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


def _delete_one(ctx: BrokerContext, name: str, result: dict[str, Any]) -> None:
    """The deletion of one topic that passed :func:`_check_one`; a failure goes into ``result``."""
    ctx.refresh_cluster()
    try:
        ctx.cluster.delete_topic(name)
    except TopicError as exc:
        result.update(ErrorCode=exc.code, ErrorMessage=exc.detail)
    else:
        ctx.replicas.forget_topic(name)
        ctx.refresh_cluster()
