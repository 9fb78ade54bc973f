"""``pylog-broker configs --entity-type users|clients``: client quotas, as ``kafka-configs`` manages them.

    pylog-broker configs --bootstrap-server H:P --entity-type users|clients (--entity-name N | --entity-default)
                         --alter [--add-config producer_byte_rate=1048576,consumer_byte_rate=...]
                         [--delete-config request_percentage,...]
    pylog-broker configs --bootstrap-server H:P --entity-type users|clients [--entity-name N | --entity-default]
                         --describe

``--alter`` sends one AlterClientQuotas for the entity (the added keys set, the deleted ones removed) and prints
``Completed updating config for user U.`` / ``client C`` (``... for default user.`` with ``--entity-default``).
``--describe`` asks DescribeClientQuotas with a strict filter (the named entity, the default one, or every entity
of the type without either) and prints, as kafka-configs does, one ``Quota configs for user-principal 'U' are
producer_byte_rate=1048576.0, ...`` line per entity (``client-id 'C'``, ``the default user-principal``; values
as Java prints a double). The keys (``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``) are
checked by the broker. Errors: one line, exit 1 (the broker's code and message), exit 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import math

from broker_runtime.tools.common import EXIT_USAGE, ToolError, client_for

__all__ = ["QUOTA_CONFIGS", "alter", "describe", "java_double"]

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


def describe(args: argparse.Namespace) -> list[str]:
    """The ``Quota configs for ...`` lines of the entities ``args`` names."""
    kind, word = _TYPES[args.entity_type]
    if args.entity_default:
        component = (kind, 1, None)
    elif args.entity_name:
        component = (kind, 0, args.entity_name)
    else:
        component = (kind, 2, None)
    with client_for(args) as client:
        found = client.admin.describe_client_quotas([component], strict=True)
    lines = []
    for entity, values in found:
        name = entity.get(kind)
        who = f"{word} '{name}'" if name is not None else f"the default {word}"
        shown = ", ".join(f"{k}={java_double(v)}" for k, v in sorted(values.items()))
        lines.append(f"Quota configs for {who} are {shown}")
    return lines


def alter(args: argparse.Namespace, added: dict[str, str], deleted: list[str]) -> str:
    """Send the alteration; the line kafka-configs prints when it is done (raises the broker's error)."""
    kind, _ = _TYPES[args.entity_type]
    if not args.entity_name and not args.entity_default:
        raise ToolError(
            f"--alter --entity-type {args.entity_type} needs --entity-name or --entity-default", EXIT_USAGE
        )
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
    name = None if args.entity_default else args.entity_name
    with client_for(args) as client:
        (error,) = client.admin.alter_client_quotas([({kind: name}, ops)])
    if error is not None:
        raise error
    singular = args.entity_type[:-1]
    return (
        f"Completed updating default config for {singular}."
        if name is None
        else (f"Completed updating config for {singular} {name}.")
    )
