"""Produce (key 0): advertised v0-11, answered for v3-11.

Per request (Kafka's ``KafkaApis.handleProduceRequest`` + ``ReplicaManager.appendRecords``):
  * v0-2 carry legacy message sets (magic 0/1) this broker cannot store: every partition is answered
    UNSUPPORTED_FOR_MESSAGE_FORMAT. They stay advertised because older librdkafka releases only enable
    compression when Produce's minimum version is below 3;
  * partitions of unknown topics get UNKNOWN_TOPIC_OR_PARTITION (Kafka creates topics from Metadata, not
    from Produce);
  * ``acks`` outside {-1, 0, 1}: INVALID_REQUIRED_ACKS for every partition of known topics, nothing appended;
  * otherwise each partition is validated and appended by the ReplicaManager (per batch work only);
  * ``acks=0``: no response at all; if any partition failed, the connection is closed so the client notices
    and refreshes its metadata, as Kafka does;
  * ``acks=-1`` with a single replica completes at once (the high watermark is the log end offset after the
    append); the AppendResult already carries the offset a DelayedProduce would wait for.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader
from broker_runtime.server.context import CLOSE_CONNECTION, BrokerContext
from broker_runtime.server.replica_manager import AppendResult

__all__ = ["API_KEY", "MAX_VERSION", "MIN_VERSION", "handle"]

_log = logging.getLogger(__name__)

API_KEY = 0
MIN_VERSION = 0
MAX_VERSION = 11

_VALID_ACKS = (-1, 0, 1)


def _partition_response(index: int, result: AppendResult) -> dict[str, Any]:
    return {
        "Index": index,
        "ErrorCode": result.error,
        "BaseOffset": result.base_offset,
        "LogAppendTimeMs": result.log_append_time_ms,
        "LogStartOffset": result.log_start_offset,
        "RecordErrors": [],
        "ErrorMessage": result.message if result.error else None,
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    version = header.api_version
    acks = body["Acks"]
    topics = ctx.topics
    replicas = ctx.replicas
    responses: list[dict[str, Any]] = []
    failed: list[str] = []
    for topic_data in body["TopicData"]:
        name = topic_data["Name"]
        count = topics.partition_count(name)
        partitions: list[dict[str, Any]] = []
        for pdata in topic_data["PartitionData"]:
            index = pdata["Index"]
            if count is None or not 0 <= index < count:
                result = AppendResult(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                    message=f"This server does not host this topic-partition: {name}-{index}",
                )
            elif version < 3:
                result = AppendResult(
                    ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                    message=f"Produce v{version} (legacy message format) is not supported; use v3 or later",
                )
            elif acks not in _VALID_ACKS:
                result = AppendResult(
                    ErrorCode.INVALID_REQUIRED_ACKS, message=f"acks={acks} is not -1, 0 or 1"
                )
            else:
                result = replicas.append(name, index, pdata["Records"], version)
            if result.error:
                failed.append(f"{name}-{index}: {ErrorCode(result.error).name}")
            partitions.append(_partition_response(index, result))
        responses.append({"Name": name, "PartitionResponses": partitions})
    if acks == 0:
        if failed:
            _log.info(
                "closing connection after acks=0 produce (correlation id %d, client %r) failed: %s",
                header.correlation_id,
                header.client_id,
                ", ".join(failed),
            )
            return CLOSE_CONNECTION
        return None
    return {"Responses": responses, "ThrottleTimeMs": 0}
