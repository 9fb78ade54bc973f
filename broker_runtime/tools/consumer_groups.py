"""``pylog-broker consumer-groups``: list, describe (with lag), reset the offsets of and delete consumer groups
(Kafka's ``kafka-consumer-groups``), through the groups' coordinators on any Kafka-protocol broker.

Usage::

    pylog-broker consumer-groups --bootstrap-server HOST:PORT --list
    pylog-broker consumer-groups --bootstrap-server HOST:PORT --describe --group G
    pylog-broker consumer-groups --bootstrap-server HOST:PORT --reset-offsets --group G
        (--topic T[:P,P..] | --all-topics) (--to-earliest | --to-latest | --to-offset N | --to-datetime WHEN)
        (--dry-run | --execute)
    pylog-broker consumer-groups --bootstrap-server HOST:PORT --delete --group G [--group G2 ...]

``--describe`` prints one row per partition the group committed or is assigned: ``CURRENT-OFFSET`` (the
committed offset, ``-`` if none), ``LOG-END-OFFSET`` (the partition's end, ListOffsets latest), ``LAG`` (end
minus committed; ``-`` without a commit) and the member holding it (its assignment decoded from the consumer
protocol), as Kafka's table; a group without members says so first.

``--reset-offsets`` computes the new offset per partition (``--to-datetime``: the first offset whose timestamp is
at or after WHEN, an ISO-8601 time, local time unless it names a zone, the end when there is none;
``--to-offset``: clamped into [log start, end] with one warning line per clamped partition, as Kafka) and prints
``GROUP TOPIC PARTITION NEW-OFFSET``; ``--execute`` commits them (an admin commit: only while the group has no
active members, else exit 1 naming its state), ``--dry-run`` only prints; with neither, a warning line says
nothing was done (Kafka's default dry run). ``--delete`` deletes groups without members and their offsets.
Errors: one line on stderr; exit 1 (a broker refusal, e.g. NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND) or 2 (usage).
"""

from __future__ import annotations

import argparse
import struct
import sys
from datetime import datetime
from typing import Any

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode, KafkaError, PylogError
from broker_runtime.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from broker_runtime.tools.common import EXIT_USAGE, ToolError, add_bootstrap, client_for, fail

__all__ = ["add_parser", "decode_assignment", "run"]

TOOL = "consumer-groups"
_INACTIVE = ("Empty", "Dead")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        TOOL, help="list, describe, reset or delete consumer groups (kafka-consumer-groups)"
    )
    add_bootstrap(parser)
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list every group")
    action.add_argument("--describe", action="store_true", help="offsets, lag and members of --group")
    action.add_argument("--reset-offsets", action="store_true", help="reset the committed offsets of --group")
    action.add_argument("--delete", action="store_true", help="delete --group (no members allowed)")
    parser.add_argument("--group", action="append", default=[], help="the group (repeatable for --delete)")
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", default=[], help="T or T:P,P (--reset-offsets)")
    scope.add_argument("--all-topics", action="store_true", help="every topic the group committed")
    to = parser.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, default=None)
    to.add_argument("--to-datetime", default=None, help="YYYY-MM-DDTHH:mm:SS[.sss][zone]")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    mode.add_argument("--dry-run", action="store_true", help="only print the new offsets")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        with client_for(args, "consumer-groups") as client:
            if args.list:
                for group in client.groups.list_groups():
                    print(group["GroupId"])
                return 0
            if not args.group:
                raise ToolError(
                    "--group is required with --describe, --reset-offsets and --delete", EXIT_USAGE
                )
            if args.delete:
                return _delete(client, args.group)
            if len(args.group) > 1:
                raise ToolError("give one --group (several are only for --delete)", EXIT_USAGE)
            if args.describe:
                return _describe(client, args.group[0])
            return _reset(client, args)
    except ToolError as exc:
        return fail(TOOL, str(exc), exc.status)
    except (PylogError, OSError) as exc:
        return fail(TOOL, str(exc))


def decode_assignment(data: bytes | None) -> list[tuple[str, int]]:
    """The partitions of a consumer-protocol assignment (Kafka's ``ConsumerProtocolAssignment``, v0-3:
    int16 version, [topic string, [int32 partition]], user data); empty for other protocols or no data."""
    if not data or len(data) < 2:
        return []
    out: list[tuple[str, int]] = []
    try:
        pos = 2
        (topics,) = _I32.unpack_from(data, pos)
        pos += 4
        for _ in range(max(topics, 0)):
            (length,) = _I16.unpack_from(data, pos)
            pos += 2
            topic = bytes(data[pos : pos + length]).decode()
            pos += length
            (count,) = _I32.unpack_from(data, pos)
            pos += 4
            for _ in range(max(count, 0)):
                out.append((topic, _I32.unpack_from(data, pos)[0]))
                pos += 4
    except (struct.error, UnicodeDecodeError):
        return []
    return out


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        " ".join(cell.ljust(widths[i] + 1) for i, cell in enumerate(row)).rstrip() for row in rows
    )


def _described(client: KafkaClient, group: str) -> dict[str, Any] | None:
    """DescribeGroups of ``group``; None when it does not exist (Dead, or GROUP_ID_NOT_FOUND as Kafka 4 answers)."""
    try:
        described = client.groups.describe_group(group)
    except KafkaError as exc:
        if exc.code == ErrorCode.GROUP_ID_NOT_FOUND:
            return None
        raise
    return None if described["GroupState"] == "Dead" else described


def _describe(client: KafkaClient, group: str) -> int:
    described = _described(client, group)
    if described is None:
        raise ToolError(f"consumer group {group!r} does not exist")
    committed = client.groups.committed_offsets(group)
    owners: dict[tuple[str, int], tuple[str, str, str]] = {}
    for member in described["Members"]:
        for tp in decode_assignment(member["MemberAssignment"]):
            # An empty field (a broker that does not record the client's host) prints as "-".
            owners[tp] = (member["MemberId"] or "-", member["ClientHost"] or "-", member["ClientId"] or "-")
    partitions = sorted(set(committed) | set(owners))
    ends = client.list_offsets({tp: LATEST_TIMESTAMP for tp in partitions}) if partitions else {}
    print()
    if not described["Members"]:
        print(f"Consumer group '{group}' has no active members.")
        print()
    rows = [
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
    ]
    for tp in partitions:
        end = ends[tp][0]
        current = committed.get(tp)
        member, host, client_id = owners.get(tp, ("-", "-", "-"))
        rows.append(
            [
                group,
                tp[0],
                str(tp[1]),
                "-" if current is None else str(current),
                str(end),
                "-" if current is None else str(max(end - current, 0)),
                member,
                host,
                client_id,
            ]
        )
    print(_table(rows))
    return 0


def _scope(client: KafkaClient, args: argparse.Namespace, group: str) -> list[tuple[str, int]]:
    if args.all_topics:
        found = sorted(client.groups.committed_offsets(group))
        if not found:
            raise ToolError(f"group {group!r} has no committed offsets; name the partitions with --topic")
        return found
    if not args.topic:
        raise ToolError("--reset-offsets needs --topic or --all-topics", EXIT_USAGE)
    out: list[tuple[str, int]] = []
    for item in args.topic:
        name, _, parts = item.partition(":")
        if parts:
            try:
                out += [(name, int(p)) for p in parts.split(",")]
            except ValueError:
                raise ToolError(f"--topic {item!r}: expected TOPIC or TOPIC:P,P,...", EXIT_USAGE) from None
        else:
            out += [(name, p) for p in client.partitions_for(name, timeout_ms=5000)]
    return sorted(set(out))


def _target(
    client: KafkaClient, args: argparse.Namespace, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    if args.to_earliest:
        return {tp: o for tp, (o, _) in client.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps}).items()}
    latest = {tp: o for tp, (o, _) in client.list_offsets({tp: LATEST_TIMESTAMP for tp in tps}).items()}
    if args.to_latest:
        return latest
    if args.to_offset is not None:
        earliest = {
            tp: o for tp, (o, _) in client.list_offsets({tp: EARLIEST_TIMESTAMP for tp in tps}).items()
        }
        out: dict[tuple[str, int], int] = {}
        for tp in tps:
            wanted = args.to_offset
            value = min(max(wanted, earliest[tp]), latest[tp])
            if value != wanted:
                side = "lower than earliest" if wanted < earliest[tp] else "higher than latest"
                print(
                    f"pylog-broker {TOOL}: warning: new offset ({wanted}) is {side} offset of {tp[0]}-{tp[1]}; "
                    f"it is set to {value}",
                    file=sys.stderr,
                )
            out[tp] = value
        return out
    if args.to_datetime is not None:
        try:
            when = datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise ToolError(
                f"--to-datetime {args.to_datetime!r}: expected YYYY-MM-DDTHH:mm:SS[.sss][zone]", EXIT_USAGE
            ) from None
        stamp = (
            int(when.astimezone().timestamp() * 1000) if when.tzinfo is None else int(when.timestamp() * 1000)
        )
        found = client.list_offsets({tp: stamp for tp in tps})
        return {tp: (found[tp][0] if found[tp][0] >= 0 else latest[tp]) for tp in tps}
    raise ToolError(
        "--reset-offsets needs one of --to-earliest, --to-latest, --to-offset, --to-datetime", EXIT_USAGE
    )


def _reset(client: KafkaClient, args: argparse.Namespace) -> int:
    group = args.group[0]
    tps = _scope(client, args, group)
    targets = _target(client, args, tps)
    described = _described(client, group)
    state = "Dead" if described is None else described["GroupState"]
    if args.execute and state not in _INACTIVE:
        raise ToolError(
            f"assignments can only be reset if the group '{group}' is inactive, but the current state is {state}"
        )
    if not args.execute and not args.dry_run:
        print(
            f"pylog-broker {TOOL}: warning: no action is performed without --execute (a dry run follows)",
            file=sys.stderr,
        )
    if args.execute:
        client.groups.commit_offsets(group, targets)
    rows = [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]]
    rows += [[group, t, str(p), str(targets[(t, p)])] for t, p in tps]
    print()
    print(_table(rows))
    return 0


def _delete(client: KafkaClient, groups: list[str]) -> int:
    failed: list[str] = []
    for group in groups:
        try:
            client.groups.delete_group(group)
        except KafkaError as exc:
            if isinstance(exc.code, ErrorCode):
                failed.append(f"* Group '{group}' could not be deleted due to: {exc.code.name}")
            else:
                failed.append(f"* Group '{group}' could not be deleted due to: {exc}")
    if failed:
        print("Error: Deletion of some consumer groups failed:\n" + "\n".join(failed), file=sys.stderr)
        return 1
    names = ", ".join(f"'{g}'" for g in groups)
    print(f"Deletion of requested consumer groups ({names}) was successful.")
    return 0
