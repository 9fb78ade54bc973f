"""``pylog-broker acls``: Kafka's ``kafka-acls.sh`` -- add, remove and list ACL bindings.

    pylog-broker acls --bootstrap-server H:P [--command-config FILE] --add|--remove|--list
        [--allow-principal P]... [--deny-principal P]... [--allow-host H]... [--deny-host H]...
        [--operation OP]... [--topic T]... [--group G]... [--transactional-id ID]... [--cluster]
        [--resource-pattern-type literal|prefixed|match|any]

As kafka-acls.sh: ``--add`` makes one binding per (resource, principal, host, operation), permission ALLOW for
``--allow-principal`` and DENY for ``--deny-principal`` (hosts default to ``*``, operations to ALL);
``--remove`` deletes the bindings matching those values (no principal or operation given = every one);
``--list`` prints the bindings of the resources named (all when none), one block per resource pattern.
``--command-config`` is a properties file of client security settings (``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config``, ``ssl.*``). Exit 0 done; 1 the broker refused (the line names the
error code); 2 bad usage (see :mod:`.common`). Enum names and values: :mod:`broker_runtime.security.acl`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from broker_runtime.client import KafkaClient
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.acl import (
    CLUSTER_NAME,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)
from broker_runtime.tools.common import EXIT_USAGE, ToolError, add_bootstrap, client_for, run_tool

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("acls", help="add, remove or list ACLs (as kafka-acls.sh)")
    add_bootstrap(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add the bindings described")
    action.add_argument("--remove", action="store_true", help="remove the bindings matching")
    action.add_argument("--list", action="store_true", help="list the bindings of the resources named")
    p.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
    p.add_argument("--allow-host", action="append", default=[], metavar="HOST")
    p.add_argument("--deny-host", action="append", default=[], metavar="HOST")
    p.add_argument("--principal", help="--list: only the bindings of this principal")
    p.add_argument("--operation", action="append", default=[], help="Read, Write, Describe, All, ...")
    p.add_argument("--topic", action="append", default=[])
    p.add_argument("--group", action="append", default=[])
    p.add_argument("--transactional-id", action="append", default=[])
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        default=None,
        help="literal (default for --add), prefixed, match or any (default for --list/--remove)",
    )
    p.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh compatibility")
    p.set_defaults(func=run)


def _enum(kind: Any, text: str, what: str) -> Any:
    key = text.strip().upper().replace("-", "_")
    # kafka-acls.sh writes operations in CamelCase (DescribeConfigs, ClusterAction, IdempotentWrite)
    key = {"DESCRIBECONFIGS": "DESCRIBE_CONFIGS", "ALTERCONFIGS": "ALTER_CONFIGS"}.get(key, key)
    key = {"CLUSTERACTION": "CLUSTER_ACTION", "IDEMPOTENTWRITE": "IDEMPOTENT_WRITE"}.get(key, key)
    try:
        return kind[key]
    except KeyError:
        names = ", ".join(m.name for m in kind if m.name not in ("UNKNOWN",))
        raise ToolError(f"{what} {text!r}: expected one of {names}", EXIT_USAGE) from None


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str | None]]:
    out: list[tuple[ResourceType, str | None]] = [(ResourceType.TOPIC, t) for t in args.topic]
    out += [(ResourceType.GROUP, g) for g in args.group]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return out


def _client(args: argparse.Namespace) -> KafkaClient:
    return client_for(args, "pylog-acls")


def _check(code: int, message: str | None, what: str) -> None:
    if code:
        name = ErrorCode(code).name if code in ErrorCode._value2member_map_ else str(code)
        raise ToolError(f"{what}: {name}: {message or ''}".rstrip(": "))


def _print_resources(resources: list[dict[str, Any]]) -> None:
    for r in resources:
        pattern = PatternType(r["PatternType"]).name
        print(
            f"Current ACLs for resource `ResourcePattern(resourceType={ResourceType(r['ResourceType']).name}, "
            f"name={r['ResourceName']}, patternType={pattern})`: "
        )
        for a in r["Acls"]:
            print(
                f" \t(principal={a['Principal']}, host={a['Host']}, "
                f"operation={AclOperation(a['Operation']).name}, "
                f"permissionType={AclPermission(a['PermissionType']).name})"
            )
        print()


def run(args: argparse.Namespace) -> int:
    def body() -> int:
        resources = _resources(args)
        ops = [_enum(AclOperation, o, "--operation") for o in args.operation]
        default_pattern = "literal" if args.add else "any"
        pattern = _enum(PatternType, args.resource_pattern_type or default_pattern, "--resource-pattern-type")
        principals = [(p, AclPermission.ALLOW) for p in args.allow_principal]
        principals += [(p, AclPermission.DENY) for p in args.deny_principal]
        with _client(args) as client:
            if args.add:
                if not resources or not principals:
                    raise ToolError(
                        "--add needs a resource and --allow-principal or --deny-principal", EXIT_USAGE
                    )
                if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
                    raise ToolError("--add takes --resource-pattern-type literal or prefixed", EXIT_USAGE)
                creations = [
                    {
                        "ResourceType": rt,
                        "ResourceName": name,
                        "ResourcePatternType": pattern,
                        "Principal": principal,
                        "Host": host,
                        "Operation": op,
                        "PermissionType": perm,
                    }
                    for rt, name in resources
                    for principal, perm in principals
                    for host in (
                        (args.allow_host if perm == AclPermission.ALLOW else args.deny_host) or ["*"]
                    )
                    for op in ops or [AclOperation.ALL]
                ]
                answer = client.admin.acl_request(ApiKey.CREATE_ACLS, {"Creations": creations})
                for r in answer["Results"]:
                    _check(r["ErrorCode"], r["ErrorMessage"], "add")
                print(f"Added {len(creations)} ACL binding(s)", file=sys.stderr)
                return 0
            filters = [
                {
                    "ResourceTypeFilter": rt,
                    "ResourceNameFilter": name,
                    "PatternTypeFilter": pattern,
                    "PrincipalFilter": principal,
                    "HostFilter": None,
                    "Operation": op,
                    "PermissionType": perm,
                }
                for rt, name in (list(resources) or [(ResourceType.ANY, None)])
                for principal, perm in (principals or [(getattr(args, "principal", None), AclPermission.ANY)])
                for op in ops or [AclOperation.ANY]
            ]
            if args.remove:
                if not resources:
                    raise ToolError("--remove needs a resource (--topic, --group, ...)", EXIT_USAGE)
                answer = client.admin.acl_request(ApiKey.DELETE_ACLS, {"Filters": filters})
                removed = 0
                for r in answer["FilterResults"]:
                    _check(r["ErrorCode"], r["ErrorMessage"], "remove")
                    removed += len(r["MatchingAcls"])
                print(f"Removed {removed} ACL binding(s)", file=sys.stderr)
                return 0
            for f in filters:
                answer = client.admin.acl_request(ApiKey.DESCRIBE_ACLS, f)
                _check(answer["ErrorCode"], answer["ErrorMessage"], "list")
                _print_resources(answer["Resources"])
            return 0

    return run_tool("acls", body)
