"""``pylog-broker configs``: Kafka's ``kafka-configs`` for topics and brokers -- describe and alter (users'
SCRAM credentials: :mod:`broker_runtime.tools.user_configs`; users' and clients' quotas:
:mod:`broker_runtime.tools.quota_configs`).

    pylog-broker configs --bootstrap-server H:P --entity-type topics|brokers (--entity-name N | --entity-default)
                         --describe [--all]
    pylog-broker configs --bootstrap-server H:P --entity-type topics|brokers (--entity-name N | --entity-default)
                         --alter [--add-config k=v,k2=v2] [--delete-config k,k2]

``--describe`` prints, as ``kafka-configs`` does, ``Dynamic configs for topic T are:`` (or ``All configs for
...`` with ``--all``) then one ``  key=value sensitive=false synonyms={SOURCE:key=value, ...}`` line per config
(the synonyms the broker answered, highest first; ``{}`` when it answered none).
A sensitive config (a password, a JAAS entry, a key: the broker never sends its value) prints as Kafka's tool
prints it: ``  key=null sensitive=true synonyms={SOURCE:key=null}``.
``--alter`` sends one IncrementalAlterConfigs (SET for each added key, DELETE for each deleted one) and prints
``Completed updating config for topic T.``. ``--entity-default`` with brokers names the cluster-wide defaults.
Errors: one line, exit 1 (the broker's code and message), exit 2 for bad arguments.
"""

from __future__ import annotations

import argparse
from typing import Any

from broker_runtime.client import ConfigEntry
from broker_runtime.protocol.messages import describe_configs
from broker_runtime.tools import quota_configs, user_configs
from broker_runtime.tools.common import (
    EXIT_USAGE,
    ToolError,
    add_bootstrap,
    client_for,
    parse_pairs,
    run_tool,
)

__all__ = ["SOURCE_NAMES", "add_parser", "run"]

#: DescribeConfigs ``ConfigSource`` -> the name kafka-configs prints.
SOURCE_NAMES = {source.value: source.name for source in describe_configs.ConfigSource}
_DYNAMIC = {
    describe_configs.ConfigSource.DYNAMIC_TOPIC_CONFIG,
    describe_configs.ConfigSource.DYNAMIC_BROKER_CONFIG,
    describe_configs.ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
}
_TYPES = {"topics": describe_configs.RESOURCE_TOPIC, "brokers": describe_configs.RESOURCE_BROKER}


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "configs",
        help="describe and alter topic and broker configs, client quotas and users' SCRAM credentials (as "
        "kafka-configs)",
    )
    add_bootstrap(p)
    p.add_argument(
        "--entity-type",
        required=True,
        action="append",
        choices=sorted([*_TYPES, "users", "clients"]),
        help="topics, brokers, users or clients; users and clients both (each with its --entity-name or "
        "--entity-default, in the same order): the quotas of a user for a client id, as kafka-configs",
    )
    p.add_argument(
        "--entity-name",
        action=_EntityNames,
        dest="entity_names",
        help="the topic name, broker id, user or client id (users, clients: every one if left out)",
    )
    p.add_argument(
        "--entity-default",
        action=_EntityNames,
        dest="entity_names",
        nargs=0,
        help="brokers: the cluster-wide defaults; users, clients: the default quota entity",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the configs")
    action.add_argument("--alter", action="store_true", help="change the configs")
    p.add_argument("--all", action="store_true", help="--describe: every config, not only the dynamic ones")
    p.add_argument("--add-config", default="", metavar="K=V,K2=V2", help="configs to set")
    p.add_argument("--delete-config", default="", metavar="K,K2", help="configs to remove")
    p.set_defaults(func=run)


class _EntityNames(argparse.Action):
    """``--entity-name N`` and ``--entity-default`` in command-line order, the default as ``""`` (kafka-configs
    pairs them with the ``--entity-type`` values by position)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        names = [
            *(getattr(namespace, self.dest, None) or []),
            values if option_string == "--entity-name" else "",
        ]
        setattr(namespace, self.dest, names)


def _entities(args: argparse.Namespace) -> None:
    """Check the entity types and names as kafka-configs does; sets ``entity_type``, ``entity_name`` and
    ``entity_default`` to the first entity's (what a single entity's branch reads) and ``entities`` to the
    (type, name) pairs (name ``""``: the default, None: every one)."""
    types: list[str] = args.entity_type
    names: list[str] = args.entity_names or []
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise ToolError(f"Duplicate entity type(s) specified: {','.join(duplicates)}", EXIT_USAGE)
    if len(types) > 1 and set(types) != {"users", "clients"}:
        raise ToolError("Only 'users' and 'clients' entity types may be specified together", EXIT_USAGE)
    if len(names) > len(types):
        raise ToolError("More entity names specified than entity types", EXIT_USAGE)
    args.entities = [(t, names[i] if i < len(names) else None) for i, t in enumerate(types)]
    args.entity_type = types[0]
    args.entity_name = names[0] or None if names else None
    args.entity_default = bool(names) and names[0] == ""


def _text(value: str | None) -> str:
    return "null" if value is None else value  # Java's string concatenation of a null, as kafka-configs


def _describe_line(e: ConfigEntry) -> str:
    """``  key=value sensitive=B synonyms={SOURCE:key=value, ...}``; a sensitive config's value is never known
    here (the broker answers null), and is printed as null even if a broker sent one."""
    value = None if e.sensitive else e.value
    listed = ", ".join(
        f"{SOURCE_NAMES.get(src, str(src))}:{n}={_text(None if e.sensitive else v)}"
        for n, v, src in e.synonyms
    )
    return f"  {e.name}={_text(value)} sensitive={'true' if e.sensitive else 'false'} synonyms={{{listed}}}"


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        _entities(args)
        if len(args.entities) == 2:
            return quota_configs.run_pair(args)
        if args.entity_type == "users":
            return user_configs.run(args)
        if args.entity_type == "clients":
            if args.describe:
                for line in quota_configs.describe(args):
                    print(line)
                return 0
            added = parse_pairs(args.add_config, "--add-config")
            deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
            if not added and not deleted:
                raise ToolError("--alter needs --add-config and/or --delete-config", EXIT_USAGE)
            print(quota_configs.alter(args, added, deleted))
            return 0
        if not args.entity_name and not args.entity_default:
            raise ToolError(
                f"--entity-type {args.entity_type} needs --entity-name or --entity-default", EXIT_USAGE
            )
        rtype = _TYPES[args.entity_type]
        if args.entity_default:
            if args.entity_type != "brokers":
                raise ToolError("--entity-default applies to --entity-type brokers only", EXIT_USAGE)
            name = ""
        else:
            name = args.entity_name
        kind = "topic" if args.entity_type == "topics" else "broker"
        label = f"{kind} {name}" if name else "the default broker"
        with client_for(args) as client:
            if args.describe:
                entries = client.admin.describe_config_entries(rtype, name)
                shown = entries if args.all else [e for e in entries if e.source in _DYNAMIC]
                print(f"{'All' if args.all else 'Dynamic'} configs for {label} are:")
                for e in shown:
                    print(_describe_line(e))
                return 0
            added = parse_pairs(args.add_config, "--add-config")
            deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
            if not added and not deleted:
                raise ToolError("--alter needs --add-config and/or --delete-config", EXIT_USAGE)
            client.admin.alter_configs(rtype, name, added, deleted)
            print(f"Completed updating config for {label}.")
            return 0

    return run_tool("configs", body)
