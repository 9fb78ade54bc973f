"""ApiVersions (API key 18): the versions of every API a broker speaks.

Versions 0-4; flexible from 3. Responses always use response header v0 (even flexible ones), so a client that
does not yet know the broker's versions can read the answer. A request of a version the broker does not know
is answered with a version-0 body carrying UNSUPPORTED_VERSION and the broker's own ApiVersions range.
Definitions mirror Kafka's ApiVersionsRequest.json / ApiVersionsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.API_VERSIONS

REQUEST = Message(
    "ApiVersionsRequest",
    api_key=API_KEY,
    versions="0-4",
    flexible="3+",
    fields=[
        Field("ClientSoftwareName", "string", "3+"),
        Field("ClientSoftwareVersion", "string", "3+"),
    ],
)

RESPONSE = Message(
    "ApiVersionsResponse",
    api_key=API_KEY,
    versions="0-4",
    flexible="3+",
    fields=[
        Field("ErrorCode", "int16", "0+"),
        Field(
            "ApiKeys",
            "[]ApiVersion",
            "0+",
            fields=[
                Field("ApiKey", "int16", "0+"),
                Field("MinVersion", "int16", "0+"),
                Field("MaxVersion", "int16", "0+"),
            ],
        ),
        Field("ThrottleTimeMs", "int32", "1+"),
        Field(
            "SupportedFeatures",
            "[]SupportedFeatureKey",
            "3+",
            tag=0,
            tagged="3+",
            fields=[
                Field("Name", "string", "3+"),
                Field("MinVersion", "int16", "3+"),
                Field("MaxVersion", "int16", "3+"),
            ],
        ),
        Field("FinalizedFeaturesEpoch", "int64", "3+", tag=1, tagged="3+", default=-1),
        Field(
            "FinalizedFeatures",
            "[]FinalizedFeatureKey",
            "3+",
            tag=2,
            tagged="3+",
            fields=[
                Field("Name", "string", "3+"),
                Field("MaxVersionLevel", "int16", "3+"),
                Field("MinVersionLevel", "int16", "3+"),
            ],
        ),
        Field("ZkMigrationReady", "bool", "3+", tag=3, tagged="3+", default=False),
    ],
)
