"""``pylog-broker console-producer``: lines of stdin become records of a topic (Kafka's
``kafka-console-producer`` with its ``LineMessageReader`` properties).

Usage::

    pylog-broker console-producer --bootstrap-server HOST:PORT --topic T [--property parse.key=true
        --property key.separator=:] [--property parse.headers=true] [--producer-property acks=all]
        [--compression-codec gzip] [--batch-size N]

One line = one record, the trailing newline removed. With ``parse.headers=true`` a line starts with its headers
up to ``headers.delimiter`` (default TAB): ``h1:v1,h2:v2`` (``headers.separator`` ``,``, ``headers.key.separator``
``:``); with ``parse.key=true`` the key comes next, up to ``key.separator`` (default TAB); the rest is the value.
``null.marker`` (unset by default) makes a key, value or header value that equals it null. A line without the
key separator is refused (Kafka's "No key separator found"), unless ``ignore.error=true`` (then the whole line
is the value, as Kafka's reader does).

Partitioning is Kafka's default: murmur2 of the key modulo the partition count; records without a key go to one
partition per batch, the next partition for the next batch (Kafka's sticky partitioner, per batch). Lines are
sent in batches of ``--batch-size`` lines (default 200; one Produce request per leader per batch) and every
batch's answer is awaited before the next, so a failure stops the tool at once: ONE line names the partition and
Kafka's error, exit 1; the lines before it were written. ``acks`` (``--producer-property acks=all|-1|0|1``,
default ``all``; also ``--request-required-acks``), ``compression.type`` / ``--compression-codec`` (none, gzip,
snappy, lz4, zstd) and ``request.timeout.ms`` are the producer properties understood; any other is a usage error.
A summary line goes to stderr at the end.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import BinaryIO

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError, PylogError
from broker_runtime.protocol.compression import codec_from_name
from broker_runtime.protocol.murmur2 import partition_for_key
from broker_runtime.protocol.records import RecordBatchBuilder
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

__all__ = ["add_parser", "parse_line", "run"]

TOOL = "console-producer"
_READER_PROPERTIES = (
    "parse.key",
    "key.separator",
    "parse.headers",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
    "null.marker",
    "ignore.error",
)
_PRODUCER_PROPERTIES = ("acks", "compression.type", "request.timeout.ms")
_ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}

Headers = list[tuple[str, bytes | None]]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(TOOL, help="write lines of stdin to a topic (kafka-console-producer)")
    add_bootstrap(parser)
    parser.add_argument("--topic", required=True, help="the topic to write to")
    parser.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="line reader property (repeatable)",
    )
    parser.add_argument(
        "--producer-property", action="append", default=[], metavar="KEY=VALUE", help="producer property"
    )
    parser.add_argument("--compression-codec", default=None, help="none, gzip, snappy, lz4 or zstd")
    parser.add_argument("--request-required-acks", default=None, help="acks: all, -1, 0 or 1 (default all)")
    parser.add_argument("--batch-size", type=int, default=200, help="lines per batch (default 200)")
    parser.set_defaults(func=run)


class _Reader:
    """Kafka's ``LineMessageReader``: one line -> (key, value, headers)."""

    def __init__(self, props: dict[str, str]) -> None:
        self.parse_key = flag(props, "parse.key")
        self.parse_headers = flag(props, "parse.headers")
        self.ignore_error = flag(props, "ignore.error")
        self.key_separator = unescape(props.get("key.separator", "\t"))
        self.headers_delimiter = unescape(props.get("headers.delimiter", "\t"))
        self.headers_separator = unescape(props.get("headers.separator", ","))
        self.headers_key_separator = unescape(props.get("headers.key.separator", ":"))
        self.null_marker = props.get("null.marker")
        for name in ("key.separator", "headers.delimiter", "headers.separator", "headers.key.separator"):
            if name in props and not props[name]:
                raise ToolError(f"property {name}: must not be empty", EXIT_USAGE)

    def _bytes(self, text: str) -> bytes | None:
        return None if self.null_marker is not None and text == self.null_marker else text.encode()

    def parse(self, line: str, number: int) -> tuple[bytes | None, bytes | None, Headers]:
        headers: Headers = []
        rest = line
        if self.parse_headers:
            head, sep, tail = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"no headers delimiter found on line number {number}: {line!r}")
            else:
                rest = tail
                for item in head.split(self.headers_separator) if head else []:
                    name, ksep, value = item.partition(self.headers_key_separator)
                    if not ksep:
                        raise ToolError(f"header {item!r} on line number {number} has no key separator")
                    headers.append((name, self._bytes(value)))
        key: bytes | None = None
        if self.parse_key:
            head, sep, tail = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise ToolError(f"no key separator found on line number {number}: {line!r}")
            else:
                key, rest = self._bytes(head), tail
        return key, self._bytes(rest), headers


def parse_line(line: str, props: dict[str, str]) -> tuple[bytes | None, bytes | None, Headers]:
    """One line as the reader with ``props`` parses it (for tests and other tools)."""
    return _Reader(props).parse(line, 1)


def _lines(stream: BinaryIO) -> Iterator[str]:
    for raw in stream:
        yield raw.decode("utf-8", errors="surrogateescape").rstrip("\n").rstrip("\r")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args, sys.stdin.buffer)
    except ToolError as exc:
        return fail(TOOL, str(exc), exc.status)
    except (PylogError, OSError) as exc:
        return fail(TOOL, str(exc))


def _run(args: argparse.Namespace, stream: BinaryIO) -> int:
    reader = _Reader(parse_properties(args.property, "--property", _READER_PROPERTIES))
    producer = parse_properties(args.producer_property, "--producer-property", _PRODUCER_PROPERTIES)
    acks_text = args.request_required_acks or producer.get("acks", "all")
    if acks_text.strip().lower() not in _ACKS:
        raise ToolError(f"acks={acks_text!r}: expected all, -1, 0 or 1", EXIT_USAGE)
    acks = _ACKS[acks_text.strip().lower()]
    codec_text = args.compression_codec or producer.get("compression.type", "none")
    try:
        codec = codec_from_name(codec_text.strip().lower())
    except PylogError:
        raise ToolError(
            f"compression codec {codec_text!r}: expected none, gzip, snappy, lz4 or zstd", EXIT_USAGE
        ) from None
    try:
        timeout_ms = int(producer.get("request.timeout.ms", "30000"))
    except ValueError:
        raise ToolError("request.timeout.ms: expected an integer", EXIT_USAGE) from None
    if args.batch_size < 1:
        raise ToolError(f"--batch-size {args.batch_size}: must be at least 1", EXIT_USAGE)
    with client_for(args, "console-producer") as client:
        # As Kafka's producer: the Metadata request may auto-create the topic (auto.create.topics.enable).
        count = len(client.partitions_for(args.topic, allow_auto_create=True, timeout_ms=10000))
        sticky = 0
        sent = 0
        chunk: list[tuple[bytes | None, bytes | None, Headers]] = []
        for number, line in enumerate(_lines(stream), start=1):
            chunk.append(reader.parse(line, number))
            if len(chunk) >= args.batch_size:
                sent += _send(client, args.topic, count, sticky, chunk, codec, acks, timeout_ms)
                sticky = (sticky + 1) % count
                chunk = []
        if chunk:
            sent += _send(client, args.topic, count, sticky, chunk, codec, acks, timeout_ms)
    print(f"{sent} records sent to {args.topic}", file=sys.stderr)
    return 0


def _send(
    client: KafkaClient,
    topic: str,
    count: int,
    sticky: int,
    chunk: list[tuple[bytes | None, bytes | None, Headers]],
    codec: int,
    acks: int,
    timeout_ms: int,
) -> int:
    now = int(time.time() * 1000)
    builders: dict[int, RecordBatchBuilder] = {}
    for key, value, headers in chunk:
        partition = sticky if key is None else partition_for_key(key, count)
        builder = builders.get(partition)
        if builder is None:
            builder = builders[partition] = RecordBatchBuilder(codec)
        builder.append(now, key, value, headers)
    by_leader: dict[int, dict[tuple[str, int], bytes]] = {}
    for partition, builder in builders.items():
        by_leader.setdefault(client.leader_for(topic, partition), {})[(topic, partition)] = builder.build()
    for node, batches in by_leader.items():
        results = client.produce(node, batches, acks=acks, timeout_ms=timeout_ms)
        for (t, p), result in sorted((results or {}).items()):
            if result.error:
                raise KafkaError(result.error, f"produce to {t}-{p} failed ({ErrorCode(result.error).name})")
    return len(chunk)
