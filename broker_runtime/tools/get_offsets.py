"""``pylog-broker get-offsets``: Kafka's ``kafka-get-offsets`` -- offsets of partitions at a time.

    pylog-broker get-offsets --bootstrap-server H:P [--topic T] [--partitions 0,1] [--time -1|-2|-3|TS]

``--time``: -1 latest (the default), -2 earliest, -3 the offset of the largest timestamp, or a timestamp in
ms (the first offset whose timestamp is at or after it). Prints ``topic:partition:offset`` per partition, as
Kafka's tool does (a partition with no such offset prints an empty offset). Without ``--topic`` every topic.
Errors: unknown topic or partition -> one line, exit 1; bad ``--time``/``--partitions`` -> exit 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.tools.common import EXIT_USAGE, ToolError, add_bootstrap, client_for, run_tool

__all__ = ["add_parser", "run"]

_SPECIAL = {"latest": -1, "earliest": -2, "max-timestamp": -3}


def add_parser(sub: Any) -> None:
    p = sub.add_parser("get-offsets", help="offsets of partitions at a time (as kafka-get-offsets)")
    add_bootstrap(p)
    p.add_argument("--topic", help="the topic (default: every topic)")
    p.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    p.add_argument("--time", default="-1", help="-1 latest, -2 earliest, -3 max timestamp, or a time in ms")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        text = str(args.time).strip().lower()
        try:
            when = _SPECIAL[text] if text in _SPECIAL else int(text)
        except ValueError:
            raise ToolError(
                f"--time {args.time!r}: expected -1, -2, -3, latest, earliest or a time in ms", EXIT_USAGE
            ) from None
        if when < -3:
            raise ToolError(f"--time {when}: expected -1, -2, -3 or a time in ms", EXIT_USAGE)
        wanted: set[int] | None = None
        if args.partitions:
            try:
                wanted = {int(p) for p in args.partitions.split(",") if p.strip()}
            except ValueError:
                raise ToolError(
                    f"--partitions {args.partitions!r}: expected comma-separated integers", EXIT_USAGE
                ) from None
        with client_for(args) as client:
            md = client.metadata([args.topic] if args.topic else None)
            tps: list[tuple[str, int]] = []
            for name, topic in sorted(md.topics.items()):
                if args.topic and name != args.topic:
                    continue
                if topic.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION or not topic.partitions:
                    raise ToolError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {name!r} does not exist")
                tps += [(name, p) for p in sorted(topic.partitions) if wanted is None or p in wanted]
            if args.topic and args.topic not in md.topics:
                raise ToolError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {args.topic!r} does not exist")
            if wanted is not None:
                missing = sorted(wanted - {p for _, p in tps})
                if missing:
                    raise ToolError(
                        f"UNKNOWN_TOPIC_OR_PARTITION: no partition(s) {missing} in topic {args.topic!r}"
                    )
            offsets = client.list_offsets(dict.fromkeys(tps, when)) if tps else {}
        for topic_name, partition in tps:
            offset = offsets[(topic_name, partition)][0]
            print(f"{topic_name}:{partition}:{offset if offset >= 0 else ''}")
        return 0

    return run_tool("get-offsets", body)
