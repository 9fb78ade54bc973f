"""The streaming sink's log and its options, without Spark: checkpoint locations, the query id, entries on disk,
``pylog.deliveryGuarantee`` and what it conflicts with."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from broker_runtime.errors import ConfigError, StreamingSinkError
from spark_kafka_log.options import batch_options, parse_writer_options, stream_options
from spark_kafka_log.sink_log import (
    COMMITTED,
    PREPARED,
    RETAINED_ENTRIES,
    SinkEntry,
    SinkLog,
    checkpoint_dir,
    query_id,
)
from spark_kafka_log.txn_commit import TaskTransaction


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/tmp/ck", "/tmp/ck"),
        ("file:///tmp/ck", "/tmp/ck"),
        ("file:/tmp/ck", "/tmp/ck"),  # Hadoop's spelling
        ("file://localhost/tmp/a%20b", "/tmp/a b"),
        ("rel/ck", os.path.abspath("rel/ck")),
    ],
)
def test_checkpoint_locations_on_the_local_file_system(location: str, expected: str) -> None:
    assert checkpoint_dir(location) == expected


@pytest.mark.parametrize(
    "location", ["s3a://bucket/ck", "hdfs://nn:8020/ck", "abfss://c@a.dfs.core.windows.net/x"]
)
def test_other_schemes_are_refused_naming_the_scheme(location: str) -> None:
    with pytest.raises(ConfigError, match=r"supports local paths and file: URIs, not \w+:"):
        checkpoint_dir(location)


def test_file_uri_with_a_remote_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="with a host"):
        checkpoint_dir("file://nas/ck")


def test_query_id_comes_from_sparks_metadata_file(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text('{"id":"0d4ea3d6-da3d-4f32-9593-ca551a2f0bdb"}')
    assert query_id(str(tmp_path)) == "0d4ea3d6-da3d-4f32-9593-ca551a2f0bdb"
    (tmp_path / "metadata").write_text("{}")
    with pytest.raises(StreamingSinkError, match="holds no query id"):
        query_id(str(tmp_path))
    with pytest.raises(StreamingSinkError, match="is checkpointLocation the query's checkpoint directory"):
        query_id(str(tmp_path / "nowhere"))


def _entry(batch_id: int, status: str = PREPARED) -> SinkEntry:
    txn = TaskTransaction("pylog-stream-q-0", 4000, 3, (("events", 0), ("events", 2)), 1795437640000, 60000)
    return SinkEntry(batch_id, status, "q", [txn], records=10, tasks_ended_at_ms=5, prepared_at_ms=7)


def test_entries_round_trip_and_the_newest_wins(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    assert log.newest() is None and log.batch_ids() == []
    log.write(_entry(0, COMMITTED))
    log.write(_entry(1))
    (tmp_path / "pylog-sink" / "stalled-1.test").touch()  # other files are not entries
    newest = log.newest()
    assert newest == _entry(1) and not newest.committed
    log.mark_committed(newest)
    again = log.read(1)
    assert (
        again.committed and again.committed_at_ms is not None and again.transactions == _entry(1).transactions
    )
    doc = json.loads((tmp_path / "pylog-sink" / "1.json").read_text())
    assert (
        doc["version"] == 1 and doc["status"] == "committed" and doc["transactions"][0]["producerEpoch"] == 3
    )


def test_only_the_newest_entries_are_retained(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    for batch_id in range(RETAINED_ENTRIES + 5):
        log.mark_committed(_entry(batch_id))
    assert log.batch_ids() == list(range(5, RETAINED_ENTRIES + 5))


def test_a_corrupt_entry_is_an_error_naming_the_file(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    log.write(_entry(3))
    path = tmp_path / "pylog-sink" / "3.json"
    path.write_text('{"version": 1, "batchId": 3, "status": "maybe"}')
    with pytest.raises(StreamingSinkError, match=r"3\.json is corrupt \(unknown status 'maybe'\)"):
        log.newest()


def test_streaming_is_exactly_once_by_default_with_its_own_transactional_id_prefix() -> None:
    default = stream_options(parse_writer_options({"topic": "t"}))
    assert default.transactional and default.transactional_id_prefix == "pylog-stream"
    mine = stream_options(parse_writer_options({"topic": "t", "kafka.transactional.id": "orders"}))
    assert mine.transactional_id_prefix == "orders"
    opted_out = stream_options(
        parse_writer_options({"topic": "t", "pylog.deliveryGuarantee": "At-Least-Once"})
    )
    assert not opted_out.transactional and opted_out.enable_idempotence


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"kafka.acks": "1"},
            "exactly-once by default, which needs the idempotent producer; it is off because of kafka.acks=1",
        ),
        (
            {"kafka.transactional.id": "x", "pylog.deliveryGuarantee": "at-least-once"},
            "'kafka.transactional.id' and 'pylog.deliveryGuarantee=at-least-once' contradict",
        ),
        ({"pylog.deliveryGuarantee": "exactly-twice"}, "allowed values: exactly-once, at-least-once"),
    ],
)
def test_stream_option_conflicts_are_clear_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        stream_options(parse_writer_options({"topic": "t", **options}))


def test_delivery_guarantee_is_for_streaming_only() -> None:
    with pytest.raises(ConfigError, match="applies to writeStream only"):
        batch_options(parse_writer_options({"topic": "t", "pylog.deliveryGuarantee": "exactly-once"}))
