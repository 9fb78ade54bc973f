"""DescribeCluster (API key 60): the cluster id, the controller and the live brokers.

Versions 0-1; flexible from 0. v1 adds ``EndpointType`` (1 = brokers; pylog has no separate controller
endpoints). Definitions mirror Kafka's DescribeClusterRequest.json / DescribeClusterResponse.json. Immutable;
thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "ENDPOINT_BROKERS", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.DESCRIBE_CLUSTER
ENDPOINT_BROKERS = 1
_NO_OPERATIONS = -(2**31)

REQUEST = Message(
    "DescribeClusterRequest",
    api_key=API_KEY,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("IncludeClusterAuthorizedOperations", "bool", "0+"),
        Field("EndpointType", "int8", "1+", default=ENDPOINT_BROKERS),
    ],
)

RESPONSE = Message(
    "DescribeClusterResponse",
    api_key=API_KEY,
    versions="0-1",
    flexible="0+",
    fields=[
        Field("ThrottleTimeMs", "int32", "0+"),
        Field("ErrorCode", "int16", "0+"),
        Field("ErrorMessage", "string", "0+", nullable="0+", default=None),
        Field("EndpointType", "int8", "1+", default=ENDPOINT_BROKERS),
        Field("ClusterId", "string", "0+"),
        Field("ControllerId", "int32", "0+", default=-1),
        Field(
            "Brokers",
            "[]DescribeClusterBroker",
            "0+",
            fields=[
                Field("BrokerId", "int32", "0+"),
                Field("Host", "string", "0+"),
                Field("Port", "int32", "0+"),
                Field("Rack", "string", "0+", nullable="0+", default=None),
            ],
        ),
        Field("ClusterAuthorizedOperations", "int32", "0+", default=_NO_OPERATIONS),
    ],
)
