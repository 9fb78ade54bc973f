"""ApiVersions (key 18, v0-4): the API keys and version ranges this broker answers.

The advertised ranges are exactly those of the handler modules (``handlers.supported_versions()``, which the
composition root hands over as ``ctx.api_versions``), so a client never picks a version the broker then refuses. Responses always use response header v0 (the codec does
that). A request of a newer version than 4 never reaches this handler: the dispatcher answers it with a v0 body
carrying UNSUPPORTED_VERSION and the ApiVersions range only, as Kafka does (KIP-511). From v3 the answer carries
the feature levels of :mod:`broker_runtime.server.features` (SupportedFeatures, FinalizedFeatures,
FinalizedFeaturesEpoch; the rules are there).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, api_versions
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.features import feature_fields

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle", "unsupported_version_body", "version_list"]

#: The request this module answers (its API key travels with the message definition).
REQUEST = api_versions.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4


def version_list(versions: dict[int, tuple[int, int]]) -> list[dict[str, int]]:
    return [{"ApiKey": key, "MinVersion": lo, "MaxVersion": hi} for key, (lo, hi) in sorted(versions.items())]


def unsupported_version_body() -> dict[str, Any]:
    """The v0 body answering an ApiVersions request of a version this broker does not know."""
    return {
        "ErrorCode": ErrorCode.UNSUPPORTED_VERSION,
        "ApiKeys": [{"ApiKey": REQUEST.api_key, "MinVersion": MIN_VERSION, "MaxVersion": MAX_VERSION}],
    }


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "ErrorCode": ErrorCode.NONE,
        "ApiKeys": version_list(ctx.api_versions),
        "ThrottleTimeMs": 0,
        **feature_fields(header.api_version),
    }
