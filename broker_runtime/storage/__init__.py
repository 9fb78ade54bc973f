"""Kafka-compatible partition storage: segments, offset/time indexes, partition logs, the log manager.

On-disk layout is Kafka's own (``<log.dir>/<topic>-<partition>/<20-digit base offset>.log|.index|.timeindex``,
the checkpoint files and the ``.kafka_cleanshutdown`` marker), so Kafka's tools can read these directories.
Readers outside the broker process open segments read-only with :class:`SegmentReader`.
Imports only :mod:`broker_runtime.errors` and :mod:`broker_runtime.protocol`.
"""

from __future__ import annotations

from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from broker_runtime.storage.log_reader import FetchData
from broker_runtime.storage.partition_log import AppendInfo, PartitionLog
from broker_runtime.storage.segment_reader import SegmentReader

__all__ = ["AppendInfo", "FetchData", "LogConfig", "LogManager", "PartitionLog", "SegmentReader"]
