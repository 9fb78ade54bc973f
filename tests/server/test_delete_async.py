"""DeleteTopics does its file work off the event loop, as Kafka's ``LogManager.asyncDelete`` does.

A deletion renames each partition directory to ``<topic>-<partition>.<id>-delete`` at once (the topic is gone
from then on) and leaves the fsyncs, the checkpoint rewrite (once per batch) and the removal to the
partition-load thread. Checked with real fsyncs made slow (``os.fsync`` wrapped; the broker runs in this process):

* Deleting 50 topics is answered, and another connection's ApiVersions too, while the deletion's first fsync is
  still sleeping; every fsync of the deletion runs on the partition-load thread, a handful in all (one per
  directory and checkpoint file, not a dozen per topic); the ``-delete`` directories are gone afterwards.
* A topic deleted and created again at once (its deletion's file work still pending) is a new topic: a new id,
  an empty log, its own directory.
* A broker SIGKILLed after a deletion was answered removes the ``-delete`` directories at its next start and does
  not serve the topic; a crash between the renames of one deletion (simulated on disk) leaves no topic with
  partitions missing: the rest of that incarnation is deleted at the next start, a newer one of the name kept.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.launch.process import broker_log_dir, broker_process
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.storage.config import LogConfig
from broker_runtime.storage.log_manager import LogManager
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, produce_body
from tests.support.brokers import start_broker
from tests.support.processes import kill_broker

pytestmark = pytest.mark.timeout(60)

SLOW_FSYNC_S = 0.5


class _RecordingFsync:
    """``os.fsync`` that records the thread of each call and, once armed, sleeps :data:`SLOW_FSYNC_S` before the
    first one (``started`` set as it begins, ``done`` once it has finished)."""

    def __init__(self) -> None:
        self.real = os.fsync
        self.threads: list[str] = []
        self.armed = False
        self.started, self.done = threading.Event(), threading.Event()

    def __call__(self, fd: Any) -> None:
        if self.armed:
            self.threads.append(threading.current_thread().name)
            if not self.started.is_set():
                self.started.set()
                time.sleep(SLOW_FSYNC_S)
                self.real(fd)
                self.done.set()
                return
        self.real(fd)


def _create(conn: RawConnection, names: list[str], partitions: int = 1) -> None:
    body = create_topic_body(names[0], partitions)
    body["Topics"] = [create_topic_body(n, partitions)["Topics"][0] for n in names]
    answer = conn.call(ApiKey.CREATE_TOPICS, 5, body)
    assert [t["ErrorCode"] for t in answer["Topics"]] == [ErrorCode.NONE] * len(names), answer


def _delete(conn: RawConnection, names: list[str]) -> dict[str, Any]:
    return conn.call(ApiKey.DELETE_TOPICS, 5, {"TopicNames": names, "TimeoutMs": 5000})


def _topic_id(conn: RawConnection, name: str) -> tuple[int, uuid.UUID]:
    meta = conn.call(
        ApiKey.METADATA,
        12,
        {
            "Topics": [{"Name": name, "TopicId": uuid.UUID(int=0)}],
            "AllowAutoTopicCreation": False,
            "IncludeTopicAuthorizedOperations": False,
        },
    )
    topic = meta["Topics"][0]
    return topic["ErrorCode"], topic["TopicId"]


def _wait_no_delete_dirs(log_dir: Path, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while any(p.name.endswith("-delete") for p in log_dir.iterdir()):
        assert time.monotonic() < deadline, sorted(p.name for p in log_dir.iterdir())
        time.sleep(0.02)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    b = start_broker(tmp_path_factory.mktemp("delete-async"))
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture()
def fsync(monkeypatch: pytest.MonkeyPatch) -> _RecordingFsync:
    recording = _RecordingFsync()
    monkeypatch.setattr(os, "fsync", recording)
    return recording


def test_deleting_50_topics_does_not_stall_the_loop(broker: Any, fsync: _RecordingFsync) -> None:
    names = [f"gone{i}" for i in range(50)]
    log_dir = Path(broker.config.log_dirs[0])
    with RawConnection(broker.bootstrap, timeout_s=30) as conn, RawConnection(broker.bootstrap) as other:
        _create(conn, names)
        fsync.armed = True
        t0 = time.monotonic()
        answer = _delete(conn, names)
        took = time.monotonic() - t0
        assert [r["ErrorCode"] for r in answer["Responses"]] == [ErrorCode.NONE] * 50, answer
        versions = other.call(
            ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
        )
        assert versions["ErrorCode"] == ErrorCode.NONE
        # Answered while the deletion's file work still waits for the disk: the loop never did it.
        assert fsync.started.wait(10), "the deletion never fsynced"
        assert not fsync.done.is_set(), (
            "DeleteTopics or ApiVersions was answered only after the deletion's fsync"
        )
        assert took < SLOW_FSYNC_S
        assert _topic_id(conn, "gone7")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION  # gone at once
        assert fsync.done.wait(10)
        _wait_no_delete_dirs(log_dir)
    assert not [p for p in log_dir.iterdir() if p.name.startswith("gone")]
    assert set(fsync.threads) == {"pylog-partition-load_0"}, fsync.threads
    # One fsync of the directory and two a checkpoint file (file, directory): not ~12 a topic.
    assert len(fsync.threads) <= 7, fsync.threads


def test_a_topic_recreated_right_after_its_deletion_is_a_new_topic(
    broker: Any, fsync: _RecordingFsync
) -> None:
    with RawConnection(broker.bootstrap, timeout_s=30) as conn:
        _create(conn, ["again"], 2)
        _, old_id = _topic_id(conn, "again")
        produced = conn.call(ApiKey.PRODUCE, 7, produce_body("again", 0, build_batch(5)))
        assert produced["Responses"][0]["PartitionResponses"][0]["ErrorCode"] == ErrorCode.NONE
        fsync.armed = True
        assert _delete(conn, ["again"])["Responses"][0]["ErrorCode"] == ErrorCode.NONE
        assert fsync.started.wait(10)
        assert not fsync.done.is_set(), "the deletion's file work was not pending at the recreation"
        _create(conn, ["again"], 2)  # its files are made after the deletion's, on the partition-load thread
        code, new_id = _topic_id(conn, "again")
        assert code == ErrorCode.NONE and new_id != old_id
        produced = conn.call(ApiKey.PRODUCE, 7, produce_body("again", 0, build_batch(1)))
        assert produced["Responses"][0]["PartitionResponses"][0]["BaseOffset"] == 0  # an empty, new log
    _wait_no_delete_dirs(Path(broker.config.log_dirs[0]))


def test_a_broker_killed_after_a_deletion_removes_it_at_start(tmp_path: Path) -> None:
    data = tmp_path / "broker"
    log_dir = broker_log_dir(data)
    with broker_process(data) as bootstrap, RawConnection(bootstrap, timeout_s=30) as conn:
        _create(conn, ["kept"], 1)
        _create(conn, ["doomed"], 8)
        assert _delete(conn, ["doomed"])["Responses"][0]["ErrorCode"] == ErrorCode.NONE
        kill_broker(data)
    assert not [p for p in Path(log_dir).iterdir() if p.name.startswith("doomed-") and "." not in p.name]
    with broker_process(data) as bootstrap, RawConnection(bootstrap, timeout_s=30) as conn:
        assert _topic_id(conn, "doomed")[0] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert _topic_id(conn, "kept")[0] == ErrorCode.NONE
        assert not [p for p in Path(log_dir).iterdir() if p.name.startswith("doomed")]


def test_a_deletion_cut_by_a_crash_between_its_renames_is_finished_at_start(tmp_path: Path) -> None:
    """On disk: ``t-0`` of incarnation A renamed ``-delete``, ``t-1`` of A not yet (the crash), ``u-0`` of a
    topic not being deleted. A start deletes ``t-1`` too; a recreated ``t`` (incarnation B) would be kept."""
    log_dir = tmp_path / "logs"
    old, new = uuid.uuid4(), uuid.uuid4()
    logs = LogManager([log_dir], LogConfig())
    logs.startup()
    for topic, partition, topic_id in (("t", 0, old), ("t", 1, old), ("u", 0, new), ("t", 2, new)):
        logs.create_log(topic, partition, {}, topic_id=topic_id)
    logs.shutdown()
    (log_dir / "t-0").rename(log_dir / f"t-0.{uuid.uuid4().hex}-delete")
    logs = LogManager([log_dir], LogConfig())
    logs.startup()
    try:
        assert sorted(logs.all_logs()) == [("t", 2), ("u", 0)]
        assert sorted(p.name for p in log_dir.iterdir() if p.is_dir()) == ["t-2", "u-0"]
    finally:
        logs.shutdown()
