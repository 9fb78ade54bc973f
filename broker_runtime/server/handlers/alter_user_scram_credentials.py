"""AlterUserScramCredentials (key 51, v0): add, replace and delete users' SCRAM credentials.

Authorized as Kafka's ``ControllerApis``: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for every user
of the request. Validated per user as Kafka's ``ScramControlManager.alterCredentials``: a user altered twice in
one request (two deletions, or a deletion and an upsertion, or two upsertions, even of different mechanisms)
answers DUPLICATE_RESOURCE and nothing of it is applied; an empty user name UNACCEPTABLE_CREDENTIAL; a mechanism
other than SCRAM-SHA-256/512 UNSUPPORTED_SASL_MECHANISM; iterations outside 4096-16384 UNACCEPTABLE_CREDENTIAL;
deleting a credential that is not stored RESOURCE_NOT_FOUND. pylog also refuses (UNACCEPTABLE_CREDENTIAL) a
user name that is not US-ASCII: its authenticator could never log that user in.

An upsertion carries the client's salt and salted password; the broker keeps only StoredKey and ServerKey
derived from them (:func:`~broker_runtime.security.scram_credentials.credential_from_salted_password`). The
valid alterations are written in one atomic write of the SCRAM credentials file
(:func:`~broker_runtime.security.scram_credentials.alter_credentials`, under its lock) before the answer: the
file of ``pylog.cluster.dir`` in a cluster, which every broker of the cluster reads, so the next login on any
broker sees the change. One INFO line names who changed which users and mechanisms; no salt, key or password
is ever logged or answered.
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.protocol.messages import RequestHeader, scram_credentials
from broker_runtime.security.acl import AclOperation
from broker_runtime.security.scram_credentials import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    alter_credentials,
    credential_from_salted_password,
    credentials_path,
    user_name_problem,
)
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = scram_credentials.ALTER_REQUEST
MIN_VERSION = 0
MAX_VERSION = 0

_log = logging.getLogger(__name__)
_TWICE = "A user credential cannot be altered twice in the same request"

Problem = tuple[ErrorCode, str]


def _name_and_mechanism(name: str, mechanism: int) -> Problem | None:
    if not name:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
    if mechanism not in scram_credentials.MECHANISM_NAMES:
        return ErrorCode.UNSUPPORTED_SASL_MECHANISM, f"Unknown SCRAM mechanism (type {mechanism})"
    return None


def _upsertion_problem(u: dict[str, Any]) -> Problem | None:
    problem = _name_and_mechanism(u["Name"], u["Mechanism"])
    if problem is not None:
        return problem
    name_problem = user_name_problem(u["Name"])
    if name_problem is not None:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, name_problem
    iterations = u["Iterations"]
    if iterations < MIN_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too few iterations: {iterations} < {MIN_ITERATIONS}"
    if iterations > MAX_ITERATIONS:
        return ErrorCode.UNACCEPTABLE_CREDENTIAL, f"Too many iterations: {iterations} > {MAX_ITERATIONS}"
    return None


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    deletions: list[dict[str, Any]] = body["Deletions"]
    upsertions: list[dict[str, Any]] = body["Upsertions"]
    if not ctx.authorized_cluster(AclOperation.ALTER):
        users = sorted({d["Name"] for d in deletions} | {u["Name"] for u in upsertions})
        return {
            "ThrottleTimeMs": 0,
            "Results": [
                {
                    "User": user,
                    "ErrorCode": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                    "ErrorMessage": "ALTER on the cluster is required",
                }
                for user in users
            ],
        }
    errors: dict[str, Problem] = {}
    to_delete: dict[str, tuple[str, str]] = {}
    to_upsert: dict[str, dict[str, Any]] = {}
    for d in deletions:
        user = d["Name"]
        if user in errors:
            continue
        if to_delete.pop(user, None) is not None:
            errors[user] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        problem = _name_and_mechanism(user, d["Mechanism"])
        if problem is not None:
            errors[user] = problem
        else:
            to_delete[user] = (user, scram_credentials.MECHANISM_NAMES[d["Mechanism"]])
    for u in upsertions:
        user = u["Name"]
        if user in errors:
            continue
        if to_delete.pop(user, None) is not None or to_upsert.pop(user, None) is not None:
            errors[user] = (ErrorCode.DUPLICATE_RESOURCE, _TWICE)
            continue
        problem = _upsertion_problem(u)
        if problem is not None:
            errors[user] = problem
        else:
            to_upsert[user] = u
    credentials: list[tuple[str, str, ScramCredential]] = []
    for user, u in to_upsert.items():
        mechanism = scram_credentials.MECHANISM_NAMES[u["Mechanism"]]
        salted = bytes(u["SaltedPassword"])
        credentials.append(
            (
                user,
                mechanism,
                credential_from_salted_password(mechanism, bytes(u["Salt"]), salted, u["Iterations"]),
            )
        )
    done: list[str] = []
    if to_delete or credentials:
        try:
            missing = alter_credentials(
                credentials_path(ctx.config.log_dirs, ctx.config.cluster_dir), to_delete.values(), credentials
            )
        except (ConfigError, OSError) as exc:
            message = f"SCRAM credentials not stored: {exc}"
            _log.warning("AlterUserScramCredentials failed: %s", message)
            for user in [*to_delete, *to_upsert]:
                errors[user] = (ErrorCode.UNKNOWN_SERVER_ERROR, message)
        else:
            for user in missing:
                errors[user] = (
                    ErrorCode.RESOURCE_NOT_FOUND,
                    "Attempt to delete a user credential that does not exist",
                )
            done = [user for user in [*to_delete, *to_upsert] if user not in errors]
            if done:
                changes = [
                    f"deleted {user} ({to_delete[user][1]})"
                    if user in to_delete
                    else f"set {user} ({scram_credentials.MECHANISM_NAMES[to_upsert[user]['Mechanism']]}, "
                    f"{to_upsert[user]['Iterations']} iterations)"
                    for user in done
                ]
                _log.info(
                    "SCRAM credentials changed by %s: %s", ctx.request_session.principal, ", ".join(changes)
                )
    results = [{"User": user, "ErrorCode": ErrorCode.NONE, "ErrorMessage": None} for user in done]
    results += [
        {"User": user, "ErrorCode": code, "ErrorMessage": msg} for user, (code, msg) in errors.items()
    ]
    return {"ThrottleTimeMs": 0, "Results": results}
