"""ListOffsets (key 2, v0-8): offsets by timestamp, and the special timestamps.

  LATEST_TIMESTAMP (-1)          the high watermark (IsolationLevel 1, read_committed: the last stable offset),
                                 timestamp -1
  EARLIEST_TIMESTAMP (-2)        the log start offset, timestamp -1
  MAX_TIMESTAMP (-3)             (v7+) the offset and timestamp of the record batch with the largest timestamp
  EARLIEST_LOCAL_TIMESTAMP (-4)  (v8+) the log start offset (no tiered storage)
  t >= 0                         the first offset whose timestamp is >= t (time index), or offset -1/timestamp -1
Under read_committed an offset found by timestamp must also be below the last stable offset (Kafka's
``lastFetchableOffset``). v0 answers the single offset in ``OldStyleOffsets``. Found offsets carry the partition's leader epoch.
Only the leader answers; another replica answers NOT_LEADER_OR_FOLLOWER.
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
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.replica_manager import LEADER_EPOCH

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = list_offsets.REQUEST
MIN_VERSION = 0
MAX_VERSION = 8


def _lookup(log: Any, timestamp: int, read_committed: bool = False) -> tuple[int, int] | None:
    """(offset, timestamp) answering ``timestamp`` on ``log``, or None when there is no such offset."""
    fetchable = log.last_stable_offset if read_committed else log.high_watermark
    if timestamp == LATEST_TIMESTAMP:
        return fetchable, -1
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return log.log_start_offset, -1
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
    return offset, ts


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    version = header.api_version
    read_committed = version >= 2 and body["IsolationLevel"] == IsolationLevel.READ_COMMITTED
    topics_out: list[dict[str, Any]] = []
    for topic in body["Topics"]:
        name = topic["Name"]
        parts_out: list[dict[str, Any]] = []
        for part in topic["Partitions"]:
            index = part["PartitionIndex"]
            replica = ctx.replicas.partition(name, index)
            log = replica.log if replica is not None else None
            epoch = replica.leader_epoch if replica is not None else LEADER_EPOCH
            entry: dict[str, Any] = {"PartitionIndex": index, "OldStyleOffsets": []}
            if replica is None or not replica.is_leader:
                count = ctx.topics.partition_count(name)
                known = count is not None and 0 <= index < count
                entry.update(
                    ErrorCode=ErrorCode.NOT_LEADER_OR_FOLLOWER
                    if known
                    else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    Timestamp=-1,
                    Offset=-1,
                    LeaderEpoch=-1,
                )
            elif part["CurrentLeaderEpoch"] > epoch:
                entry.update(
                    ErrorCode=ErrorCode.UNKNOWN_LEADER_EPOCH, Timestamp=-1, Offset=-1, LeaderEpoch=-1
                )
            else:
                found = _lookup(log, part["Timestamp"], read_committed)
                if found is None:
                    entry.update(ErrorCode=ErrorCode.NONE, Timestamp=-1, Offset=-1, LeaderEpoch=-1)
                else:
                    entry.update(
                        ErrorCode=ErrorCode.NONE,
                        Timestamp=found[1],
                        Offset=found[0],
                        LeaderEpoch=epoch,
                    )
                    if version == 0:
                        entry["OldStyleOffsets"] = [found[0]]
            parts_out.append(entry)
        topics_out.append({"Name": name, "Partitions": parts_out})
    return {"ThrottleTimeMs": 0, "Topics": topics_out}
