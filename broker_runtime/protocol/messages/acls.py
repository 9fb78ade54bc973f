"""DescribeAcls (API key 29), CreateAcls (30), DeleteAcls (31): read, add and remove access control entries.

Versions 0-3 each; flexible from 2. v1 adds the resource pattern type (v0 means LITERAL, Kafka's default 3);
v3 adds the USER resource type (pylog's authorizer refuses USER bindings: it has no user resources). Enum
values are Kafka's (``ResourceType``, ``PatternType``, ``AclOperation``, ``AclPermissionType``; see
:mod:`broker_runtime.security.acl`). Definitions mirror Kafka's DescribeAclsRequest.json /
CreateAclsRequest.json / DeleteAclsRequest.json and their responses. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = [
    "CREATE_REQUEST",
    "CREATE_RESPONSE",
    "DELETE_REQUEST",
    "DELETE_RESPONSE",
    "DESCRIBE_REQUEST",
    "DESCRIBE_RESPONSE",
]

_LITERAL = 3


def _filter_fields() -> list[Field]:
    return [
        Field("ResourceTypeFilter", "int8", "0+"),
        Field("ResourceNameFilter", "string", "0+", nullable="0+", default=None),
        Field("PatternTypeFilter", "int8", "1+", default=_LITERAL),
        Field("PrincipalFilter", "string", "0+", nullable="0+", default=None),
        Field("HostFilter", "string", "0+", nullable="0+", default=None),
        Field("Operation", "int8", "0+"),
        Field("PermissionType", "int8", "0+"),
    ]


DESCRIBE_REQUEST = Message(
    "DescribeAclsRequest",
    api_key=ApiKey.DESCRIBE_ACLS,
    versions="0-3",
    flexible="2+",
    fields=_filter_fields(),
)

DESCRIBE_RESPONSE = Message(
    "DescribeAclsResponse",
    api_key=ApiKey.DESCRIBE_ACLS,
    versions="0-3",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field(
            "Resources",
            "[]DescribeAclsResource",
            "0+",
            fields=[
                Field("ResourceType", "int8", "0+"),
                Field("ResourceName", "string", "0+"),
                Field("PatternType", "int8", "1+", default=_LITERAL),
                Field(
                    "Acls",
                    "[]AclDescription",
                    "0+",
                    fields=[
                        Field("Principal", "string", "0+"),
                        Field("Host", "string", "0+"),
                        Field("Operation", "int8", "0+"),
                        Field("PermissionType", "int8", "0+"),
                    ],
                ),
            ],
        ),
    ],
)

CREATE_REQUEST = Message(
    "CreateAclsRequest",
    api_key=ApiKey.CREATE_ACLS,
    versions="0-3",
    flexible="2+",
    fields=[
        Field(
            "Creations",
            "[]AclCreation",
            "0+",
            fields=[
                Field("ResourceType", "int8", "0+"),
                Field("ResourceName", "string", "0+"),
                Field("ResourcePatternType", "int8", "1+", default=_LITERAL),
                Field("Principal", "string", "0+"),
                Field("Host", "string", "0+"),
                Field("Operation", "int8", "0+"),
                Field("PermissionType", "int8", "0+"),
            ],
        ),
    ],
)

CREATE_RESPONSE = Message(
    "CreateAclsResponse",
    api_key=ApiKey.CREATE_ACLS,
    versions="0-3",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "Results",
            "[]AclCreationResult",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
            ],
        ),
    ],
)

DELETE_REQUEST = Message(
    "DeleteAclsRequest",
    api_key=ApiKey.DELETE_ACLS,
    versions="0-3",
    flexible="2+",
    fields=[Field("Filters", "[]DeleteAclsFilter", "0+", fields=_filter_fields())],
)

DELETE_RESPONSE = Message(
    "DeleteAclsResponse",
    api_key=ApiKey.DELETE_ACLS,
    versions="0-3",
    flexible="2+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field(
            "FilterResults",
            "[]DeleteAclsFilterResult",
            "0+",
            fields=[
                Field("ErrorCode", "int16", "0+"),
                Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                Field(
                    "MatchingAcls",
                    "[]DeleteAclsMatchingAcl",
                    "0+",
                    fields=[
                        Field("ErrorCode", "int16", "0+"),
                        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
                        Field("ResourceType", "int8", "0+"),
                        Field("ResourceName", "string", "0+"),
                        Field("PatternType", "int8", "1+", default=_LITERAL),
                        Field("Principal", "string", "0+"),
                        Field("Host", "string", "0+"),
                        Field("Operation", "int8", "0+"),
                        Field("PermissionType", "int8", "0+"),
                    ],
                ),
            ],
        ),
    ],
)
