"""``pylog-broker topics``: Kafka's ``kafka-topics`` -- create, list, describe, alter (partitions), delete.

    pylog-broker topics --bootstrap-server H:P --create --topic T [--partitions N] [--replication-factor R]
                        [--config k=v ...] [--if-not-exists]
    pylog-broker topics --bootstrap-server H:P --list
    pylog-broker topics --bootstrap-server H:P --describe [--topic T]
    pylog-broker topics --bootstrap-server H:P --alter --topic T --partitions N
    pylog-broker topics --bootstrap-server H:P --delete --topic T [--if-exists]

Output as ``kafka-topics`` prints it: ``Created topic T.``; one name per line for ``--list``; for
``--describe`` a ``Topic: T  PartitionCount: N  ReplicationFactor: R  Configs: k=v,...`` line followed by one
``Topic: T  Partition: i  Leader: l  Replicas: a,b  Isr: a,b`` line per partition. Errors: one line, exit 1
(the broker's error code and message, e.g. ``UNKNOWN_TOPIC_OR_PARTITION``), exit 2 for bad arguments.
"""

from __future__ import annotations

import argparse
from typing import Any

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import describe_configs
from broker_runtime.tools.common import (
    EXIT_USAGE,
    ToolError,
    add_bootstrap,
    client_for,
    parse_pairs,
    run_tool,
)

__all__ = ["add_parser", "run"]

_DYNAMIC_TOPIC_CONFIG = 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics (as kafka-topics)")
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    for flag, text in (
        ("--create", "create a topic"),
        ("--list", "list the topics"),
        ("--describe", "describe topics"),
        ("--alter", "raise a topic's partition count"),
        ("--delete", "delete a topic"),
    ):
        action.add_argument(flag, action="store_true", help=text)
    p.add_argument("--topic", help="the topic")
    p.add_argument("--partitions", type=int, help="partition count (--create; the new total with --alter)")
    p.add_argument("--replication-factor", type=int, default=-1, help="replication factor (--create)")
    p.add_argument("--config", action="append", default=[], metavar="K=V", help="a topic config (--create)")
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error if the topic exists")
    p.add_argument(
        "--if-exists", action="store_true", help="--alter/--delete: no error if the topic is missing"
    )
    p.set_defaults(func=run)


def _need_topic(args: argparse.Namespace) -> str:
    if not args.topic:
        raise ToolError("--topic is required with --create, --alter and --delete", EXIT_USAGE)
    topic: str = args.topic
    return topic


def _describe(client: KafkaClient, topics: list[str] | None) -> int:
    md = client.metadata(topics)
    found = [t for t in md.topics.values() if topics is None or t.name in topics]
    for name in topics or []:
        entry = md.topics.get(name)
        if entry is None or entry.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise ToolError(f"UNKNOWN_TOPIC_OR_PARTITION: topic {name!r} does not exist")
    for t in sorted(found, key=lambda t: t.name):
        parts = sorted(t.partitions.values(), key=lambda p: p.partition)
        configs = client.admin.describe_config_entries(describe_configs.RESOURCE_TOPIC, t.name)
        overrides = ",".join(f"{c.name}={c.value}" for c in configs if c.source == _DYNAMIC_TOPIC_CONFIG)
        rf = len(parts[0].replicas) if parts else 0
        print(f"Topic: {t.name}\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {overrides}")
        for p in parts:
            print(
                f"\tTopic: {t.name}\tPartition: {p.partition}\tLeader: {p.leader}\t"
                f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
    return 0


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        configs: dict[str, str] = {}
        for text in args.config:
            configs.update(parse_pairs(text, "--config"))
        with client_for(args) as client:
            if args.list:
                for name in sorted(client.metadata(None).topics):
                    print(name)
                return 0
            if args.describe:
                return _describe(client, [args.topic] if args.topic else None)
            topic = _need_topic(args)
            if args.create:
                partitions = -1 if args.partitions is None else args.partitions
                codes = client.admin.create_topics(
                    {topic: (partitions, args.replication_factor)}, configs=configs
                )
                code = codes.get(topic, 0)
                if code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
                    return 0
                if code:
                    raise ToolError(f"{ErrorCode(code).name}: cannot create topic {topic!r}")
                print(f"Created topic {topic}.")
                return 0
            if args.alter:
                if args.partitions is None:
                    raise ToolError("--alter needs --partitions N (the new total)", EXIT_USAGE)
                error = client.admin.create_partitions({topic: args.partitions})[topic]
                if error is not None:
                    if error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
                        return 0
                    raise ToolError(str(error))
                print(f"Topic {topic} now has {args.partitions} partitions.")
                return 0
            error = client.admin.delete_topics([topic])[topic]
            if error is not None:
                if error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and args.if_exists:
                    return 0
                raise ToolError(str(error))
            print(f"Deleted topic {topic}.")
            return 0

    return run_tool("topics", body)
