"""The admin tools end to end against a real broker: topics (create, list, describe, alter, delete), configs
(alter, describe), get-offsets and delete-records, with their error exits: an unknown topic and a broker refusal
exit 1 with one line naming the error, bad input (a malformed JSON file, a bad --time, a config without '=')
exits 2, an unreachable broker exits 1 naming the address.

The first and the last command run as real ``python -m broker_runtime`` subprocesses, as an operator runs them
(``tool``: exit status, stdout, no traceback on stderr); the others go through the same ``pylog-broker`` entry
point in the test process (``tool_here``, tests/tools/conftest.py), which saves a Python start per command."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.tools import Tool

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def bootstrap(broker: str) -> str:
    """The tools' module broker (tests/tools/conftest.py: a child process)."""
    return broker


def _ok(run: Tool, *args: str) -> str:
    done: subprocess.CompletedProcess[str] = run(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _fails(run: Tool, status: int, *args: str) -> str:
    done: subprocess.CompletedProcess[str] = run(*args)
    assert done.returncode == status, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_topics_configs_offsets_and_delete_records(
    bootstrap: str, tmp_path: Path, tool: Tool, tool_here: Tool
) -> None:
    b = ("--bootstrap-server", bootstrap)
    assert _ok(
        tool,
        "topics",
        *b,
        "--create",
        "--topic",
        "ops",
        "--partitions",
        "2",
        "--config",
        "retention.ms=600000",
    ) == ("Created topic ops.\n")
    assert (
        _ok(tool_here, "topics", *b, "--alter", "--topic", "ops", "--partitions", "3")
        == "Topic ops now has 3 partitions.\n"
    )
    assert "ops" in _ok(tool_here, "topics", *b, "--list").split()
    described = _ok(tool_here, "topics", *b, "--describe", "--topic", "ops").splitlines()
    assert described[0].split("\t") == [
        "Topic: ops",
        "PartitionCount: 3",
        "ReplicationFactor: 1",
        "Configs: retention.ms=600000",
    ]
    assert [line.split("\t")[2] for line in described[1:]] == ["Partition: 0", "Partition: 1", "Partition: 2"]

    _ok(
        tool_here,
        "configs",
        *b,
        "--entity-type",
        "topics",
        "--entity-name",
        "ops",
        "--alter",
        "--add-config",
        "cleanup.policy=[compact,delete],segment.bytes=1048576",
        "--delete-config",
        "retention.ms",
    )
    shown = _ok(
        tool_here, "configs", *b, "--entity-type", "topics", "--entity-name", "ops", "--describe"
    ).splitlines()
    assert shown == [
        "Dynamic configs for topic ops are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete, "
        "DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, "
        "DEFAULT_CONFIG:log.segment.bytes=1073741824}",
    ]
    _ok(
        tool_here,
        "configs",
        *b,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.retention.bytes=123456789",
    )
    assert (
        "  log.retention.bytes=123456789 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.bytes=123456789, "
        "DEFAULT_CONFIG:log.retention.bytes=-1}"
        in (
            _ok(
                tool_here, "configs", *b, "--entity-type", "brokers", "--entity-name", "0", "--describe"
            ).splitlines()
        )
    )

    # keyed: "ops" is compacted now, and a compacted topic refuses keyless records (as Kafka's LogValidator)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    errors: list[object] = []
    for i in range(5):
        producer.produce(
            "ops",
            b"v%d" % i,
            key=b"k%d" % i,
            partition=1,
            timestamp=1_000_000 + i,
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
    assert producer.flush(10) == 0
    assert errors == []
    assert _ok(tool_here, "get-offsets", *b, "--topic", "ops").splitlines() == [
        "ops:0:0",
        "ops:1:5",
        "ops:2:0",
    ]
    assert (
        _ok(tool_here, "get-offsets", *b, "--topic", "ops", "--partitions", "1", "--time", "1000003")
        == "ops:1:3\n"
    )

    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        json.dumps({"version": 1, "partitions": [{"topic": "ops", "partition": 1, "offset": 3}]})
    )
    done = tool_here("delete-records", *b, "--offset-json-file", str(offsets))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "Records delete operation completed:",
        "partition: ops-1\tlow_watermark: 3",
    ]
    assert "1 partition(s) done, 0 failed" in done.stderr
    assert (
        _ok(tool_here, "get-offsets", *b, "--topic", "ops", "--partitions", "1", "--time", "-2")
        == "ops:1:3\n"
    )

    # Errors: one line each, exit 1 for what the broker refused, 2 for bad input.
    beyond = tmp_path / "beyond.json"
    beyond.write_text(json.dumps({"partitions": [{"topic": "ops", "partition": 1, "offset": 99}]}))
    done = tool_here("delete-records", *b, "--offset-json-file", str(beyond))
    assert done.returncode == 1 and "OFFSET_OUT_OF_RANGE" in done.stdout
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    assert "is not JSON" in _fails(tool_here, 2, "delete-records", *b, "--offset-json-file", str(bad_json))
    assert "cannot read" in _fails(
        tool_here, 2, "delete-records", *b, "--offset-json-file", str(tmp_path / "missing.json")
    )
    assert "--time" in _fails(tool_here, 2, "get-offsets", *b, "--topic", "ops", "--time", "yesterday")
    assert "expected key=value" in _fails(
        tool_here,
        2,
        "configs",
        *b,
        "--entity-type",
        "topics",
        "--entity-name",
        "ops",
        "--alter",
        "--add-config",
        "oops",
    )
    assert "INVALID_CONFIG" in _fails(
        tool_here,
        1,
        "configs",
        *b,
        "--entity-type",
        "topics",
        "--entity-name",
        "ops",
        "--alter",
        "--add-config",
        "segment.bytes=tiny",
    )
    assert "num.partitions" in _fails(
        tool_here,
        1,
        "configs",
        *b,
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--alter",
        "--add-config",
        "num.partitions=4",
    )
    assert "UNKNOWN_TOPIC_OR_PARTITION" in _fails(tool_here, 1, "get-offsets", *b, "--topic", "nope")
    assert "INVALID_PARTITIONS" in _fails(
        tool_here, 1, "topics", *b, "--alter", "--topic", "ops", "--partitions", "2"
    )
    assert "TOPIC_ALREADY_EXISTS" in _fails(tool_here, 1, "topics", *b, "--create", "--topic", "ops")
    assert _ok(tool_here, "topics", *b, "--delete", "--topic", "ops") == "Deleted topic ops.\n"
    assert "UNKNOWN_TOPIC_OR_PARTITION" in _fails(tool_here, 1, "topics", *b, "--delete", "--topic", "ops")
    assert "cannot reach the broker" in _fails(
        tool, 1, "topics", "--bootstrap-server", "127.0.0.1:1", "--list"
    )
