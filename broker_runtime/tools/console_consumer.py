"""``pylog-broker console-consumer``: records of a topic to stdout (Kafka's ``kafka-console-consumer`` with its
``DefaultMessageFormatter`` properties), without a consumer group.

Usage::

    pylog-broker console-consumer --bootstrap-server HOST:PORT --topic T [--from-beginning]
        [--partition P [--offset earliest|latest|N]] [--max-messages N] [--timeout-ms MS]
        [--property print.key=true] [--property print.timestamp=true] [--isolation-level read_committed]

Where it starts: every partition at its end (Kafka's default, no group), or at its log start offset with
``--from-beginning``; with ``--partition`` only that partition, at ``--offset`` (``earliest``, ``latest`` or an
offset; ``--offset`` needs ``--partition``, as Kafka's tool says). It stops after ``--max-messages`` records,
or when no record arrived for ``--timeout-ms`` (default: never), and prints ``Processed a total of N messages``
to stderr. A position below the log start offset or past the end is an error (OFFSET_OUT_OF_RANGE, exit 1):
this tool does not reset positions quietly.

One line per record, fields in the formatter's order, each followed by TAB: ``CreateTime:ms`` (or
``LogAppendTime:ms``, ``print.timestamp``), ``Partition:p`` (``print.partition``), ``Offset:o``
(``print.offset``), headers as ``k:v,k:v`` or ``NO_HEADERS`` (``print.headers``; ``headers.separator``,
``headers.key.separator``), the key then ``key.separator`` (``print.key``); then the value and
``line.separator`` (default newline). ``print.value=false`` leaves the value out; a null key or value prints
``null.literal`` (default ``null``). Control batches (transaction markers) are never printed; with
``--isolation-level read_committed`` the records of aborted transactions are dropped (the Fetch answer's aborted
transactions list, as Kafka's consumer does) and reading stops at the last stable offset.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError, PylogError
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, IsolationLevel
from broker_runtime.protocol.records import CONTROL_ABORT, Record, RecordBatch, read_batches
from broker_runtime.tools.common import (
    EXIT_USAGE,
    ToolError,
    add_bootstrap,
    client_for,
    fail,
    flag,
    parse_properties,
    unescape,
)

__all__ = ["add_parser", "run"]

TOOL = "console-consumer"
_FORMATTER_PROPERTIES = (
    "print.timestamp",
    "print.partition",
    "print.offset",
    "print.headers",
    "print.key",
    "print.value",
    "key.separator",
    "line.separator",
    "headers.separator",
    "headers.key.separator",
    "null.literal",
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(TOOL, help="print the records of a topic (kafka-console-consumer)")
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, help="the topic to read")
    parser.add_argument("--partition", type=int, default=None, help="read only this partition")
    parser.add_argument("--offset", default=None, help="earliest, latest or an offset (needs --partition)")
    parser.add_argument("--from-beginning", action="store_true", help="start at the log start offsets")
    parser.add_argument("--max-messages", type=int, default=None, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=int, default=None, help="stop when no record came for this long")
    parser.add_argument(
        "--isolation-level", default="read_uncommitted", choices=["read_uncommitted", "read_committed"]
    )
    parser.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE", help="formatter property (repeatable)"
    )
    parser.set_defaults(func=run)


class _Formatter:
    """Kafka's ``DefaultMessageFormatter``."""

    def __init__(self, items: list[str]) -> None:
        props = parse_properties(items, "--property", _FORMATTER_PROPERTIES)
        self.timestamp = flag(props, "print.timestamp")
        self.partition = flag(props, "print.partition")
        self.offset = flag(props, "print.offset")
        self.headers = flag(props, "print.headers")
        self.key = flag(props, "print.key")
        self.value = flag(props, "print.value", default=True)
        self.key_separator = unescape(props.get("key.separator", "\t"))
        self.line_separator = unescape(props.get("line.separator", "\n"))
        self.headers_separator = unescape(props.get("headers.separator", ","))
        self.headers_key_separator = unescape(props.get("headers.key.separator", ":"))
        self.null = props.get("null.literal", "null")

    def _text(self, data: bytes | None) -> str:
        return self.null if data is None else data.decode("utf-8", errors="replace")

    def format(self, partition: int, batch: RecordBatch, record: Record) -> str:
        out: list[str] = []
        if self.timestamp:
            kind = "LogAppendTime" if batch.timestamp_type == 1 else "CreateTime"
            out.append(f"{kind}:{record.timestamp}\t")
        if self.partition:
            out.append(f"Partition:{partition}\t")
        if self.offset:
            out.append(f"Offset:{record.offset}\t")
        if self.headers:
            if record.headers:
                out.append(
                    self.headers_separator.join(
                        f"{k}{self.headers_key_separator}{self._text(v)}" for k, v in record.headers
                    )
                )
            else:
                out.append("NO_HEADERS")
            out.append("\t")
        if self.key:
            out.append(self._text(record.key) + self.key_separator)
        if self.value:
            out.append(self._text(record.value))
        out.append(self.line_separator)
        return "".join(out)


def run(args: argparse.Namespace) -> int:
    try:
        count = _run(args, sys.stdout)
    except ToolError as exc:
        return fail(TOOL, str(exc), exc.status)
    except (PylogError, OSError) as exc:
        return fail(TOOL, str(exc))
    except KeyboardInterrupt:
        return 0
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _start_offsets(client: KafkaClient, args: argparse.Namespace, partitions: list[int]) -> dict[int, int]:
    if args.offset is not None and args.partition is None:
        raise ToolError("the partition is required when --offset is given (add --partition)", EXIT_USAGE)
    if args.partition is not None:
        if args.partition not in partitions:
            raise ToolError(
                f"topic {args.topic!r} has no partition {args.partition} (partitions {partitions})"
            )
        partitions = [args.partition]
    text = (args.offset or ("earliest" if args.from_beginning else "latest")).strip().lower()
    if text in ("earliest", "latest"):
        stamp = EARLIEST_TIMESTAMP if text == "earliest" else LATEST_TIMESTAMP
        found = client.list_offsets({(args.topic, p): stamp for p in partitions})
        return {p: found[(args.topic, p)][0] for p in partitions}
    try:
        offset = int(text)
    except ValueError:
        raise ToolError(
            f"--offset {args.offset!r}: expected earliest, latest or a non-negative offset", EXIT_USAGE
        ) from None
    if offset < 0:
        raise ToolError(f"--offset {offset}: expected earliest, latest or a non-negative offset", EXIT_USAGE)
    return {p: offset for p in partitions}


def _run(args: argparse.Namespace, out: TextIO) -> int:
    formatter = _Formatter(args.property)
    if args.max_messages is not None and args.max_messages < 1:
        raise ToolError(f"--max-messages {args.max_messages}: must be at least 1", EXIT_USAGE)
    committed = args.isolation_level == "read_committed"
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    with client_for(args, "console-consumer") as client:
        topic = client.metadata([args.topic]).topics.get(args.topic)
        if topic is None or topic.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ToolError(f"topic {args.topic!r} does not exist")
        if topic.error:
            raise KafkaError(topic.error, f"metadata of topic {args.topic!r}")
        positions = _start_offsets(client, args, sorted(topic.partitions))
        count = 0
        last_record = time.monotonic()
        #: read_committed: producer ids whose current transaction is aborted, per partition.
        aborting: dict[int, set[int]] = {p: set() for p in positions}
        while True:
            wait_ms = 500 if args.timeout_ms is None else max(0, min(500, args.timeout_ms))
            answers = client.fetch(
                {(args.topic, p): o for p, o in positions.items()},
                max_wait_ms=wait_ms,
                isolation_level=isolation,
            )
            got = False
            for (_, partition), result in sorted(answers.items()):
                if result.error:
                    raise KafkaError(
                        result.error, f"fetch {args.topic}-{partition} at offset {positions[partition]}"
                    )
                aborted = sorted(result.aborted_transactions or [], key=lambda a: a[1])
                for batch in read_batches(result.records or b"", allow_partial_tail=True):
                    start = positions[partition]
                    if batch.next_offset <= start:
                        continue
                    positions[partition] = batch.next_offset
                    ids = aborting[partition]
                    while aborted and aborted[0][1] <= batch.last_offset:
                        ids.add(aborted.pop(0)[0])
                    if batch.is_control:
                        if batch.control_record()[0] == CONTROL_ABORT:
                            ids.discard(batch.producer_id)
                        continue
                    if committed and batch.is_transactional and batch.producer_id in ids:
                        continue
                    for record in batch:
                        if record.offset < start:
                            continue
                        out.write(formatter.format(partition, batch, record))
                        count += 1
                        got = True
                        if args.max_messages is not None and count >= args.max_messages:
                            out.flush()
                            return count
            out.flush()
            if got:
                last_record = time.monotonic()
            elif args.timeout_ms is not None and (time.monotonic() - last_record) * 1000 >= args.timeout_ms:
                return count
