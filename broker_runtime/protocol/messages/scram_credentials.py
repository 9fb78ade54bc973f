"""DescribeUserScramCredentials (API key 50) and AlterUserScramCredentials (51): SCRAM users over the wire.

Version 0 each, flexible from 0. A mechanism travels as Kafka's ``ScramMechanism`` type byte
(:data:`MECHANISM_TYPES`: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512; 0 and any other value are UNKNOWN). An upsertion
carries what the client derived from the password -- a salt it chose and ``SaltedPassword`` = Hi(password,
salt, iterations) -- never the password; a describe answers each mechanism with its iteration count only.
Definitions mirror Kafka's DescribeUserScramCredentialsRequest.json / DescribeUserScramCredentialsResponse.json
/ AlterUserScramCredentialsRequest.json / AlterUserScramCredentialsResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "ALTER_REQUEST",
    "ALTER_RESPONSE",
    "DESCRIBE_REQUEST",
    "DESCRIBE_RESPONSE",
    "MECHANISM_NAMES",
    "MECHANISM_TYPES",
]

#: Kafka's ``org.apache.kafka.clients.admin.ScramMechanism`` type bytes.
MECHANISM_TYPES = {"SCRAM-SHA-256": 1, "SCRAM-SHA-512": 2}
MECHANISM_NAMES = {code: name for name, code in MECHANISM_TYPES.items()}

DESCRIBE_REQUEST = Message(
    "DescribeUserScramCredentialsRequest",
    api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    versions="0",
    flexible="0+",
    fields=[
        Field(
            "Users",
            "[]UserName",
            "0+",
            nullable="0+",
            default=None,
            fields=[Field("Name", "string", "0+")],
        )
    ],
)

DESCRIBE_RESPONSE = Message(
    "DescribeUserScramCredentialsResponse",
    api_key=ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
    versions="0",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field(
            "Results",
            "[]DescribeUserScramCredentialsResult",
            "0+",
            fields=[
                Field("User", "string", "0+"),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                Field(
                    "CredentialInfos",
                    "[]CredentialInfo",
                    "0+",
                    fields=[Field("Mechanism", "int8", "0+"), Field("Iterations", "int32", "0+")],
                ),
            ],
        ),
    ],
)

ALTER_REQUEST = Message(
    "AlterUserScramCredentialsRequest",
    api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    versions="0",
    flexible="0+",
    fields=[
        Field(
            "Deletions",
            "[]ScramCredentialDeletion",
            "0+",
            fields=[Field("Name", "string", "0+"), Field("Mechanism", "int8", "0+")],
        ),
        Field(
            "Upsertions",
            "[]ScramCredentialUpsertion",
            "0+",
            fields=[
                Field("Name", "string", "0+"),
                Field("Mechanism", "int8", "0+"),
                Field("Iterations", "int32", "0+"),
                Field("Salt", "bytes", "0+"),
                Field("SaltedPassword", "bytes", "0+"),
            ],
        ),
    ],
)

ALTER_RESPONSE = Message(
    "AlterUserScramCredentialsResponse",
    api_key=ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    versions="0",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Results",
            "[]AlterUserScramCredentialsResult",
            "0+",
            fields=[
                Field("User", "string", "0+"),
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            ],
        ),
    ],
)
