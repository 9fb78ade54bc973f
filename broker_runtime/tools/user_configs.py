"""``pylog-broker configs --entity-type users``: SCRAM credentials (and quotas) of users, as ``kafka-configs``
manages them.

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
(``producer_byte_rate``, ...) go to AlterClientQuotas and ``--describe`` prints the user's quotas first
(:mod:`broker_runtime.tools.quota_configs`); any other key is refused naming it; ``--entity-default`` cannot
carry SCRAM credentials (as kafka-configs). Errors: one line, exit 1 (the broker's code and message), 2 for bad
arguments. The password given on the command line is visible in the process list, as with kafka-configs.
"""

from __future__ import annotations

import argparse
import re

from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.security.scram_credentials import MIN_ITERATIONS, SCRAM_MECHANISMS
from broker_runtime.tools import quota_configs
from broker_runtime.tools.common import EXIT_USAGE, ToolError, client_for, parse_pairs

__all__ = ["DEFAULT_ITERATIONS", "run"]

#: kafka-configs' iteration count when ``iterations=`` is left out (its ``DefaultScramIterations``).
DEFAULT_ITERATIONS = 4096
_CREDENTIAL = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)


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
    user = args.entity_name
    if args.describe:
        for line in quota_configs.describe(args):
            print(line)
        if args.entity_default:
            return 0
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
    added = parse_pairs(args.add_config, "--add-config")
    deleted = [k.strip() for k in args.delete_config.split(",") if k.strip()]
    if not added and not deleted:
        raise ToolError("--alter needs --add-config and/or --delete-config", EXIT_USAGE)
    quota_added = {k: v for k, v in added.items() if k in quota_configs.QUOTA_CONFIGS}
    quota_deleted = [k for k in deleted if k in quota_configs.QUOTA_CONFIGS]
    added = {k: v for k, v in added.items() if k not in quota_configs.QUOTA_CONFIGS}
    deleted = [k for k in deleted if k not in quota_configs.QUOTA_CONFIGS]
    if args.entity_default and (added or deleted):
        raise ToolError("The use of --entity-default is not allowed with User SCRAM Credentials", EXIT_USAGE)
    if not user and not args.entity_default:
        raise ToolError("--alter --entity-type users needs --entity-name or --entity-default", EXIT_USAGE)
    for key in [*added, *deleted]:
        if key not in SCRAM_MECHANISMS:
            raise ToolError(
                f"Only SCRAM credential configs can be altered for 'users'. Unexpected config names: {key}",
                EXIT_USAGE,
            )
    upsertions = [_upsertion(user, mech, value) for mech, value in added.items()]
    if quota_added or quota_deleted:
        done = quota_configs.alter(args, quota_added, quota_deleted)
        if not upsertions and not deleted:
            print(done)
            return 0
    with client_for(args) as client:
        results = client.admin.alter_user_scram_credentials(upsertions, [(user, mech) for mech in deleted])
    for error in results.values():
        if error is not None:
            raise error
    print(f"Completed updating config for user {user}.")
    return 0
