"""``pylog-broker configs --entity-type users|clients``: client quotas, as ``kafka-configs`` manages them.

    pylog-broker configs --bootstrap-server H:P --entity-type users|clients (--entity-name N | --entity-default)
                         --alter [--add-config producer_byte_rate=1048576,consumer_byte_rate=...]
                         [--delete-config request_percentage,...]
    pylog-broker configs --bootstrap-server H:P --entity-type users|clients [--entity-name N | --entity-default]
                         --describe

``--alter`` sends one AlterClientQuotas for the entity (the added keys set, the deleted ones removed) and prints
``Completed updating config for user U.`` / ``client C`` (``Completed updating default config for users in the
cluster.`` with ``--entity-default``, as kafka-configs).
``--describe`` asks DescribeClientQuotas with a strict filter (the named entity, the default one, or every entity
of the type without either) and prints, as kafka-configs does, one ``Quota configs for user-principal 'U' are
producer_byte_rate=1048576.0, ...`` line per entity (``client-id 'C'``, ``the default user-principal``; values
as Java prints a double). The keys (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``) are
checked by the broker.

A user's quotas for one client id (``--entity-type users --entity-name U --entity-type clients --entity-name C``,
either side ``--entity-default`` instead of its name, in either order: names pair with types by position, as in
kafka-configs) are the entity ``{user: U, client-id: C}`` (:func:`run_pair`): ``--alter`` needs a name or default
for both and prints ``Completed updating config for user U.`` (the first entity named, as kafka-configs);
``--describe`` filters on both (a type without a name: every entity of it) and prints ``Quota configs for
user-principal 'U', client-id 'C' are ...``. Only quota keys go with a pair (kafka-configs' rule: no SCRAM). Errors: one line, exit 1 (the broker's code and message), exit 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import math

from broker_runtime.tools.common import EXIT_USAGE, ToolError, client_for, parse_pairs

__all__ = ["QUOTA_CONFIGS", "alter", "describe", "java_double", "run_pair"]

#: Kafka's user and client quota config names (``QuotaConfig``).
QUOTA_CONFIGS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)
#: ``--entity-type`` -> the ``ClientQuotaEntity`` type, and the word kafka-configs prints for it.
_TYPES = {"users": ("user", "user-principal"), "clients": ("client-id", "client-id")}


def java_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` writes it (``1048576.0``, ``1.0E7``), as kafka-configs prints."""
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(float(value))
    exponent = math.floor(math.log10(abs(value)))
    mantissa = round(value / 10**exponent, 15)
    return f"{mantissa!r}E{exponent}"


def _component(entity_type: str, name: str | None) -> tuple[str, int, str | None]:
    """A DescribeClientQuotas filter component: the named entity, the default one (``""``), or any (None)."""
    kind, _ = _TYPES[entity_type]
    if name == "":
        return (kind, 1, None)
    if name is not None:
        return (kind, 0, name)
    return (kind, 2, None)


def describe(args: argparse.Namespace) -> list[str]:
    """The ``Quota configs for ...`` lines of the entities ``args`` names (``args.entities``: one type, or users
    and clients)."""
    entities = getattr(args, "entities", None) or [
        (args.entity_type, "" if args.entity_default else args.entity_name)
    ]
    with client_for(args) as client:
        found = client.admin.describe_client_quotas([_component(t, n) for t, n in entities], strict=True)
    lines = []
    for entity, values in found:
        parts = []
        for kind, word in (_TYPES["users"], _TYPES["clients"]):  # kafka-configs' order: user, then client
            if kind in entity:
                name = entity[kind]
                parts.append(f"{word} '{name}'" if name is not None else f"the default {word}")
        shown = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
        lines.append(f"Quota configs for {', '.join(parts)} are {shown}")
    return lines


def run_pair(args: argparse.Namespace) -> int:
    """``configs`` with both users and clients (see the module docstring); raises ToolError."""
    if args.describe:
        for line in describe(args):
            print(line)
        return 0
    if any(name is None for _, name in args.entities):
        raise ToolError(
            "--entity-name or --entity-default must be specified with each --entity-type for --alter",
            EXIT_USAGE,
        )
    added = parse_pairs(args.add_config, "--add-config")
    deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not added and not deleted:
        raise ToolError("--alter needs --add-config and/or --delete-config", EXIT_USAGE)
    unexpected = sorted(k for k in [*added, *deleted] if k not in QUOTA_CONFIGS)
    if unexpected:
        raise ToolError(
            f"Only quota configs can be altered for 'clients'. Unexpected config names: {','.join(unexpected)}",
            EXIT_USAGE,
        )
    ops = _ops(added, deleted)
    entity = {_TYPES[t][0]: (name or None) for t, name in args.entities}
    with client_for(args) as client:
        (error,) = client.admin.alter_client_quotas([(entity, ops)])
    if error is not None:
        raise error
    first_type, first_name = args.entities[0]
    print(
        f"Completed updating config for {first_type[:-1]} {first_name}."
        if first_name
        else f"Completed updating default config for {first_type} in the cluster."
    )
    return 0


def _ops(added: dict[str, str], deleted: list[str]) -> dict[str, float | None]:
    ops: dict[str, float | None] = {}
    for key, text in added.items():
        try:
            ops[key] = float(text)
        except ValueError:
            raise ToolError(
                f"Invalid value {text!r} for quota config {key}: a number is expected", EXIT_USAGE
            ) from None
    for key in deleted:
        ops[key] = None
    return ops


def alter(args: argparse.Namespace, added: dict[str, str], deleted: list[str]) -> str:
    """Send the alteration; the line kafka-configs prints when it is done (raises the broker's error)."""
    kind, _ = _TYPES[args.entity_type]
    if not args.entity_name and not args.entity_default:
        raise ToolError(
            f"--alter --entity-type {args.entity_type} needs --entity-name or --entity-default", EXIT_USAGE
        )
    ops = _ops(added, deleted)
    name = None if args.entity_default else args.entity_name
    with client_for(args) as client:
        (error,) = client.admin.alter_client_quotas([({kind: name}, ops)])
    if error is not None:
        raise error
    singular = args.entity_type[:-1]
    return (
        f"Completed updating default config for {args.entity_type} in the cluster."
        if name is None
        else (f"Completed updating config for {singular} {name}.")
    )
