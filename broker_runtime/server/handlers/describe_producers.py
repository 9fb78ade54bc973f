"""DescribeProducers (key 61, v0): the active producers of partitions this broker leads (KIP-664).

Per partition: not hosted -> UNKNOWN_TOPIC_OR_PARTITION (NOT_LEADER_OR_FOLLOWER when the topic exists); not
the leader -> NOT_LEADER_OR_FOLLOWER; otherwise every producer the partition's producer state holds: id, epoch,
last sequence, last timestamp, coordinator epoch and the first offset of its open transaction (-1 if none).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_producers
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = describe_producers.REQUEST
MIN_VERSION = 0
MAX_VERSION = 0


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    topics = []
    for topic in body["Topics"]:
        name = topic["Name"]
        parts = []
        for index in topic["PartitionIndexes"]:
            out: dict[str, Any] = {
                "PartitionIndex": index,
                "ErrorCode": ErrorCode.NONE,
                "ErrorMessage": None,
                "ActiveProducers": [],
            }
            partition = ctx.replicas.partition(name, index)
            count = ctx.topics.partition_count(name)
            if not ctx.authorized(AclOperation.READ, ResourceType.TOPIC, name):
                out["ErrorCode"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                exists = count is not None and 0 <= index < count
                out["ErrorCode"] = (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER if exists else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif not partition.is_leader:
                out["ErrorCode"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                state = partition.log.producer_state
                out["ActiveProducers"] = [
                    {
                        "ProducerId": pid,
                        "ProducerEpoch": entry.producer_epoch,
                        "LastSequence": entry.last_seq,
                        "LastTimestamp": entry.last_timestamp,
                        "CoordinatorEpoch": entry.coordinator_epoch,
                        "CurrentTxnStartOffset": (
                            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
                        ),
                    }
                    for pid, entry in sorted(state.producers.items())
                ]
            parts.append(out)
        topics.append({"Name": name, "Partitions": parts})
    return {"ThrottleTimeMs": 0, "Topics": topics}
