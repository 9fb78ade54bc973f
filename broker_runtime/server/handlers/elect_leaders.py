"""ElectLeaders (key 43, v0-2): preferred-leader election (``kafka-leader-election.sh --election-type
preferred``), or unclean election of a leaderless partition (``--election-type unclean``).

Any broker answers: the election is a write to the shared cluster metadata under its lock
(:meth:`~broker_runtime.server.cluster.SharedFileCluster.elect_leaders`), the same write Kafka's controller would
make, so forwarding to the controller is not needed. Per partition: NONE (elected), ELECTION_NOT_NEEDED (the
preferred replica already leads; for unclean, the partition has a leader), PREFERRED_LEADER_NOT_AVAILABLE (it is
fenced or out of the ISR), ELIGIBLE_LEADERS_NOT_AVAILABLE (unclean: no replica is live),
UNKNOWN_TOPIC_OR_PARTITION. ``TopicPartitions`` null elects every partition and reports only those not already
led by their preferred replica, as Kafka does. The answer is sent once the metadata is written; the brokers
apply it within one poll interval.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, elect_leaders
from broker_runtime.security.acl import AclOperation
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = elect_leaders.REQUEST
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    election = body["ElectionType"] if header.api_version >= 1 else elect_leaders.ELECTION_PREFERRED
    if election not in (elect_leaders.ELECTION_PREFERRED, elect_leaders.ELECTION_UNCLEAN):
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": ErrorCode.INVALID_REQUEST,
            "ReplicaElectionResults": [],
        }
    wanted = body["TopicPartitions"]
    if not ctx.authorized_cluster(AclOperation.ALTER):
        # Kafka's handleElectLeaders: the top-level error and each named partition's (v0 has no top-level
        # error, so there the partitions are the only refusal a client sees)
        code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        refused = [
            {
                "Topic": t["Topic"],
                "PartitionResult": [
                    {"PartitionId": p, "ErrorCode": code, "ErrorMessage": None} for p in t["Partitions"]
                ],
            }
            for t in wanted or []
        ]
        return {"ThrottleTimeMs": 0, "ErrorCode": code, "ReplicaElectionResults": refused}
    keys = None if wanted is None else [(t["Topic"], p) for t in wanted for p in t["Partitions"]]
    results = ctx.cluster.elect_leaders(election == elect_leaders.ELECTION_UNCLEAN, keys)
    ctx.refresh_cluster()
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            {"PartitionId": index, "ErrorCode": code, "ErrorMessage": message}
        )
    return {
        "ThrottleTimeMs": 0,
        "ErrorCode": ErrorCode.NONE,
        "ReplicaElectionResults": [{"Topic": t, "PartitionResult": r} for t, r in by_topic.items()],
    }
