"""consumer-groups end to end against a group that librdkafka (confluent-kafka) consumers built: list, describe
with lag and members, reset-offsets (refused while the group is active), delete; and the error exits."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from broker_runtime.launch import create_topic
from tests.support.tools import Tool, assert_one_line_error

pytestmark = pytest.mark.timeout(180)


def _rows(stdout: str) -> list[list[str]]:
    """The data rows of a table printed by the tool (header row dropped)."""
    lines = [line.split() for line in stdout.splitlines() if line.strip()]
    start = next(i for i, row in enumerate(lines) if row[0] == "GROUP")
    return lines[start + 1 :]


def test_describe_reset_and_delete_a_group(broker: str, tool: Tool, tool_here: Tool) -> None:
    create_topic(broker, "grouped", partitions=2)
    producer = Producer({"bootstrap.servers": broker})
    for i in range(10):
        producer.produce("grouped", value=b"v%d" % i, partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": "g",
            "client.id": "lagging",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["grouped"])
    seen = 0
    while seen < 10:
        message = consumer.poll(10)
        assert message is not None and not message.error(), message and message.error()
        seen += 1
    # Commit 3 of partition 0's 5 records and 1 of partition 1's.
    consumer.commit(
        offsets=[TopicPartition("grouped", 0, 3), TopicPartition("grouped", 1, 1)], asynchronous=False
    )
    groups = ["consumer-groups", "--bootstrap-server", broker]
    try:
        listed = tool(*groups, "--list")
        assert listed.returncode == 0 and "g" in listed.stdout.split()
        active = tool(*groups, "--describe", "--group", "g")
        assert active.returncode == 0, active.stderr
        rows = _rows(active.stdout)
        assert [r[:6] for r in rows] == [
            ["g", "grouped", "0", "3", "5", "2"],
            ["g", "grouped", "1", "1", "5", "4"],
        ]
        assert all(
            r[6].startswith("lagging") and r[8] == "lagging" for r in rows
        )  # the member and its client id
        refused = tool(
            *groups, "--reset-offsets", "--group", "g", "--all-topics", "--to-earliest", "--execute"
        )
        assert_one_line_error(refused, 1, "can only be reset if the group 'g' is inactive", "Stable")
    finally:
        consumer.close()

    empty = tool_here(*groups, "--describe", "--group", "g")
    assert "Consumer group 'g' has no active members." in empty.stdout
    dry = tool_here(
        *groups, "--reset-offsets", "--group", "g", "--topic", "grouped", "--to-latest", "--dry-run"
    )
    assert dry.returncode == 0 and [r[3] for r in _rows(dry.stdout)] == ["5", "5"]
    assert [r[3] for r in _rows(tool_here(*groups, "--describe", "--group", "g").stdout)] == [
        "3",
        "1",
    ]  # unchanged
    clamped = tool_here(
        *groups, "--reset-offsets", "--group", "g", "--topic", "grouped:1", "--to-offset", "99", "--execute"
    )
    assert (
        clamped.returncode == 0 and "higher than latest offset of grouped-1; it is set to 5" in clamped.stderr
    )
    early = tool_here(
        *groups,
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "grouped:0",
        "--to-datetime",
        "2000-01-01T00:00:00Z",
        "--execute",
    )
    assert early.returncode == 0, early.stderr
    rows = _rows(tool_here(*groups, "--describe", "--group", "g").stdout)
    assert [(r[2], r[3], r[5]) for r in rows] == [("0", "0", "5"), ("1", "5", "0")]

    deleted = tool(*groups, "--delete", "--group", "g")
    assert (
        deleted.returncode == 0
        and "Deletion of requested consumer groups ('g') was successful." in deleted.stdout
    )
    assert_one_line_error(tool(*groups, "--describe", "--group", "g"), 1, "consumer group 'g' does not exist")
    gone = tool_here(*groups, "--delete", "--group", "g")
    assert gone.returncode == 1 and "could not be deleted due to: GROUP_ID_NOT_FOUND" in gone.stderr
    assert_one_line_error(tool_here(*groups, "--describe"), 2, "--group is required")
    assert_one_line_error(
        tool_here(*groups, "--reset-offsets", "--group", "g", "--topic", "grouped", "--execute"),
        2,
        "--to-earliest",
    )
