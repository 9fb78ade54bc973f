"""``pylog-broker delete-records``: Kafka's ``kafka-delete-records`` -- move log start offsets.

    pylog-broker delete-records --bootstrap-server H:P --offset-json-file FILE

The file is Kafka's format: ``{"version": 1, "partitions": [{"topic": "t", "partition": 0, "offset": 5}, ...]}``
(``offset`` -1 = the high watermark). Progress goes to stderr (``Executing records delete operation``), then
one line per partition to stdout as Kafka prints it: ``partition: t-0  low_watermark: 5`` or
``partition: t-0  error: CODE ...``; a summary line on stderr. Exit 0 when every partition succeeded, 1 when
any failed, 2 for a missing or malformed file (one line saying what is wrong).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from broker_runtime.tools.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    ToolError,
    add_bootstrap,
    client_for,
    run_tool,
)

__all__ = ["add_parser", "parse_offsets", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("delete-records", help="delete records below offsets (as kafka-delete-records)")
    add_bootstrap(p)
    p.add_argument(
        "--offset-json-file", required=True, help='{"partitions": [{"topic", "partition", "offset"}]}'
    )
    p.set_defaults(func=run)


def parse_offsets(path: str) -> dict[tuple[str, int], int]:
    """The partitions and offsets of a kafka-delete-records JSON file; ToolError (exit 2) when malformed."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ToolError(f"cannot read --offset-json-file {path}: {exc.strerror}", EXIT_USAGE) from None
    except json.JSONDecodeError as exc:
        raise ToolError(f"--offset-json-file {path} is not JSON: {exc}", EXIT_USAGE) from None
    parts = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(parts, list) or not parts:
        raise ToolError(
            f'--offset-json-file {path}: expected {{"partitions": [...]}} with at least one entry', EXIT_USAGE
        )
    out: dict[tuple[str, int], int] = {}
    for i, entry in enumerate(parts):
        ok = (
            isinstance(entry, dict)
            and isinstance(entry.get("topic"), str)
            and isinstance(entry.get("partition"), int)
            and isinstance(entry.get("offset"), int)
        )
        if not ok:
            raise ToolError(
                f"--offset-json-file {path}: partitions[{i}] needs a string topic and integer partition and offset",
                EXIT_USAGE,
            )
        key = (entry["topic"], entry["partition"])
        if key in out:
            raise ToolError(f"--offset-json-file {path}: {key[0]}-{key[1]} is listed twice", EXIT_USAGE)
        out[key] = entry["offset"]
    return out


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        offsets = parse_offsets(args.offset_json_file)
        print(f"Executing records delete operation for {len(offsets)} partition(s)", file=sys.stderr)
        with client_for(args) as client:
            results = client.admin.delete_records(offsets)
        failed = 0
        print("Records delete operation completed:")
        for (topic, partition), outcome in sorted(results.items()):
            if isinstance(outcome, int):
                print(f"partition: {topic}-{partition}\tlow_watermark: {outcome}")
            else:
                failed += 1
                print(f"partition: {topic}-{partition}\terror: {outcome}")
        print(f"{len(results) - failed} partition(s) done, {failed} failed", file=sys.stderr)
        return EXIT_FAILED if failed else 0

    return run_tool("delete-records", body)
