"""ACLs with Kafka's model: bindings, filters, and the authorizer that decides one request's access.

Lives in ``security/`` next to TLS and SASL because it is pure policy: it knows principals, hosts and resource
names, never sockets, logs or cluster files. The broker keeps the bindings in its cluster metadata
(:mod:`broker_runtime.server.cluster`: a single node's ``acls.json`` in the first log directory, a cluster's
``cluster.json``, so every node sees every change) and hands the current tuple to :meth:`Authorizer.authorize`.

Model (Kafka's ``AclBinding``; enum values are Kafka's wire values)::

    binding  = (resource type, resource name, pattern type, principal, host, operation, permission)
    resource = TOPIC 2 | GROUP 3 | CLUSTER 4 (name "kafka-cluster") | TRANSACTIONAL_ID 5
    pattern  = LITERAL 3 (name equal, or the wildcard name "*") | PREFIXED 4 (name starts with it)
    principal "User:<name>" or "User:*";  host an IP address or "*"
    operation ALL 2, READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9,
              DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12
    permission DENY 2 | ALLOW 3

Decision (Kafka's ``StandardAuthorizer``), for a principal at a host asking an operation on a resource:

1. a super user (``super.users``, ``User:a;User:b``) is allowed everything;
2. the bindings that match the resource are those of the same type whose pattern matches its name;
3. any matching DENY binding for the principal (or ``User:*``) and host (or ``*``) whose operation is the one
   asked or ALL denies -- DENY wins over every ALLOW;
4. else a matching ALLOW binding allows when its operation is the one asked, ALL, or implies it: DESCRIBE is
   implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS;
5. else, when no binding at all matches the resource, ``allow.everyone.if.no.acl.found`` decides (default false,
   as Kafka); otherwise denied.

Filters (DescribeAcls / DeleteAcls) use ANY (1) for "every value" and, for the pattern, MATCH (2): every
binding that would apply to the named resource (literal equal, wildcard, prefixes of the name).

Thread-safety: immutable values; :class:`Authorizer` holds only its configuration and a cache keyed by the
bindings tuple it was last given, used from one thread (the broker's event loop).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from broker_runtime.errors import ConfigError

__all__ = [
    "AUTHORIZER_CLASS_NAMES",
    "CLUSTER_NAME",
    "WILDCARD",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "Authorizer",
    "PatternType",
    "ResourceType",
    "authorizer_from_properties",
]

_log = logging.getLogger(__name__)

#: The one cluster resource's name (Kafka's ``CLUSTER_NAME``).
CLUSTER_NAME = "kafka-cluster"
#: Wildcard resource name, principal (``User:*``) and host.
WILDCARD = "*"
#: ``authorizer.class.name`` values that enable this authorizer (Kafka's KRaft and ZooKeeper-era class names,
#: and pylog's own); any other non-empty value fails the start.
AUTHORIZER_CLASS_NAMES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "pylog.StandardAuthorizer",
    }
)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations an ALLOW of the key also allows (Kafka's implied operations).
_IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset(
        {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER}
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}
#: Resource types a binding may name (pylog has no delegation tokens or user resources).
_BINDABLE_TYPES = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)


@dataclass(frozen=True)
class AclBinding:
    """One access control entry on one resource pattern (see the module docstring)."""

    resource_type: ResourceType
    name: str
    pattern: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermission

    def problem(self) -> str | None:
        """Why this binding cannot be stored (Kafka's INVALID_REQUEST reasons), or None."""
        if self.resource_type not in _BINDABLE_TYPES:
            return f"resource type {self.resource_type.name} cannot carry ACLs here"
        if self.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
            return f"pattern type {self.pattern.name} is not a concrete pattern (LITERAL or PREFIXED)"
        if not self.name:
            return "resource name must not be empty"
        if self.pattern == PatternType.PREFIXED and self.name == WILDCARD:
            return "a PREFIXED pattern cannot be the wildcard '*' (use LITERAL '*')"
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME!r}"
        kind, sep, _ = self.principal.partition(":")
        if not sep or not kind:
            return f"principal {self.principal!r} is not of the form Type:name (e.g. User:alice)"
        if not self.host:
            return "host must not be empty (use '*' for any host)"
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            return f"operation {self.operation} is not a concrete operation"
        if self.permission not in (AclPermission.ALLOW, AclPermission.DENY):
            return f"permission {self.permission} is not ALLOW or DENY"
        return None

    def matches_resource(self, resource_type: ResourceType, name: str) -> bool:
        if self.resource_type != resource_type:
            return False
        if self.pattern == PatternType.LITERAL:
            return self.name == name or self.name == WILDCARD
        return self.pattern == PatternType.PREFIXED and name.startswith(self.name)

    def to_json(self) -> list[Any]:
        return [
            self.resource_type.name,
            self.name,
            self.pattern.name,
            self.principal,
            self.host,
            self.operation.name,
            self.permission.name,
        ]

    @classmethod
    def from_json(cls, item: Iterable[Any]) -> AclBinding:
        rt, name, pattern, principal, host, op, perm = item
        return cls(
            ResourceType[rt],
            str(name),
            PatternType[pattern],
            str(principal),
            str(host),
            AclOperation[op],
            AclPermission[perm],
        )


@dataclass(frozen=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter: None or ANY fields match every value (see the module docstring)."""

    resource_type: ResourceType
    name: str | None
    pattern: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission: AclPermission

    def problem(self) -> str | None:
        if self.resource_type == ResourceType.UNKNOWN or self.pattern == PatternType.UNKNOWN:
            return "filter has an UNKNOWN resource or pattern type"
        if self.operation == AclOperation.UNKNOWN or self.permission == AclPermission.UNKNOWN:
            return "filter has an UNKNOWN operation or permission"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != AclOperation.ANY and b.operation != self.operation:
            return False
        if self.permission != AclPermission.ANY and b.permission != self.permission:
            return False
        if self.pattern == PatternType.MATCH:
            return self.name is None or b.matches_resource(b.resource_type, self.name)
        if self.pattern != PatternType.ANY and b.pattern != self.pattern:
            return False
        return self.name is None or b.name == self.name


class Authorizer:
    """Decides requests against the broker's bindings; see the module docstring for the rules."""

    def __init__(self, super_users: Iterable[str] = (), *, allow_if_no_acl: bool = False) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._cached: tuple[AclBinding, ...] | None = None
        self._by_type: dict[ResourceType, tuple[AclBinding, ...]] = {}

    def _index(self, bindings: tuple[AclBinding, ...]) -> dict[ResourceType, tuple[AclBinding, ...]]:
        if bindings is not self._cached:
            by_type: dict[ResourceType, list[AclBinding]] = {}
            for b in bindings:
                by_type.setdefault(b.resource_type, []).append(b)
            self._by_type = {k: tuple(v) for k, v in by_type.items()}
            self._cached = bindings
        return self._by_type

    def authorize(
        self,
        bindings: tuple[AclBinding, ...],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        """True when ``principal`` at ``host`` may do ``operation`` on the resource."""
        if principal in self.super_users:
            return True
        found = False
        allowed = False
        for b in self._index(bindings).get(resource_type, ()):
            if not b.matches_resource(resource_type, name):
                continue
            found = True
            if b.principal != principal and b.principal != "User:*":
                continue
            if b.host != WILDCARD and b.host != host:
                continue
            if b.permission == AclPermission.DENY:
                if b.operation in (operation, AclOperation.ALL):
                    return False
            elif b.operation in (operation, AclOperation.ALL) or b.operation in _IMPLIED_BY.get(
                operation, frozenset()
            ):
                allowed = True
        if allowed:
            return True
        return not found and self.allow_if_no_acl

    def authorize_any(
        self,
        bindings: tuple[AclBinding, ...],
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """True when some resource of the type may be used for ``operation`` (Kafka's
        ``authorizeByResourceType``, used by InitProducerId without a transactional id: WRITE on any topic).
        An ALLOW counts unless a DENY for the same principal/host covers the same pattern or the wildcard."""
        if principal in self.super_users:
            return True
        rows = self._index(bindings).get(resource_type, ())
        if not rows:
            return self.allow_if_no_acl

        def applies(b: AclBinding) -> bool:
            return (b.principal in (principal, "User:*")) and (b.host in (WILDCARD, host))

        denied = {
            (b.pattern, b.name)
            for b in rows
            if applies(b)
            and b.permission == AclPermission.DENY
            and b.operation in (operation, AclOperation.ALL)
        }
        if (PatternType.LITERAL, WILDCARD) in denied:
            return False
        for b in rows:
            if not applies(b) or b.permission != AclPermission.ALLOW:
                continue
            if b.operation not in (operation, AclOperation.ALL):
                continue
            if (b.pattern, b.name) in denied:
                continue
            if any(p == PatternType.PREFIXED and b.name.startswith(n) for p, n in denied):
                continue
            return True
        return False


def authorizer_from_properties(props: Mapping[str, str]) -> Authorizer | None:
    """The authorizer ``authorizer.class.name`` asks for (None when unset), with ``super.users`` and
    ``allow.everyone.if.no.acl.found``; a bad value raises :class:`ConfigError` naming it."""
    name = props.get("authorizer.class.name", "").strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(
            f"authorizer.class.name={name!r}: pylog has one authorizer, Kafka's standard ACL model; name it "
            f"with one of {', '.join(sorted(AUTHORIZER_CLASS_NAMES))}"
        )
    supers = []
    for entry in props.get("super.users", "").split(";"):
        entry = entry.strip()
        if not entry:
            continue
        if ":" not in entry:
            raise ConfigError(f"super.users: {entry!r} is not a principal of the form User:name")
        supers.append(entry)
    allow = props.get("allow.everyone.if.no.acl.found", "false").strip().lower()
    if allow not in ("true", "false"):
        raise ConfigError(f"allow.everyone.if.no.acl.found={allow!r}: expected true or false")
    return Authorizer(supers, allow_if_no_acl=allow == "true")
