"""DescribeUserScramCredentials (key 50, v0): each user's SCRAM mechanisms with their iteration counts.

Authorized as Kafka's ``KafkaApis``: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED for the whole
request. Answered from the SCRAM credentials file every broker of the cluster reads
(:mod:`broker_runtime.security.scram_credentials`) as Kafka's ``ScramImage.describe`` answers: no users named
(null or empty) lists every stored user; a user named twice answers DUPLICATE_RESOURCE, one without a
credential RESOURCE_NOT_FOUND. Never a salt or key: a mechanism and its iterations only. A file that cannot be
read fails the request with UNKNOWN_SERVER_ERROR naming the defect (and a WARNING).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.protocol.messages import RequestHeader, scram_credentials
from broker_runtime.security.acl import AclOperation
from broker_runtime.security.scram_credentials import credentials_path, list_users
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = scram_credentials.DESCRIBE_REQUEST
MIN_VERSION = 0
MAX_VERSION = 0

_log = logging.getLogger(__name__)


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    named = [u["Name"] for u in body["Users"] or ()]

    def fail(code: ErrorCode, message: str) -> dict[str, Any]:
        return {
            "ThrottleTimeMs": 0,
            "ErrorCode": code,
            "ErrorMessage": message,
            "Results": [
                {"User": user, "ErrorCode": code, "ErrorMessage": message, "CredentialInfos": []}
                for user in named
            ],
        }

    if not ctx.authorized_cluster(AclOperation.DESCRIBE):
        return fail(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "DESCRIBE on the cluster is required")
    try:
        stored = list_users(credentials_path(ctx.config.log_dirs, ctx.config.cluster_dir))
    except (ConfigError, KeyError, TypeError, ValueError, AttributeError) as exc:
        message = f"SCRAM credentials unreadable: {type(exc).__name__}: {exc}"
        _log.warning("DescribeUserScramCredentials failed: %s", message)
        return fail(ErrorCode.UNKNOWN_SERVER_ERROR, message)
    results: list[dict[str, Any]] = []
    times = Counter(named)
    for user in times if named else stored:
        if times[user] > 1:
            code, message = (
                ErrorCode.DUPLICATE_RESOURCE,
                f"Cannot describe SCRAM credentials for the same user twice in a single request: {user}",
            )
        else:
            infos = [
                {"Mechanism": scram_credentials.MECHANISM_TYPES[mechanism], "Iterations": iterations}
                for mechanism, iterations in stored.get(user, {}).items()
                if mechanism in scram_credentials.MECHANISM_TYPES
            ]
            if infos:
                results.append({"User": user, "ErrorCode": 0, "ErrorMessage": None, "CredentialInfos": infos})
                continue
            code, message = (
                ErrorCode.RESOURCE_NOT_FOUND,
                f"Attempt to describe a user credential that does not exist: {user}",
            )
        results.append({"User": user, "ErrorCode": code, "ErrorMessage": message, "CredentialInfos": []})
    return {"ThrottleTimeMs": 0, "ErrorCode": 0, "ErrorMessage": None, "Results": results}
