"""CreatePartitions (key 37, v0-3): raise a topic's partition count (any broker may take the request).

Per topic (Kafka's ``ReplicationControlManager.createPartitions`` checks): a name given twice ->
INVALID_REQUEST; unknown -> UNKNOWN_TOPIC_OR_PARTITION; a count not above the current one -> INVALID_PARTITIONS;
``Assignments`` not one list per new partition of the topic's replication factor in distinct registered
brokers -> INVALID_REPLICA_ASSIGNMENT. Without assignments the new partitions are placed as CreateTopics
places a topic of the new count (:func:`~broker_runtime.replication.assign_replicas`), so partition ``i`` lands
where it would have had the topic been created that large. ``ValidateOnly`` checks and changes nothing. The
new partitions take the topic's overrides; each replica creates its log when it sees the metadata change.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, create_partitions
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext, HandlerResult, answer_after_loads
from broker_runtime.server.topics import TopicError

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = create_partitions.REQUEST
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> HandlerResult:
    validate_only = bool(body["ValidateOnly"])
    counts = Counter(t["Name"] for t in body["Topics"])
    results: list[dict[str, Any]] = []
    ctx.refresh_cluster()
    for topic in body["Topics"]:
        name = topic["Name"]
        result: dict[str, Any] = {"Name": name, "ErrorCode": ErrorCode.NONE, "ErrorMessage": None}
        if counts[name] > 1:
            result.update(
                ErrorCode=ErrorCode.INVALID_REQUEST, ErrorMessage=f"Duplicate topic name {name} in request."
            )
        elif not ctx.authorized(AclOperation.ALTER, ResourceType.TOPIC, name):
            result.update(
                ErrorCode=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                ErrorMessage=f"ALTER on topic {name} is not allowed",
            )
        else:
            assignments = topic["Assignments"]
            try:
                ctx.cluster.create_partitions(
                    name,
                    topic["Count"],
                    None if assignments is None else [list(a["BrokerIds"]) for a in assignments],
                    validate_only=validate_only,
                )
            except TopicError as exc:
                result.update(ErrorCode=exc.code, ErrorMessage=exc.detail)
        results.append(result)
    if not validate_only:
        ctx.refresh_cluster()
    extended = [r["Name"] for r in results if r["ErrorCode"] == ErrorCode.NONE and not validate_only]

    def answer(failures: dict[str, BaseException]) -> dict[str, Any]:
        for r in results:
            exc = failures.get(r["Name"])
            if exc is not None:
                code = exc.code if isinstance(exc, TopicError) else ErrorCode.KAFKA_STORAGE_ERROR
                r.update(ErrorCode=code, ErrorMessage=str(getattr(exc, "detail", exc)))
        return {"ThrottleTimeMs": 0, "Results": results}

    return answer_after_loads(ctx, extended, answer)
