"""Real ``__consumer_offsets`` partition logs under one directory, opened on demand, for the group coordinator
tests that drive a coordinator on a manual clock (``GroupCoordinator``'s ``log_for(partition, create)``)."""

from __future__ import annotations

from pathlib import Path

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog


class OffsetsLogs:
    """``logs`` by partition; :meth:`get` is the coordinator's log lookup (None for a partition never created)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.logs: dict[int, PartitionLog] = {}

    def get(self, partition: int, create: bool) -> PartitionLog | None:
        if partition not in self.logs:
            path = self.root / f"{CONSUMER_OFFSETS_TOPIC}-{partition}"
            if not path.exists() and not create:
                return None
            self.logs[partition] = PartitionLog.load(path, CONSUMER_OFFSETS_TOPIC, partition, LogConfig())
        return self.logs[partition]

    def close(self) -> None:
        for log in self.logs.values():
            log.close()
