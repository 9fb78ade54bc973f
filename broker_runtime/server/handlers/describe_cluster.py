"""DescribeCluster (key 60, v0-1): the cluster id, the controller and the unfenced brokers of the metadata.

``EndpointType`` 2 (controllers) answers UNSUPPORTED_ENDPOINT_TYPE (pylog's controller runs inside a broker and
has no endpoint of its own). Authorized operations are not tracked (Kafka's "not requested" value).

Authorization: none, as on Kafka's broker (``AuthHelper.computeDescribeClusterResponse`` checks DESCRIBE on the
cluster only to fill ``ClusterAuthorizedOperations``): the brokers and the controller are what Metadata answers any
authenticated client too.
"""

from __future__ import annotations

from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, describe_cluster
from broker_runtime.server.context import BrokerContext

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = describe_cluster.REQUEST
MIN_VERSION = 0
MAX_VERSION = 1
_UNSUPPORTED_ENDPOINT_TYPE = 119


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> dict[str, Any]:
    ctx.refresh_cluster()
    view = ctx.cluster.view
    out: dict[str, Any] = {
        "ThrottleTimeMs": 0,
        "ErrorCode": ErrorCode.NONE,
        "ErrorMessage": None,
        "EndpointType": describe_cluster.ENDPOINT_BROKERS,
        "ClusterId": ctx.config.cluster_id,
        "ControllerId": view.controller_id,
        "Brokers": [
            {"BrokerId": b.node_id, "Host": b.host, "Port": b.port, "Rack": None}
            for b in sorted(view.brokers.values(), key=lambda b: b.node_id)
            if not b.fenced
        ],
    }
    if body["EndpointType"] != describe_cluster.ENDPOINT_BROKERS:
        out.update(
            ErrorCode=_UNSUPPORTED_ENDPOINT_TYPE,
            ErrorMessage="pylog brokers describe brokers only (EndpointType 1)",
            Brokers=[],
        )
    return out
