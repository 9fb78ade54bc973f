"""ListOffsets (key 2, v0-8): offsets by timestamp, and the special timestamps.

  LATEST_TIMESTAMP (-1)          the high watermark (IsolationLevel 1, read_committed: the last stable offset),
                                 timestamp -1
  EARLIEST_TIMESTAMP (-2)        the log start offset, timestamp -1
  MAX_TIMESTAMP (-3)             (v7+) the offset and timestamp of the record batch with the largest timestamp
  EARLIEST_LOCAL_TIMESTAMP (-4)  (v8+) the log start offset (no tiered storage)
  t >= 0                         the first offset whose timestamp is >= t (time index), or offset -1/timestamp -1
Under read_committed an offset found by timestamp must also be below the last stable offset (Kafka's
``lastFetchableOffset``). v0 answers the single offset in ``OldStyleOffsets``. Found offsets carry a leader epoch (v4+), as Kafka's
``Partition.fetchOffsetForTimestamp``: LATEST the leader's current epoch; EARLIEST the first cached epoch when it
starts at or below the log start (else -1); a timestamp lookup the epoch the found record was written in (the
leader-epoch cache's ``epoch_for_offset``). Clients keep that epoch with their position and validate it with
OffsetForLeaderEpoch after a leader change.

CurrentLeaderEpoch (v4+) is checked first (``Partition.check_leader_epoch``, Kafka's ``getLocalLog``): older
than the epoch this broker knows -> FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH; then only the leader
answers, another replica NOT_LEADER_OR_FOLLOWER, a broker without the partition NOT_LEADER_OR_FOLLOWER (topic
known) or UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    IsolationLevel,
    RequestHeader,
    list_offsets,
)
from broker_runtime.replication.partition import Partition
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = list_offsets.REQUEST
MIN_VERSION = 0
MAX_VERSION = 8


def _lookup(replica: Partition, timestamp: int, read_committed: bool = False) -> tuple[int, int, int] | None:
    """(offset, timestamp, leader epoch) answering ``timestamp`` on the leader ``replica``, or None when there is
    no such offset."""
    log = replica.log
    fetchable = log.last_stable_offset if read_committed else log.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return fetchable, -1, replica.leader_epoch
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        entries = replica.epoch_cache.entries
        start = log.log_start_offset
        return start, -1, entries[0][0] if entries and entries[0][1] <= start else -1
    if timestamp == MAX_TIMESTAMP:
        found = log.max_timestamp_offset()
    elif timestamp >= 0:
        found = log.offset_for_timestamp(timestamp)
    else:
        return None
    if found is None:
        return None
    offset, ts = found[0], found[1]
    if offset >= fetchable:
        return None
    return offset, ts, replica.epoch_cache.epoch_for_offset(offset)


def _refused(index: int, code: ErrorCode) -> dict[str, Any]:
    return {
        "PartitionIndex": index,
        "OldStyleOffsets": [],
        "ErrorCode": code,
        "Timestamp": -1,
        "Offset": -1,
        "LeaderEpoch": -1,
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    read_committed = version >= 2 and body["IsolationLevel"] == IsolationLevel.READ_COMMITTED
    topics_out: list[dict[str, Any]] = []
    for topic in body["Topics"]:
        name = topic["Name"]
        parts_out: list[dict[str, Any]] = []
        denied = not ctx.authorized(AclOperation.DESCRIBE, ResourceType.TOPIC, name)
        for part in topic["Partitions"]:
            index = part["PartitionIndex"]
            if denied:  # Kafka asks DESCRIBE on the topic (READ and WRITE imply it)
                parts_out.append(_refused(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            replica = ctx.replicas.partition(name, index)
            if replica is None:
                count = ctx.topics.partition_count(name)
                known = count is not None and 0 <= index < count
                code = ErrorCode.NOT_LEADER_OR_FOLLOWER if known else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts_out.append(_refused(index, code))
                continue
            # CurrentLeaderEpoch exists from v4; decoding fills -1 (no check) below that.
            code = replica.check_leader_epoch(part["CurrentLeaderEpoch"])
            if code != ErrorCode.NONE:
                parts_out.append(_refused(index, code))
                continue
            entry: dict[str, Any] = {
                "PartitionIndex": index,
                "OldStyleOffsets": [],
                "ErrorCode": ErrorCode.NONE,
            }
            found = _lookup(replica, part["Timestamp"], read_committed)
            if found is None:
                entry.update(Timestamp=-1, Offset=-1, LeaderEpoch=-1)
            else:
                entry.update(Offset=found[0], Timestamp=found[1], LeaderEpoch=found[2])
                if version == 0:
                    entry["OldStyleOffsets"] = [found[0]]
            parts_out.append(entry)
        topics_out.append({"Name": name, "Partitions": parts_out})
    return {"ThrottleTimeMs": 0, "Topics": topics_out}
