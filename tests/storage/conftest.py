"""Fixtures of the storage tests: a controllable clock and logs opened under ``tmp_path`` (helpers in
:mod:`tests.support.storage`)."""

from __future__ import annotations

import pytest

from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.support.storage import PID, FakeClock, decode_all, idempotent_batch, make_batch

__all__ = ["PID", "FakeClock", "decode_all", "idempotent_batch", "make_batch"]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def open_log(tmp_path, clock):
    """Factory: open_log(**LogConfig fields) -> PartitionLog in tmp_path/t-0 (closed at teardown)."""
    logs: list[PartitionLog] = []

    def factory(name: str = "t-0", needs_recovery: bool = False, **fields) -> PartitionLog:
        config = LogConfig(**fields)
        log = PartitionLog.load(tmp_path / name, "t", 0, config, clock, needs_recovery=needs_recovery)
        logs.append(log)
        return log

    yield factory
    for log in logs:
        log.close()
