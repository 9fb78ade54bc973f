"""DeleteRecords (key 21, v0-2): move the log start offset of partitions this broker leads.

Per partition (Kafka's ``ReplicaManager.deleteRecords``): not hosted -> UNKNOWN_TOPIC_OR_PARTITION (or
NOT_LEADER_OR_FOLLOWER when the topic exists); not the leader -> NOT_LEADER_OR_FOLLOWER; ``Offset`` -1 means the
high watermark; an offset below 0 or above the high watermark -> OFFSET_OUT_OF_RANGE. An offset at or below
the current log start changes nothing and answers the current one. Segments wholly below the new log start
are deleted at once; reads below it get OFFSET_OUT_OF_RANGE. The log-start-offset checkpoint is written
before the answer, so the new start survives a crash right after it (Kafka writes that checkpoint
periodically; pylog writes it here too, a few hundred bytes per log directory). In a cluster followers learn
the new log start from the leader's fetch answers (``LogStartOffset``) and move theirs, as Kafka's do; the
answer does not wait for them.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.errors import ErrorCode, OffsetOutOfRangeError, StorageError
from broker_runtime.protocol.messages import RequestHeader, delete_records
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

REQUEST = delete_records.REQUEST
MIN_VERSION = 0
MAX_VERSION = 2


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    topics: list[dict[str, Any]] = []
    moved = False
    for topic in body["Topics"]:
        name = topic["Name"]
        parts: list[dict[str, Any]] = []
        for p in topic["Partitions"]:
            index, offset = p["PartitionIndex"], p["Offset"]
            out: dict[str, Any] = {"PartitionIndex": index, "LowWatermark": -1, "ErrorCode": ErrorCode.NONE}
            partition = ctx.replicas.partition(name, index)
            if not ctx.authorized(AclOperation.DELETE, ResourceType.TOPIC, name):
                out["ErrorCode"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif partition is None:
                count = ctx.topics.partition_count(name)
                exists = count is not None and 0 <= index < count
                out["ErrorCode"] = (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER if exists else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                )
            elif not partition.is_leader:
                out["ErrorCode"] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            else:
                log = partition.log
                target = log.high_watermark if offset == delete_records.HIGH_WATERMARK else offset
                try:
                    before = log.log_start_offset
                    out["LowWatermark"] = log.delete_records_before(target)
                    moved = moved or out["LowWatermark"] != before
                except OffsetOutOfRangeError:
                    out["ErrorCode"] = ErrorCode.OFFSET_OUT_OF_RANGE
                except (StorageError, OSError) as exc:
                    _log.warning("DeleteRecords on %s-%d before %d failed: %s", name, index, target, exc)
                    out["ErrorCode"] = ErrorCode.KAFKA_STORAGE_ERROR
            parts.append(out)
        topics.append({"Name": name, "Partitions": parts})
    if moved:
        ctx.topics.checkpoint()
    return {"ThrottleTimeMs": 0, "Topics": topics}
