"""OffsetForLeaderEpoch (key 23, v0-4): where a leader epoch ends on this partition's leader (KIP-101/279/320).

Per partition (Kafka's ``ReplicaManager.lastOffsetForLeaderEpoch`` -> ``Partition.lastOffsetForLeaderEpoch``):
CurrentLeaderEpoch (v2+) is checked first -- older than the epoch this broker knows -> FENCED_LEADER_EPOCH, newer
-> UNKNOWN_LEADER_EPOCH --, then only the leader answers (another replica NOT_LEADER_OR_FOLLOWER, a broker
without the partition NOT_LEADER_OR_FOLLOWER when the topic exists, else UNKNOWN_TOPIC_OR_PARTITION). The
leader answers from its leader-epoch cache (``LeaderEpochCache.end_offset_for``): the largest epoch it knows at or
below the requested one and where that epoch's records end -- the start of its next epoch, or its log end offset
for its latest epoch --, or LeaderEpoch -1 / EndOffset -1 when it cannot tell (an epoch above its latest, -1).

Consumers (librdkafka) ask this after a leader change to validate their position: an end offset below the
position means the log was truncated under them. pylog's own followers learn divergence from Fetch v12's
DivergingEpoch instead and never send this request. ReplicaId (v3+) changes neither the answer nor the
authorization (Kafka's ``handleOffsetForLeaderEpochRequest``): CLUSTER_ACTION on the cluster answers every topic,
else each topic needs DESCRIBE (TOPIC_AUTHORIZATION_FAILED per partition), on every listener.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, offset_for_leader_epoch
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = offset_for_leader_epoch.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    if any(ctx.topics.partition_count(t["Topic"]) is None for t in body["Topics"]):
        ctx.refresh_cluster()
    topics_out: list[dict[str, Any]] = []
    cluster_action = ctx.inter_broker_allowed()
    for topic in body["Topics"]:
        name = topic["Topic"]
        parts_out: list[dict[str, Any]] = []
        denied = not cluster_action and not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        for part in topic["Partitions"]:
            index = part["Partition"]
            if denied:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                parts_out.append({"ErrorCode": code, "Partition": index, "LeaderEpoch": -1, "EndOffset": -1})
                continue
            # CurrentLeaderEpoch exists from v2; decoding fills -1 (no check) below that.
            code, epoch, end = ctx.replicas.end_offset_for_epoch(
                name, index, part["CurrentLeaderEpoch"], part["LeaderEpoch"]
            )
            parts_out.append({"ErrorCode": code, "Partition": index, "LeaderEpoch": epoch, "EndOffset": end})
        topics_out.append({"Topic": name, "Partitions": parts_out})
    return {"ThrottleTimeMs": 0, "Topics": topics_out}
