"""Produce over a real socket: Kafka's per-batch validation order, acks handling, and what gets appended."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.fsutil import read_log_dir_failure
from broker_runtime.protocol.batch_header import ATTR_CONTROL, CRC_OFFSET, compute_crc
from broker_runtime.storage.log_manager import CLEAN_SHUTDOWN_FILE
from tests.server.rawclient import RawConnection, build_batch, create_topic_body, fetch_body, produce_body
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)

PRODUCE, FETCH, CREATE = 0, 1, 19


def _topic(conn: RawConnection, name: str = "t", **configs: str) -> str:
    resp = conn.call(
        CREATE, 5, create_topic_body(name, 1, 1, {k.replace("_", "."): v for k, v in configs.items()})
    )
    assert resp["Topics"][0]["ErrorCode"] == 0, resp
    return name


def _produce(
    conn: RawConnection, records: Any, *, topic: str = "t", version: int = 9, acks: int = 1
) -> dict[str, Any]:
    resp = conn.call(PRODUCE, version, produce_body(topic, 0, records, acks))
    return resp["Responses"][0]["PartitionResponses"][0]


def _leo(broker: Any, topic: str = "t") -> int:
    return broker.ctx.topics.get_log(topic, 0).log_end_offset


def _recrc(batch: bytearray) -> bytearray:
    struct.pack_into(">I", batch, CRC_OFFSET, compute_crc(batch, 0, len(batch)))
    return batch


def test_append_assigns_offsets_and_reports_log_start(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        first = _produce(conn, build_batch(3))
        second = _produce(conn, build_batch(2))
    assert (first["ErrorCode"], first["BaseOffset"], first["LogAppendTimeMs"], first["LogStartOffset"]) == (
        0,
        0,
        -1,
        0,
    )
    assert (second["ErrorCode"], second["BaseOffset"]) == (0, 3)
    assert _leo(broker) == 5


def test_log_append_time_topic_reports_the_append_time(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn, "lat", message_timestamp_type="LogAppendTime")
        resp = _produce(conn, build_batch(2, timestamp_ms=1000), topic="lat")
    assert resp["ErrorCode"] == 0
    assert resp["LogAppendTimeMs"] > 1_600_000_000_000


def _corrupt_base_offset(b: bytearray) -> bytearray:
    struct.pack_into(">q", b, 0, 7)
    return b


def _corrupt_crc(b: bytearray) -> bytearray:
    b[-1] ^= 0xFF
    return b


def _count_mismatch(b: bytearray) -> bytearray:
    struct.pack_into(">i", b, 57, 5)
    return _recrc(b)


def _control(b: bytearray) -> bytearray:
    (attrs,) = struct.unpack_from(">h", b, 21)
    struct.pack_into(">h", b, 21, attrs | ATTR_CONTROL)
    return _recrc(b)


def _magic1(b: bytearray) -> bytearray:
    b[16] = 1
    return b


def _two_batches(b: bytearray) -> bytearray:
    return b + build_batch(1)


def _truncated(b: bytearray) -> bytearray:
    return b[:-3]


def _sequence_missing(_: bytearray) -> bytearray:
    return build_batch(2, producer_id=5, producer_epoch=0, base_sequence=-1)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (_corrupt_base_offset, ErrorCode.INVALID_RECORD),
        (_corrupt_crc, ErrorCode.CORRUPT_MESSAGE),
        (_count_mismatch, ErrorCode.INVALID_RECORD),
        (_control, ErrorCode.INVALID_RECORD),
        (_magic1, ErrorCode.INVALID_RECORD),
        (_two_batches, ErrorCode.INVALID_RECORD),
        (_truncated, ErrorCode.INVALID_RECORD),
        (_sequence_missing, ErrorCode.INVALID_RECORD),
    ],
)
def test_invalid_batches_are_rejected_and_not_appended(
    broker: Any, bootstrap: str, mutate: Any, expected: int
) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        resp = _produce(conn, mutate(build_batch(3)))
        assert resp["ErrorCode"] == expected, resp
        assert resp["BaseOffset"] == -1
        assert resp["ErrorMessage"]
        assert _leo(broker) == 0
        # The connection keeps working and valid data still goes in.
        assert _produce(conn, build_batch(1))["ErrorCode"] == 0
    assert _leo(broker) == 1


def test_validation_order_base_offset_before_size_before_crc(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn, max_message_bytes="200")
        big = build_batch(10, value_size=100)
        assert (
            _produce(conn, _corrupt_crc(_corrupt_base_offset(bytearray(big))))["ErrorCode"]
            == ErrorCode.INVALID_RECORD
        )
        assert _produce(conn, _corrupt_crc(bytearray(big)))["ErrorCode"] == ErrorCode.MESSAGE_TOO_LARGE
        assert _produce(conn, _corrupt_crc(build_batch(1)))["ErrorCode"] == ErrorCode.CORRUPT_MESSAGE
    assert _leo(broker) == 0


def test_timestamps_outside_the_allowed_window(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn, message_timestamp_before_max_ms="60000", message_timestamp_after_max_ms="60000")
        assert _produce(conn, build_batch(2, timestamp_ms=1000))["ErrorCode"] == ErrorCode.INVALID_TIMESTAMP
        assert _produce(conn, build_batch(2, timestamp_ms=2**62))["ErrorCode"] == ErrorCode.INVALID_TIMESTAMP
        assert _produce(conn, build_batch(2))["ErrorCode"] == 0
    assert _leo(broker) == 2


def test_invalid_acks_rejects_every_partition(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        resp = _produce(conn, build_batch(1), acks=2)
    assert resp["ErrorCode"] == ErrorCode.INVALID_REQUIRED_ACKS
    assert _leo(broker) == 0


def test_unknown_topic(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        assert (
            _produce(conn, build_batch(1), topic="nope")["ErrorCode"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )


def test_legacy_produce_versions_are_refused_clearly(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        for version in (0, 1, 2):
            resp = _produce(conn, build_batch(1), version=version)
            assert resp["ErrorCode"] == ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert _leo(broker) == 0


def test_zstd_needs_produce_v7(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        zstd = build_batch(3, compression=4)
        assert _produce(conn, zstd, version=6)["ErrorCode"] == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        assert _produce(conn, zstd, version=7)["ErrorCode"] == 0
    assert _leo(broker) == 3


def test_acks0_sends_no_response_and_closes_on_error(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        conn.send_raw(conn.encode(PRODUCE, 9, produce_body("t", 0, build_batch(2), acks=0)))
        # The next request's answer is the first thing on the wire: acks=0 got none.
        resp = conn.call(FETCH, 12, fetch_body("t", 0, 0))
        assert resp["Responses"][0]["Partitions"][0]["HighWatermark"] == 2
        conn.send_raw(conn.encode(PRODUCE, 9, produce_body("t", 0, _corrupt_crc(build_batch(1)), acks=0)))
        assert conn.is_closed_by_peer()
    assert _leo(broker) == 2


def test_idempotent_duplicate_answers_original_offset(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        b0 = build_batch(3, producer_id=42, producer_epoch=0, base_sequence=0)
        b1 = build_batch(2, producer_id=42, producer_epoch=0, base_sequence=3)
        assert _produce(conn, b0, acks=-1)["BaseOffset"] == 0
        assert _produce(conn, b1, acks=-1)["BaseOffset"] == 3
        dup = _produce(conn, b0, acks=-1)
        assert (dup["ErrorCode"], dup["BaseOffset"]) == (0, 0)
        gap = _produce(conn, build_batch(1, producer_id=42, producer_epoch=0, base_sequence=9))
        assert gap["ErrorCode"] == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert _leo(broker) == 5


def test_pipelined_requests_are_answered_in_order(broker: Any, bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        _topic(conn)
        # A delayed fetch first, then produces on the same connection: answers must keep request order.
        wire = conn.encode(FETCH, 12, fetch_body("t", 0, 0, max_wait_ms=300, min_bytes=1 << 30))
        first_id = conn.correlation_id
        for _ in range(5):
            wire += conn.encode(PRODUCE, 9, produce_body("t", 0, build_batch(1)))
        conn.send_raw(wire)
        cid, fetched = conn.read_response(FETCH, 12)
        assert cid == first_id
        offsets = []
        for i in range(5):
            cid, resp = conn.read_response(PRODUCE, 9)
            assert cid == first_id + 1 + i
            offsets.append(resp["Responses"][0]["PartitionResponses"][0]["BaseOffset"])
    assert offsets == [0, 1, 2, 3, 4]
    assert fetched["Responses"][0]["Partitions"][0]["ErrorCode"] == 0


def test_record_set_larger_than_segment_bytes_is_record_list_too_large(broker: Any, bootstrap: str) -> None:
    batch = build_batch(4, value_size=100)
    size = len(batch)
    with RawConnection(bootstrap) as conn:
        _topic(conn, "fits", segment_bytes=str(size))
        _topic(conn, "small", segment_bytes=str(size - 1))
        _topic(conn, "both", segment_bytes=str(size - 1), max_message_bytes=str(size - 1))
        # Exactly segment.bytes is stored (Kafka refuses only a larger set).
        assert _produce(conn, bytearray(batch), topic="fits")["ErrorCode"] == 0
        refused = _produce(conn, bytearray(batch), topic="small")
        # 18, not retriable: a client must give up instead of resending the same set forever.
        assert refused["ErrorCode"] == ErrorCode.RECORD_LIST_TOO_LARGE == 18
        assert refused["BaseOffset"] == -1
        assert f"{size} bytes" in refused["ErrorMessage"] and f"{size - 1}" in refused["ErrorMessage"]
        # max.message.bytes is checked first (Kafka's order).
        assert _produce(conn, bytearray(batch), topic="both")["ErrorCode"] == ErrorCode.MESSAGE_TOO_LARGE
        # Nothing was appended and the connection still serves: a smaller set goes in.
        assert _leo(broker, "small") == 0
        assert _produce(conn, build_batch(1), topic="small")["ErrorCode"] == 0
    assert (_leo(broker, "fits"), _leo(broker, "small")) == (4, 1)


def test_storage_failure_is_answered_per_partition_then_halts_the_broker(
    broker: Any, bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A partition directory vanishing under the broker (a failed or unmounted disk) makes the next segment roll
    fail: that partition answers KAFKA_STORAGE_ERROR and the request gets its answer; then the broker halts as
    Kafka's does when its only log dir failed ("Shutdown broker because all log dirs in ... have failed"), since
    the failed log's memory may no longer match its files: one ERROR line for the append, the CRITICAL shutdown
    lines, no traceback, no clean-shutdown marker. From the failure on, before the halt, the log dir is offline
    (Kafka's hasOfflineLogDir check): the other partition of the same request, a fetch and a produce queued
    behind it on the connection are all answered KAFKA_STORAGE_ERROR, and nothing more is written."""
    batch = build_batch(3, value_size=100)
    with RawConnection(bootstrap) as conn:
        resp = conn.call(CREATE, 5, create_topic_body("disk", 2, 1, {"segment.bytes": str(len(batch))}))
        assert resp["Topics"][0]["ErrorCode"] == 0, resp
        body = produce_body("disk", 0, bytearray(batch))
        body["TopicData"][0]["PartitionData"].append({"Index": 1, "Records": bytearray(batch)})
        first = conn.call(PRODUCE, 9, body)["Responses"][0]["PartitionResponses"]
        assert [(p["Index"], p["ErrorCode"], p["BaseOffset"]) for p in first] == [(0, 0, 0), (1, 0, 0)]

        lost = broker.ctx.topics.get_log("disk", 0).dir
        kept = broker.ctx.topics.get_log("disk", 1).dir
        kept_files = {f.name: f.stat().st_size for f in kept.iterdir()}
        shutil.rmtree(lost)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            # Each partition's segment is full: this append has to roll, which needs the directory. The fetch
            # and the produce behind it arrive in the same read, so they are handled before the loop stops.
            body = produce_body("disk", 0, build_batch(3, value_size=100))
            body["TopicData"][0]["PartitionData"].append(
                {"Index": 1, "Records": build_batch(3, value_size=100)}
            )
            conn.send_raw(
                conn.encode(PRODUCE, 9, body)
                + conn.encode(FETCH, 12, fetch_body("disk", 1, 0))
                + conn.encode(PRODUCE, 9, produce_body("disk", 1, build_batch(1)))
            )
            second = conn.read_response(PRODUCE, 9)[1]["Responses"][0]["PartitionResponses"]
            assert [(p["Index"], p["ErrorCode"], p["BaseOffset"]) for p in second] == [
                (0, ErrorCode.KAFKA_STORAGE_ERROR, -1),
                (1, ErrorCode.KAFKA_STORAGE_ERROR, -1),
            ]
            assert second[0]["ErrorMessage"] and "offline" in second[1]["ErrorMessage"]
            fetched = conn.read_response(FETCH, 12)[1]["Responses"][0]["Partitions"][0]
            assert (fetched["ErrorCode"], fetched["Records"] or b"") == (ErrorCode.KAFKA_STORAGE_ERROR, b"")
            third = conn.read_response(PRODUCE, 9)[1]["Responses"][0]["PartitionResponses"][0]
            assert third["ErrorCode"] == ErrorCode.KAFKA_STORAGE_ERROR
            assert broker.wait(10), "the broker still runs after its log dir failed"
    assert broker.ctx.topics.get_log("disk", 1).log_end_offset == 3
    assert {f.name: f.stat().st_size for f in kept.iterdir()} == kept_files
    assert broker.failure is not None and "disk-0" in broker.failure and "have failed" in broker.failure
    assert not [r for r in caplog.records if r.exc_info]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "disk-0" in errors[0] and "\n" not in errors[0], errors
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert critical and critical[0].startswith("Shutdown broker 0 because all log dirs in"), critical
    assert not (Path(broker.config.log_dirs[0]) / CLEAN_SHUTDOWN_FILE).exists()
    # Its record for a launcher (the embedded broker's refuses to start it again): the CRITICAL line, the errno.
    recorded = read_log_dir_failure(broker.config.log_dirs[0])
    assert recorded == f"{critical[0]}\nerrno={errno.ENOENT} (ENOENT)\n"


def test_a_refused_checkpoint_write_on_the_storage_thread_halts_the_broker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A write the disk refuses off the event loop (here the periodic checkpoint on the storage thread; the full
    list is in broker_runtime.storage.log_dir_failure) halts the broker as a refused append does (Kafka's
    CheckpointFileWithFailureHandler sends it to the LogDirFailureChannel): the loop is woken from that thread,
    one CRITICAL shutdown line naming the file and what to do, no traceback, the record for launchers with the
    errno, no clean-shutdown marker. The refusal is real: the checkpoint's temporary file is /dev/full (ENOSPC)."""
    log_dir = tmp_path / "kafka-logs"
    broker = start_broker(tmp_path, {"log.flush.offset.checkpoint.interval.ms": "50"})
    try:
        with caplog.at_level(logging.INFO):
            (log_dir / f"recovery-point-offset-checkpoint.{os.getpid()}.tmp").symlink_to("/dev/full")
            assert broker.wait(10), "the broker still runs after its checkpoint write was refused"
    finally:
        broker.stop()
    assert broker.failure is not None and "recovery-point-offset-checkpoint" in broker.failure, broker.failure
    assert "No space left on device (free space on that file system" in broker.failure
    assert not [r for r in caplog.records if r.exc_info]
    critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
    assert critical and critical[0] == f"Shutdown broker 0 because {broker.failure}", critical
    assert not (log_dir / CLEAN_SHUTDOWN_FILE).exists()
    assert read_log_dir_failure(log_dir) == f"{critical[0]}\nerrno={errno.ENOSPC} (ENOSPC)\n"
