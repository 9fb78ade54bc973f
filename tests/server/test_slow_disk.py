"""A slow disk must not stall the broker: a roll's fsync, the periodic checkpoints, a follower's truncation and
the files of a new topic are made off the event loop.

The slow disk is real fsync made slow: ``os.fsync`` of chosen files sleeps :data:`SLOW_FSYNC_S` first (the
broker runs in this process, so the wrapper is the one its storage calls).

* A produce that rolls ``slow-0`` (whose old segment then needs that fsync) and a produce to another topic from
  another connection meanwhile must both be answered well before the fsync ends; the recovery point of
  ``slow-0`` must stay below the rolled segment until the fsync has finished, and reach it afterwards; the
  roll's producer snapshot must not exist before that fsync has finished (it would claim data not on disk).
* With the fsync of that producer snapshot slow, the produce that rolled and one to another topic are answered
  at once (the snapshot is written on the flush thread).
* A failed roll fsync, of the segment or of the snapshot, is logged at WARNING, counted, and halts the broker (it
  fails the log dir, as Kafka's flush after a roll).
* While the periodic checkpoint write waits for its slow fsync, a produce is answered at once.
* While a CreateTopics waits for a slow fsync of a new partition's directory, a produce to another topic is
  answered at once and the new topic is not served until the CreateTopics is answered; a creation whose fsync
  fails is answered KAFKA_STORAGE_ERROR, logged, counted and leaves no partition behind.
"""

from __future__ import annotations

import asyncio
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey, decode_request, encode_response
from broker_runtime.replication.fetcher import FETCH_VERSION, FetcherConfig, ReplicaFetcher
from broker_runtime.replication.partition import Partition
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.partition_log import PartitionLog
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, produce_body
from tests.support.brokers import start_broker

SLOW_FSYNC_S = 3.0


def _produce(bootstrap: str, topic: str) -> float:
    """Seconds one acks=1 produce of a ~1.2 KB batch to ``topic`` took to be answered."""
    with RawConnection(bootstrap, timeout_s=30) as conn:
        t0 = time.monotonic()
        body = conn.call(ApiKey.PRODUCE, 7, produce_body(topic, 0, build_batch(10, value_size=100)))
        elapsed = time.monotonic() - t0
    assert body["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NONE
    return elapsed


class _SlowFsync:
    """``os.fsync`` that sleeps :data:`SLOW_FSYNC_S` before syncing the files ``slow(path)`` picks (only the first
    one when ``once``); ``started`` is set as the slow fsync begins, ``done`` once it has finished."""

    def __init__(self, slow: Callable[[str], bool], *, once: bool = False) -> None:
        self.real = os.fsync
        self.slow, self.once = slow, once
        self.started, self.done = threading.Event(), threading.Event()

    def __call__(self, fd: Any) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else ""
        if self.slow(target) and not (self.once and self.started.is_set()):
            self.started.set()
            time.sleep(SLOW_FSYNC_S)
            self.real(fd)
            self.done.set()
            return
        self.real(fd)


def _slow_and_fast_topics(bootstrap: str) -> None:
    """Topics ``slow`` (1,500-byte segments: a few produces roll it) and ``fast``, one produce to each."""
    with RawConnection(bootstrap) as conn:
        for name, configs in (("slow", {"segment.bytes": "1500"}), ("fast", {})):
            created = conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body(name, 1, configs=configs))
            assert created["Topics"][0]["ErrorCode"] == ErrorCode.NONE
    _produce(bootstrap, "slow")
    _produce(bootstrap, "fast")


def _assert_roll_made_durable(log: Any, rolled_at: int) -> None:
    """Within 10 s the recovery point reaches the roll at ``rolled_at`` and the roll's producer snapshot exists."""
    deadline = time.monotonic() + 10
    while log.recovery_point < rolled_at and time.monotonic() < deadline:
        time.sleep(0.02)
    assert log.recovery_point == rolled_at
    assert (log.dir / f"{rolled_at:020d}.snapshot").exists()


def test_roll_fsync_of_a_slow_disk_does_not_stall_other_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsync = _SlowFsync(lambda target: "/slow-0/" in target and target.endswith(".log"))
    real_fsync, slow_started, slow_done = fsync.real, fsync.started, fsync.done
    broker = start_broker(tmp_path)
    try:
        _slow_and_fast_topics(broker.bootstrap)
        log = broker.ctx.topics.get_log("slow", 0)
        monkeypatch.setattr(os, "fsync", fsync)
        rolled_at = log.log_end_offset
        results: dict[str, float] = {}
        roller = threading.Thread(target=lambda: results.update(slow=_produce(broker.bootstrap, "slow")))
        t0 = time.monotonic()
        roller.start()
        assert slow_started.wait(10), "the produce did not roll slow-0"
        results["fast"] = _produce(broker.bootstrap, "fast")
        roller.join(30)
        answered = time.monotonic() - t0
        assert len(log.segments) == 2 and log.segments[1].base_offset == rolled_at
        # answered before the fsync ended: neither produce waited for the disk
        assert answered < SLOW_FSYNC_S - 1, results
        assert not slow_done.is_set()
        assert log.recovery_point < rolled_at  # not on disk yet
        # the producer snapshot of the roll claims offsets below rolled_at: not written before they are durable
        assert not (log.dir / f"{rolled_at:020d}.snapshot").exists()
        assert slow_done.wait(SLOW_FSYNC_S + 10)
        _assert_roll_made_durable(log, rolled_at)
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()


def test_slow_checkpoint_fsync_does_not_stall_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsync = _SlowFsync(lambda target: "recovery-point-offset-checkpoint" in target, once=True)
    real_fsync, slow_started, slow_done = fsync.real, fsync.started, fsync.done

    broker = start_broker(tmp_path, {"log.flush.offset.checkpoint.interval.ms": "200"})
    try:
        with RawConnection(broker.bootstrap) as conn:
            created = conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("fast", 1))
            assert created["Topics"][0]["ErrorCode"] == ErrorCode.NONE
        _produce(broker.bootstrap, "fast")
        monkeypatch.setattr(os, "fsync", fsync)
        assert slow_started.wait(10), "no checkpoint was written"
        took = _produce(broker.bootstrap, "fast")
        assert not slow_done.is_set(), "the produce was answered only after the checkpoint's fsync"
        assert took < SLOW_FSYNC_S - 1
        assert slow_done.wait(SLOW_FSYNC_S + 10)
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()


def test_slow_producer_snapshot_at_roll_does_not_stall_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The producer snapshot a roll writes (a file and two fsyncs) is written on the flush thread, not by the
    produce that rolled: with its fsync slow, that produce and one to another topic are answered at once."""
    fsync = _SlowFsync(
        lambda target: "/slow-0/" in target and ".snapshot." in target and target.endswith(".tmp")
    )
    real_fsync, slow_started, slow_done = fsync.real, fsync.started, fsync.done
    broker = start_broker(tmp_path)
    try:
        _slow_and_fast_topics(broker.bootstrap)
        log = broker.ctx.topics.get_log("slow", 0)
        rolled_at = log.log_end_offset
        monkeypatch.setattr(os, "fsync", fsync)
        t0 = time.monotonic()
        took_slow = _produce(broker.bootstrap, "slow")  # rolls slow-0
        took_fast = _produce(broker.bootstrap, "fast")
        answered = time.monotonic() - t0
        assert len(log.segments) == 2 and log.segments[1].base_offset == rolled_at
        assert slow_started.wait(10), "the roll wrote no producer snapshot"
        assert answered < SLOW_FSYNC_S - 1, (took_slow, took_fast)
        assert not slow_done.is_set()
        assert slow_done.wait(SLOW_FSYNC_S + 10)
        _assert_roll_made_durable(log, rolled_at)
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()


@pytest.mark.parametrize("file", ["segment", "producer snapshot"])
def test_failed_roll_flush_is_logged_counted_and_halts_the_broker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, file: str
) -> None:
    """A roll whose fsync (of the segment, or of the producer snapshot written after it) fails is logged at
    WARNING, counted in ``pylog_log_roll_flush_failures_total{file}``, and fails the log dir from the roll-flush
    thread (Kafka's ``UnifiedLog.roll``/``flush`` under ``maybeHandleIOException``): the broker halts, naming the
    write and the I/O error; a failed segment fsync leaves the recovery point below the rolled segment (the
    restart recovers it)."""
    from tests.server.test_metrics import scrape

    real_fsync = os.fsync

    def fsync(fd: Any) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else ""
        failing = target.endswith(".log") if file == "segment" else ".snapshot." in target
        if "/slow-0/" in target and failing:
            raise OSError(5, "Input/output error (injected)")
        real_fsync(fd)

    broker = start_broker(tmp_path, {"pylog.metrics.listener": "127.0.0.1:0"})
    try:
        with RawConnection(broker.bootstrap) as conn:
            created = conn.call(
                ApiKey.CREATE_TOPICS, 4, create_topic_body("slow", 1, configs={"segment.bytes": "1500"})
            )
            assert created["Topics"][0]["ErrorCode"] == ErrorCode.NONE
        _produce(broker.bootstrap, "slow")
        log = broker.ctx.topics.get_log("slow", 0)
        rolled_at = log.log_end_offset
        key = ("pylog_log_roll_flush_failures_total", (("file", file),))
        assert scrape(broker).get(key, 0.0) == 0.0
        monkeypatch.setattr(os, "fsync", fsync)
        _produce(broker.bootstrap, "slow")  # rolls slow-0
        assert log.segments[-1].base_offset == rolled_at
        assert broker.wait(10), "the broker still runs after a roll flush failed"
        assert broker.logs.roll_flush_failures == {file: 1}
        assert (
            broker.failure is not None
            and "slow-0" in broker.failure
            and "Input/output error" in broker.failure
        )
        assert "check the disk" in broker.failure, broker.failure
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        if file == "segment":
            assert log.recovery_point < rolled_at
            assert any("fsync after rolling at offset" in m for m in warnings), warnings
        else:
            assert not (log.dir / f"{rolled_at:020d}.snapshot").exists()
            assert not any(p.name.endswith(".tmp") for p in log.dir.iterdir())
            assert any("writing the producer snapshot" in m for m in warnings), warnings
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()


def test_slow_follower_truncation_does_not_stall_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower truncation (here after a DivergingEpoch answer) rebuilds the partition's producer state by
    replaying the batch headers after its newest snapshot: with that replay slow, a produce to another topic
    of the same broker is answered at once (the truncation runs on a worker thread, the fetcher awaits it).

    The follower is a real partition log and replica fetcher on the broker's event loop, fetching over a real
    socket from a leader played by the test (an asyncio server answering DivergingEpoch once)."""
    real_rebuild = PartitionLog._rebuild_producer_state
    slow_started = threading.Event()
    slow_done = threading.Event()

    def rebuild(self: PartitionLog) -> None:
        if self.topic == "div" and not slow_started.is_set():
            slow_started.set()
            time.sleep(SLOW_FSYNC_S)
            real_rebuild(self)
            slow_done.set()
            return
        real_rebuild(self)

    broker = start_broker(tmp_path)
    fetcher_box: list[Any] = []
    server_box: list[Any] = []
    try:
        with RawConnection(broker.bootstrap) as conn:
            created = conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body("fast", 1))
            assert created["Topics"][0]["ErrorCode"] == ErrorCode.NONE
        _produce(broker.bootstrap, "fast")
        log = PartitionLog.load(tmp_path / "follower" / "div-0", "div", 0, LogConfig(), needs_recovery=False)
        for _ in range(20):
            log.append(build_batch(5, value_size=100))
        partition = Partition("div", 0, log, 1, lambda *_: None)  # type: ignore[arg-type,return-value]
        partition.make_follower([0, 1], 0, 1, [0, 1])
        monkeypatch.setattr(PartitionLog, "_rebuild_producer_state", rebuild)
        answered_divergence = threading.Event()

        async def leader(reader: Any, writer: Any) -> None:
            while True:
                try:
                    (size,) = struct.unpack(">i", await reader.readexactly(4))
                    header, _ = decode_request(await reader.readexactly(size))
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the fetcher stopped
                parts = []
                if not answered_divergence.is_set():
                    answered_divergence.set()
                    parts = [
                        {
                            "Topic": "div",
                            "Partitions": [
                                {
                                    "PartitionIndex": 0,
                                    "ErrorCode": 0,
                                    "HighWatermark": 0,
                                    "LastStableOffset": 0,
                                    "LogStartOffset": 0,
                                    "DivergingEpoch": {"Epoch": 0, "EndOffset": 25},
                                    "AbortedTransactions": [],
                                    "PreferredReadReplica": -1,
                                    "Records": b"",
                                }
                            ],
                        }
                    ]
                else:
                    await asyncio.sleep(0.1)
                body = {"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "Responses": parts}
                writer.write(encode_response(ApiKey.FETCH, FETCH_VERSION, header.correlation_id, body))
                await writer.drain()

        async def start() -> None:
            server = await asyncio.start_server(leader, "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
            fetcher = ReplicaFetcher(0, lambda _: ("127.0.0.1", port), FetcherConfig(1, backoff_ms=50))
            fetcher.add_partition(partition)
            fetcher.start()
            server_box.append(server)
            fetcher_box.append(fetcher)

        asyncio.run_coroutine_threadsafe(start(), broker.ctx.loop).result(10)
        assert slow_started.wait(10), f"the follower did not truncate: {fetcher_box[0].last_error!r}"
        took = _produce(broker.bootstrap, "fast")
        assert not slow_done.is_set(), "the produce was answered only after the truncation's replay"
        assert took < SLOW_FSYNC_S - 1
        assert slow_done.wait(SLOW_FSYNC_S + 10)
        assert log.log_end_offset == 25
        deadline = time.monotonic() + 10
        while fetcher_box[0].rounds < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fetcher_box[0].rounds >= 3  # fetching went on after the truncation
    finally:
        monkeypatch.setattr(PartitionLog, "_rebuild_producer_state", real_rebuild)

        async def stop() -> None:
            for fetcher in fetcher_box:
                await fetcher.stop()
            for server in server_box:
                server.close()

        asyncio.run_coroutine_threadsafe(stop(), broker.ctx.loop).result(10)
        broker.stop()


def _create(bootstrap: str, name: str, partitions: int) -> tuple[int, float]:
    """(error code, seconds) of a CreateTopics of ``name`` on its own connection."""
    with RawConnection(bootstrap, timeout_s=30) as conn:
        t0 = time.monotonic()
        body = conn.call(ApiKey.CREATE_TOPICS, 4, create_topic_body(name, partitions))
        return body["Topics"][0]["ErrorCode"], time.monotonic() - t0


def _produce_code(bootstrap: str, topic: str, partition: int) -> int:
    with RawConnection(bootstrap, timeout_s=30) as conn:
        body = conn.call(ApiKey.PRODUCE, 7, produce_body(topic, partition, build_batch(3)))
    return int(body["Responses"][0]["PartitionResponses"][0]["ErrorCode"])


def test_slow_topic_creation_does_not_stall_other_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A CreateTopics whose files take long (a slow fsync of a new partition's directory) is made on the
    partition-load thread: a produce to another topic is answered meanwhile, the new topic is not served (a
    produce to it gets the retriable UNKNOWN_TOPIC_OR_PARTITION, a Metadata that would auto-create it
    LEADER_NOT_AVAILABLE) until the CreateTopics is answered, and then every partition takes records."""
    fsync = _SlowFsync(lambda target: target.endswith("/newt-2"), once=True)
    real_fsync, slow_started, slow_done = fsync.real, fsync.started, fsync.done
    broker = start_broker(tmp_path)
    try:
        assert _create(broker.bootstrap, "fast", 1)[0] == ErrorCode.NONE
        _produce(broker.bootstrap, "fast")
        monkeypatch.setattr(os, "fsync", fsync)
        created: list[tuple[int, float]] = []
        creator = threading.Thread(target=lambda: created.append(_create(broker.bootstrap, "newt", 4)))
        creator.start()
        assert slow_started.wait(10), "the creation did not fsync newt-2's directory"
        took = _produce(broker.bootstrap, "fast")
        assert not slow_done.is_set(), "the produce was answered only after the creation's fsync"
        assert took < SLOW_FSYNC_S - 1
        assert _produce_code(broker.bootstrap, "newt", 0) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with RawConnection(broker.bootstrap) as conn:
            meta = conn.call(
                ApiKey.METADATA,
                9,
                {
                    "Topics": [{"Name": "newt"}],
                    "AllowAutoTopicCreation": True,
                    "IncludeTopicAuthorizedOperations": False,
                },
            )
        assert meta["Topics"][0]["ErrorCode"] == ErrorCode.LEADER_NOT_AVAILABLE
        creator.join(SLOW_FSYNC_S + 20)
        assert created and created[0][0] == ErrorCode.NONE
        assert created[0][1] >= SLOW_FSYNC_S - 0.5  # answered once the files exist
        for partition in range(4):
            assert _produce_code(broker.bootstrap, "newt", partition) == ErrorCode.NONE
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()


def test_failed_topic_creation_is_answered_logged_counted_and_leaves_no_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A creation whose files cannot be made (an fsync failing with EIO) is answered KAFKA_STORAGE_ERROR, logged
    at ERROR, counted in ``pylog_partition_load_failures_total``, and leaves no partition behind: the topic does
    not exist, and the same name can be created once the disk works."""
    from tests.server.test_metrics import scrape

    real_fsync = os.fsync

    def fsync(fd: Any) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}") if isinstance(fd, int) else ""
        if target.endswith("/bad-1"):
            raise OSError(5, "Input/output error (injected)")
        real_fsync(fd)

    broker = start_broker(tmp_path, {"pylog.metrics.listener": "127.0.0.1:0"})
    try:
        monkeypatch.setattr(os, "fsync", fsync)
        with caplog.at_level("ERROR", logger="broker_runtime.server.topics"):
            code, _ = _create(broker.bootstrap, "bad", 3)
        assert code == ErrorCode.KAFKA_STORAGE_ERROR
        assert any("bad" in r.getMessage() and "Input/output error" in r.getMessage() for r in caplog.records)
        assert broker.ctx.topics.partition_count("bad") is None
        assert not [p for p in broker.ctx.topics.local_logs() if p[0] == "bad"]
        assert not list(tmp_path.rglob("bad-*/*.log"))
        assert scrape(broker)[("pylog_partition_load_failures_total", ())] == 1
        monkeypatch.setattr(os, "fsync", real_fsync)
        assert _create(broker.bootstrap, "bad", 3)[0] == ErrorCode.NONE
        assert _produce_code(broker.bootstrap, "bad", 2) == ErrorCode.NONE
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()


def test_a_deferred_metadata_answer_names_the_endpoints_of_its_own_listener(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Metadata that auto-creates a topic is answered once the topic's files exist (here after a slow fsync);
    a request of another connection on another listener handled meanwhile must not change which listener's
    endpoints that answer names (the request's session is captured when it is handled)."""
    fsync = _SlowFsync(lambda target: target.endswith("/later-0"), once=True)
    real_fsync, slow_started = fsync.real, fsync.started
    broker = start_broker(
        tmp_path,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,OTHER://127.0.0.1:0",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "advertised.listeners": "PLAINTEXT://plain.example:1111,OTHER://other.example:2222",
        },
    )
    request = {"Topics": [{"Name": "later"}], "AllowAutoTopicCreation": True}
    try:
        monkeypatch.setattr(os, "fsync", fsync)
        answers: list[dict[str, Any]] = []

        def deferred() -> None:
            with RawConnection(broker.listener_bootstrap("PLAINTEXT"), timeout_s=30) as conn:
                answers.append(conn.call(ApiKey.METADATA, 9, request))

        asker = threading.Thread(target=deferred)
        asker.start()
        assert slow_started.wait(10), "the auto-creation did not fsync later-0's directory"
        with RawConnection(broker.listener_bootstrap("OTHER")) as other:
            meta = other.call(ApiKey.METADATA, 9, {"Topics": None, "AllowAutoTopicCreation": False})
            assert [(b["Host"], b["Port"]) for b in meta["Brokers"]] == [("other.example", 2222)]
        asker.join(SLOW_FSYNC_S + 20)
        assert answers and answers[0]["Topics"][0]["ErrorCode"] == ErrorCode.NONE
        assert [(b["Host"], b["Port"]) for b in answers[0]["Brokers"]] == [("plain.example", 1111)]
    finally:
        monkeypatch.setattr(os, "fsync", real_fsync)
        broker.stop()
