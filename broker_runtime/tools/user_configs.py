"""``pylog-broker configs --entity-type users``: SCRAM credentials of users, as ``kafka-configs`` manages them.

    pylog-broker configs --bootstrap-server H:P --entity-type users [--entity-name U] --describe
    pylog-broker configs --bootstrap-server H:P --entity-type users --entity-name U --alter
                         [--add-config 'SCRAM-SHA-256=[iterations=8192,password=P],...'] [--delete-config SCRAM-SHA-512]

``--describe`` prints, as kafka-configs does, ``SCRAM credential configs for user-principal 'U' are
SCRAM-SHA-256=iterations=8192, ...`` per user with credentials (every user without ``--entity-name``); nothing
for a user without any (RESOURCE_NOT_FOUND, as Kafka's admin client leaves it out), ``Error retrieving SCRAM
credential configs for user-principal 'U': <pylog's error line>`` for another per-user error. ``--alter`` sends one
AlterUserScramCredentials: the password is salted here (:meth:`AdminClient.alter_user_scram_credentials`), so
it never reaches the broker; ``iterations`` defaults to 4096 (kafka-configs' default; ``-1`` means it too) and
below 4096 is refused before anything is sent. Prints ``Completed updating config for user U.``. Quota configs
are refused naming why (pylog has no client quotas), any other key naming it; ``--entity-default`` cannot carry
SCRAM credentials (as kafka-configs). Errors: one line, exit 1 (the broker's code and message), 2 for bad
arguments. The password given on the command line is visible in the process list, as with kafka-configs.
"""

from __future__ import annotations

import argparse
import re

from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.security.scram_credentials import MIN_ITERATIONS, SCRAM_MECHANISMS
from broker_runtime.tools.common import EXIT_USAGE, ToolError, client_for, parse_pairs

__all__ = ["DEFAULT_ITERATIONS", "run"]

#: kafka-configs' iteration count when ``iterations=`` is left out (its ``DefaultScramIterations``).
DEFAULT_ITERATIONS = 4096
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)
#: Kafka's user and client quota config names (``QuotaConfig``); pylog has no quotas to set.
_QUOTA_CONFIGS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)


def _upsertion(user: str, mechanism: str, value: str) -> tuple[str, str, int, str]:
    found = _CREDENTIAL.fullmatch(value)
    if found is None:
        raise ToolError(
            f"Invalid credential property {mechanism}=<hidden>: expected [iterations=N,]password=P",
            EXIT_USAGE,
        )
    text, password = found.groups()
    iterations = int(text) if text and text != "-1" else DEFAULT_ITERATIONS
    if iterations < MIN_ITERATIONS:
        raise ToolError(
            f"Iterations {iterations} is less than the minimum {MIN_ITERATIONS} required for {mechanism}",
            EXIT_USAGE,
        )
    return user, mechanism, iterations, password


def run(args: argparse.Namespace) -> int:
    """The users branch of ``configs`` (raises ToolError; ``run_tool`` of the caller reports it)."""
    if args.entity_default:
        raise ToolError(
            "The use of --entity-default is not allowed with User SCRAM Credentials (pylog has no user quotas)",
            EXIT_USAGE,
        )
    user = args.entity_name
    if args.describe:
        with client_for(args) as client:
            described = client.admin.describe_user_scram_credentials([user] if user else None)
        for name, infos in described.items():
            if isinstance(infos, KafkaError) and infos.code == ErrorCode.RESOURCE_NOT_FOUND:
                continue
            if isinstance(infos, KafkaError):
                print(f"Error retrieving SCRAM credential configs for user-principal '{name}': {infos}")
            else:
                shown = ", ".join(f"{mech}=iterations={n}" for mech, n in infos.items())
                print(f"SCRAM credential configs for user-principal '{name}' are {shown}")
        return 0
    if not user:
        raise ToolError("--alter --entity-type users needs --entity-name", EXIT_USAGE)
    added = parse_pairs(args.add_config, "--add-config")
    deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not added and not deleted:
        raise ToolError("--alter needs --add-config and/or --delete-config", EXIT_USAGE)
    for key in [*added, *deleted]:
        if key in _QUOTA_CONFIGS:
            raise ToolError(
                f"{key}: pylog has no client quotas (only SCRAM credentials can be altered)", EXIT_USAGE
            )
        if key not in SCRAM_MECHANISMS:
            raise ToolError(
                f"Only SCRAM credential configs can be altered for 'users'. Unexpected config names: {key}",
                EXIT_USAGE,
            )
    upsertions = [_upsertion(user, mech, value) for mech, value in added.items()]
    with client_for(args) as client:
        results = client.admin.alter_user_scram_credentials(upsertions, [(user, mech) for mech in deleted])
    for error in results.values():
        if error is not None:
            raise error
    print(f"Completed updating config for user {user}.")
    return 0
