"""The group coordinator's offsets against real partition logs and a controlled clock: the records it writes are
Kafka's (decoded here independently with struct), a new coordinator replays them, ``offsets.retention.minutes``
expires the offsets of a group without members (tombstones, so a replay does not bring them back) and keeps
those of a group with members."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_runtime.coordinator.group import (
    CONSUMER_OFFSETS_TOPIC,
    Committer,
    CoordinatorTimer,
    GroupConfig,
    GroupCoordinator,
    local_appender,
    partition_for,
)
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.records import RecordBatch
from broker_runtime.purgatory import ManualClock
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog

PARTITIONS = 3
RETENTION_MS = 60_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


class Logs:
    """``__consumer_offsets`` partitions in a directory, opened on demand (as the broker's TopicManager does)."""

    def __init__(self, root: Path, clock: Clock) -> None:
        self.root, self.clock, self.open = root, clock, {}  # type: ignore[var-annotated]

    def __call__(self, partition: int, create: bool) -> PartitionLog | None:
        if partition not in self.open:
            path = self.root / f"{CONSUMER_OFFSETS_TOPIC}-{partition}"
            if not path.exists() and not create:
                return None
            self.open[partition] = PartitionLog.load(
                path, CONSUMER_OFFSETS_TOPIC, partition, LogConfig(), self.clock
            )
        return self.open[partition]

    def close(self) -> None:
        for log in self.open.values():
            log.close()
        self.open.clear()


def _coordinator(
    logs: Logs, loop: asyncio.AbstractEventLoop, clock: Clock, config: GroupConfig | None = None
) -> GroupCoordinator:
    """A single node's coordinator (every partition led at epoch 0, loaded), timers on a manual clock."""
    coordinator = GroupCoordinator(
        config or GroupConfig(num_partitions=PARTITIONS, offsets_retention_ms=RETENTION_MS),
        logs,
        loop,
        lambda topic: 4 if topic == "t" else None,
        now_ms=clock,
        timer=CoordinatorTimer(ManualClock()),
        append_records=local_appender(logs),
        await_replication=lambda partition, then: then(None),
    )
    coordinator.load()
    return coordinator


def _records(log: PartitionLog) -> list[tuple[bytes, bytes | None]]:
    data = log.read(0, 1 << 20, max_offset=log.log_end_offset)
    view, pos, out = memoryview(data.records), 0, []
    while pos < len(view):
        batch = RecordBatch(view, pos)
        out += [(bytes(r.key), None if r.value is None else bytes(r.value)) for r in batch.records()]
        pos += batch.header.size
    return out


def test_offset_records_are_kafkas_and_replayed(tmp_path: Path, loop: asyncio.AbstractEventLoop) -> None:
    clock, logs = Clock(), Logs(tmp_path, Clock())
    coordinator = _coordinator(logs, loop, clock)
    errors = coordinator.commit_offsets(
        "g1", Committer(), {("t", 2): (17, 5, "meta"), ("nope", 0): (1, -1, None)}
    )
    assert errors == {("t", 2): ErrorCode.NONE, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    log = logs(partition_for("g1", PARTITIONS), False)
    assert log is not None
    [(key, value)] = _records(log)
    # OffsetCommitKey v1: int16 version, group, topic (int16 length strings), int32 partition
    assert key == struct.pack(">hh2sh1si", 1, 2, b"g1", 1, b"t", 2)
    # OffsetCommitValue v3: int16 version, int64 offset, int32 leader epoch, metadata, int64 commit time
    assert value == struct.pack(">hqih4sq", 3, 17, 5, 4, b"meta", clock.now)
    logs.close()
    replayed = _coordinator(Logs(tmp_path, Clock()), loop, clock)
    committed = replayed.fetch_offsets("g1", [("t", 2), ("t", 0)])
    assert committed[("t", 0)] is None
    found = committed[("t", 2)]
    assert found is not None and (found.offset, found.leader_epoch, found.metadata) == (17, 5, "meta")


def test_retention_expires_offsets_of_groups_without_members(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    clock = Clock()
    logs = Logs(tmp_path, clock)
    coordinator = _coordinator(logs, loop, clock)
    coordinator.commit_offsets("old", Committer(), {("t", 0): (5, -1, ""), ("t", 1): (6, -1, "")})
    clock.now += RETENTION_MS // 2
    coordinator.commit_offsets(
        "old", Committer(), {("t", 1): (7, -1, "")}
    )  # a newer commit restarts its clock
    assert coordinator.expire_offsets() == 0
    clock.now += RETENTION_MS // 2
    assert coordinator.expire_offsets() == 1  # (t, 0) only
    assert coordinator.fetch_offsets("old", [("t", 0)]) == {("t", 0): None}
    clock.now += RETENTION_MS
    assert coordinator.expire_offsets() == 1
    assert "old" not in {g.group_id for g in coordinator.list_groups()}  # no member, no offset: forgotten
    logs.close()
    replayed = _coordinator(Logs(tmp_path, clock), loop, clock)
    assert replayed.fetch_offsets("old", None) == {}
    assert replayed.list_groups() == []


def test_retention_keeps_offsets_of_a_group_with_members(
    tmp_path: Path, loop: asyncio.AbstractEventLoop
) -> None:
    clock = Clock()
    logs = Logs(tmp_path, clock)
    config = GroupConfig(
        num_partitions=PARTITIONS, offsets_retention_ms=RETENTION_MS, initial_rebalance_delay_ms=0
    )
    coordinator = _coordinator(logs, loop, clock, config)
    joined = coordinator.join("live", "", None, 10_000, 10_000, "consumer", [("range", b"")], "c", "", False)
    assert isinstance(joined, asyncio.Future) and joined.done()
    body = joined.result()
    member = body["MemberId"]
    synced = coordinator.sync("live", body["GenerationId"], member, None, {member: b"a"})
    assert isinstance(synced, asyncio.Future) and synced.result()["Assignment"] == b"a"
    assert coordinator.commit_offsets(
        "live", Committer(body["GenerationId"], member), {("t", 0): (3, -1, "")}
    ) == {("t", 0): ErrorCode.NONE}
    clock.now += 10 * RETENTION_MS
    assert coordinator.expire_offsets() == 0
    assert coordinator.leave("live", [(member, None)]) == (ErrorCode.NONE, [ErrorCode.NONE])
    assert coordinator.expire_offsets() == 1  # once empty, the old commit expires
    coordinator.shutdown()
    logs.close()
