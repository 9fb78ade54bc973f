"""DescribeLogDirs (key 35, v0-5): this broker's log directories and the partitions in each.

One result per ``log.dirs`` entry (absolute path), with each hosted partition's size in bytes (its segment
files) and ``OffsetLag`` = high watermark - log end offset as Kafka reports it for a current (not future) log
(0 on a leader; never negative). ``Topics`` null means every partition; named partitions this broker does not
host are left out, as Kafka does. v4: each directory's total and usable bytes (``shutil.disk_usage``). v5:
``IsCordoned`` is always false (pylog cannot cordon a log directory, KIP-1066).
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_log_dirs
from broker_runtime.security.acl import AclOperation
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = describe_log_dirs.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    if not ctx.authorized_cluster(AclOperation.DESCRIBE):
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Results": []}
    wanted: set[tuple[str, int]] | None = None
    if body["Topics"] is not None:
        wanted = {(t["Topic"], p) for t in body["Topics"] for p in t["Partitions"]}
    by_dir: dict[str, dict[str, list[dict[str, Any]]]] = {os.path.abspath(d): {} for d in ctx.config.log_dirs}
    for (topic, index), log in sorted(ctx.topics.local_logs().items()):
        if wanted is not None and (topic, index) not in wanted:
            continue
        log_dir = ctx.topics.dir_of(topic, index)
        if log_dir is None:
            continue
        by_dir.setdefault(os.path.abspath(log_dir), {}).setdefault(topic, []).append(
            {
                "PartitionIndex": index,
                "PartitionSize": log.size_bytes,
                "OffsetLag": max(0, log.high_watermark - log.log_end_offset),
                "IsFutureKey": False,
            }
        )
    results = []
    for path, topics in by_dir.items():
        try:
            usage = shutil.disk_usage(path)
            total, usable, code = usage.total, usage.free, ErrorCode.NONE
        except OSError:
            total, usable, code = -1, -1, ErrorCode.KAFKA_STORAGE_ERROR
        results.append(
            {
                "ErrorCode": code,
                "LogDir": path,
                "Topics": [{"Name": t, "Partitions": parts} for t, parts in sorted(topics.items())],
                "TotalBytes": total,
                "UsableBytes": usable,
                "IsCordoned": False,
            }
        )
    return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.NONE, "Results": results}
