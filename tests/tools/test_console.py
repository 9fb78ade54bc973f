"""console-producer and console-consumer end to end: lines in, records on the broker, lines out; and their
error exits."""

from __future__ import annotations

import pytest

from broker_runtime.launch import create_topic
from tests.support.tools import Tool, assert_one_line_error

pytestmark = pytest.mark.timeout(120)


def test_lines_with_keys_and_headers_round_trip(broker: str, tool: Tool) -> None:
    create_topic(broker, "lines", partitions=2)
    lines = "h1:a,h2:b|k1:one\n|k2:two\n|k1:three\nh3:c|k3:four\n"
    produced = tool(
        "console-producer",
        "--bootstrap-server",
        broker,
        "--topic",
        "lines",
        "--property",
        "parse.key=true",
        "--property",
        "key.separator=:",
        "--property",
        "parse.headers=true",
        "--property",
        "headers.delimiter=|",
        "--producer-property",
        "acks=all",
        "--compression-codec",
        "gzip",
        "--batch-size",
        "2",
        stdin=lines,
    )
    assert produced.returncode == 0, produced.stderr
    assert "4 records sent to lines" in produced.stderr
    consumed = tool(
        "console-consumer",
        "--bootstrap-server",
        broker,
        "--topic",
        "lines",
        "--from-beginning",
        "--max-messages",
        "4",
        "--timeout-ms",
        "20000",
        "--property",
        "print.key=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.timestamp=true",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert "Processed a total of 4 messages" in consumed.stderr
    rows = [line.split("\t") for line in consumed.stdout.splitlines()]
    assert all(row[0].startswith("CreateTime:") and int(row[0].split(":")[1]) > 0 for row in rows)
    got = sorted((row[3], row[4], row[5]) for row in rows)
    assert got == [
        ("NO_HEADERS", "k1", "three"),
        ("NO_HEADERS", "k2", "two"),
        ("h1:a,h2:b", "k1", "one"),
        ("h3:c", "k3", "four"),
    ]
    # Same key, same partition (murmur2), in produce order.
    by_key = {(row[4], row[5]): (row[1], int(row[2].split(":")[1])) for row in rows}
    assert by_key[("k1", "one")][0] == by_key[("k1", "three")][0]
    assert by_key[("k1", "one")][1] < by_key[("k1", "three")][1]

    # One partition from an offset in the middle of a batch (three keyless lines are one batch), until no record
    # came for the timeout: exactly the records from that offset on.
    create_topic(broker, "plain")
    assert (
        tool(
            "console-producer", "--bootstrap-server", broker, "--topic", "plain", stdin="a\nb\nc\n"
        ).returncode
        == 0
    )
    one = tool(
        "console-consumer",
        "--bootstrap-server",
        broker,
        "--topic",
        "plain",
        "--partition",
        "0",
        "--offset",
        "1",
        "--timeout-ms",
        "1500",
    )
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == ["b", "c"]


def test_console_errors_exit_with_one_line(broker: str, tool: Tool, tool_here: Tool) -> None:
    create_topic(broker, "errs")
    # One error exit of each tool as an operator sees it (a process of its own), the others in this process.
    no_separator = tool(
        "console-producer",
        "--bootstrap-server",
        broker,
        "--topic",
        "errs",
        "--property",
        "parse.key=true",
        stdin="no tab here\n",
    )
    assert_one_line_error(no_separator, 1, "no key separator found on line number 1")
    unknown_property = tool_here(
        "console-producer",
        "--bootstrap-server",
        broker,
        "--topic",
        "errs",
        "--property",
        "parse.kee=true",
        stdin="",
    )
    assert_one_line_error(unknown_property, 2, "--property parse.kee: not supported")
    bad_acks = tool_here(
        "console-producer",
        "--bootstrap-server",
        broker,
        "--topic",
        "errs",
        "--producer-property",
        "acks=2",
        stdin="x",
    )
    assert_one_line_error(bad_acks, 2, "acks='2'")
    missing_topic = tool(
        "console-consumer", "--bootstrap-server", broker, "--topic", "nope", "--timeout-ms", "100"
    )
    assert_one_line_error(missing_topic, 1, "topic 'nope' does not exist")
    offset_alone = tool_here(
        "console-consumer", "--bootstrap-server", broker, "--topic", "errs", "--offset", "3"
    )
    assert_one_line_error(offset_alone, 2, "--partition")
    past_end = tool_here(
        "console-consumer",
        "--bootstrap-server",
        broker,
        "--topic",
        "errs",
        "--partition",
        "0",
        "--offset",
        "99",
    )
    assert_one_line_error(past_end, 1, "OFFSET_OUT_OF_RANGE")
    unreachable = tool_here(
        "console-consumer", "--bootstrap-server", "127.0.0.1:1", "--topic", "errs", "--timeout-ms", "100"
    )
    assert_one_line_error(unreachable, 1, "127.0.0.1:1")
