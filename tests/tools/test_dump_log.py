"""dump-log on segments written by librdkafka (confluent-kafka): the records it prints are the records produced,
the indexes verify, and damage (a flipped byte, a torn tail, a wrong index entry) is reported with exit 1."""

from __future__ import annotations

import re
import shutil
import struct
from pathlib import Path

import pytest
from confluent_kafka import Producer

from broker_runtime.launch import create_topic
from tests.support.tools import Tool, assert_one_line_error

pytestmark = pytest.mark.timeout(120)

RECORD_LINE = re.compile(
    r"^\| offset: (\d+) CreateTime: (\d+) keySize: (-?\d+) valueSize: (-?\d+) sequence: (-?\d+) "
    r"headerKeys: \[(.*)\] key: (.*) payload: (.*)$"
)


@pytest.fixture(scope="module")
def produced(broker: str, log_dir: Path) -> tuple[Path, list[tuple[int, str, str, str]]]:
    """200 records in many lz4 batches, idempotent, as librdkafka writes them: (timestamp, key, value, header keys)."""
    create_topic(broker, "dumped")
    producer = Producer(
        {
            "bootstrap.servers": broker,
            "compression.type": "lz4",
            "enable.idempotence": True,
            "linger.ms": 0,
            "batch.num.messages": 17,
        }
    )
    sent: list[tuple[int, str, str, str]] = []
    for i in range(200):
        key, value = f"key-{i % 7}", f"value {i} " + "x" * (i % 50)
        headers = [("h", b"1")] if i % 3 == 0 else None
        ts = 1_700_000_000_000 + i
        producer.produce("dumped", value=value.encode(), key=key.encode(), headers=headers, timestamp=ts)
        sent.append((ts, key, value, "h" if headers else ""))
        if i % 17 == 16:
            producer.flush(10)
    assert producer.flush(30) == 0
    return log_dir / "dumped-0", sent


def test_records_printed_equal_the_records_produced(
    produced: tuple[Path, list[tuple[int, str, str, str]]], tool: Tool
) -> None:
    partition, sent = produced
    segment = partition / "00000000000000000000.log"
    done = tool("dump-log", "--files", str(segment), "--print-data-log")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 0"]
    records = [RECORD_LINE.match(line) for line in lines if line.startswith("| ")]
    assert all(records), [line for line in lines if line.startswith("| ") and not RECORD_LINE.match(line)][:3]
    got = [(int(m[2]), m[7], m[8], m[6]) for m in records if m is not None]
    assert got == sent
    assert [int(m[1]) for m in records if m is not None] == list(range(200))
    assert [int(m[5]) for m in records if m is not None] == list(range(200))  # idempotent sequences
    batches = [line for line in lines if line.startswith("baseOffset: ")]
    assert len(batches) > 5
    assert all("isvalid: true" in b and "producerId: -1" not in b for b in batches)
    # librdkafka sends a batch uncompressed when lz4 does not make it smaller.
    assert any("compresscodec: lz4" in b for b in batches)
    assert lines[-1].startswith(f"Summary: {len(batches)} batches, 200 records, offsets 0-199, ")

    shallow = tool("dump-log", "--files", str(segment))
    assert shallow.returncode == 0 and not any(line.startswith("| ") for line in shallow.stdout.splitlines())


def test_indexes_verify_and_sanity_check(
    produced: tuple[Path, list[tuple[int, str, str, str]]], tool: Tool
) -> None:
    partition, _ = produced
    index, time_index = partition / "00000000000000000000.index", partition / "00000000000000000000.timeindex"
    listed = tool("dump-log", "--files", f"{index},{time_index}")
    assert listed.returncode == 0, listed.stderr
    entries = [line for line in listed.stdout.splitlines() if line.startswith("offset: ")]
    assert len(entries) >= 2  # log.index.interval.bytes=256
    verified = tool("dump-log", "--files", f"{index},{time_index}", "--verify-index-only")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.count(", verified") == 2
    sane = tool("dump-log", "--files", f"{index},{time_index}", "--index-sanity-check")
    assert sane.returncode == 0 and sane.stdout.count("passed sanity check.") == 2


def test_damage_is_reported(
    produced: tuple[Path, list[tuple[int, str, str, str]]], tool: Tool, tmp_path: Path
) -> None:
    partition, _ = produced
    damaged = tmp_path / "00000000000000000000.log"
    shutil.copy(partition / "00000000000000000000.log", damaged)
    data = bytearray(damaged.read_bytes())
    data[100] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    damaged.write_bytes(bytes(data) + b"\x00\x00\x00\x00\x00\x00\x00\x07\x00\x00")  # and a torn tail
    done = tool("dump-log", "--files", str(damaged), "--deep-iteration")
    assert done.returncode == 1
    assert "isvalid: false" in done.stdout.splitlines()[2]
    assert f"Found 10 invalid bytes at the end of {damaged.name}" in done.stdout
    assert ", 1 with a bad CRC, 10 trailing invalid bytes" in done.stdout

    index = tmp_path / "00000000000000000000.index"
    shutil.copy(partition / "00000000000000000000.index", index)
    raw = bytearray(index.read_bytes())
    relative, position = struct.unpack_from(">ii", raw, 8)  # the second entry
    struct.pack_into(">ii", raw, 8, relative + 1, position)
    index.write_bytes(bytes(raw))
    shutil.copy(partition / "00000000000000000000.log", damaged)
    bad = tool("dump-log", "--files", str(index), "--verify-index-only")
    assert bad.returncode == 1
    assert f"Mismatches in :{index}" in bad.stdout
    assert f"Index offset: {relative + 1}, log offset: {relative}" in bad.stdout

    assert_one_line_error(
        tool("dump-log", "--files", str(tmp_path / "missing.log")), 1, "missing.log: no such file"
    )
    other = tmp_path / "notes.txt"
    other.write_text("x")
    assert_one_line_error(
        tool("dump-log", "--files", str(other)),
        1,
        "not a .log, .index, .timeindex, .txnindex or .snapshot file",
    )
