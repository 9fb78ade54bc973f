"""WriteTxnMarkers (key 27, v1): a transaction coordinator's COMMIT/ABORT markers, appended by this broker as
the leader of each named partition.

Per partition (Kafka's ``handleWriteTxnMarkersRequest``: an append with acks=-1 and origin coordinator): an
unknown partition is UNKNOWN_TOPIC_OR_PARTITION, another node's partition NOT_LEADER_OR_FOLLOWER, an ISR under
the minimum NOT_ENOUGH_REPLICAS (nothing appended); a marker whose ``CoordinatorEpoch`` is older than the one of
the producer's last marker on this partition is refused with TRANSACTION_COORDINATOR_FENCED (a coordinator that
lost its ``__transaction_state`` partition cannot end a transaction again); an older producer epoch is
INVALID_PRODUCER_EPOCH. The answer waits until every appended marker is replicated to the ISR (or
``request.timeout.ms`` passes: REQUEST_TIMED_OUT, which the coordinator retries). v2 (transaction version 2) is
not served. Authorization (Kafka's ``handleWriteTxnMarkersRequest``): ALTER or CLUSTER_ACTION on the cluster, on
every listener, else CLUSTER_AUTHORIZATION_FAILED for every partition and nothing is written. A marker replicated on a ``__consumer_offsets`` partition completes the producer's pending
transactional offsets there (:func:`~broker_runtime.server.groups.complete_offsets_txn`), as Kafka's
``onTransactionCompleted``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, write_txn_markers
from broker_runtime.protocol.records import CONTROL_ABORT, CONTROL_COMMIT
from broker_runtime.security.acl import AclOperation
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.groups import complete_offsets_txn
from broker_runtime.server.replica_manager import AppendResult
from broker_runtime.server.replicated import wait_replicated

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "TIMEOUT_MS", "handle"]

REQUEST = write_txn_markers.REQUEST
MIN_VERSION = 1
MAX_VERSION = 1

#: How long the answer waits for the markers to be replicated (Kafka uses its request.timeout.ms, 30 s).
TIMEOUT_MS = 30_000


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    markers = body["Markers"]
    # Kafka: ALTER on the cluster (an operator aborting a hanging transaction, KIP-664) or CLUSTER_ACTION (a
    # coordinator); anyone else gets CLUSTER_AUTHORIZATION_FAILED for every partition and nothing is written.
    if not (ctx.authorized_cluster(AclOperation.ALTER) or ctx.inter_broker_allowed()):
        return {
            "Markers": [
                {
                    "ProducerId": m["ProducerId"],
                    "Topics": [
                        {
                            "Name": t["Name"],
                            "Partitions": [
                                {"PartitionIndex": i, "ErrorCode": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}
                                for i in t["PartitionIndexes"]
                            ],
                        }
                        for t in m["Topics"]
                    ],
                }
                for m in markers
            ]
        }
    appended: list[dict[tuple[str, int], AppendResult]] = []
    for marker in markers:
        control = CONTROL_COMMIT if marker["TransactionResult"] else CONTROL_ABORT
        results: dict[tuple[str, int], AppendResult] = {}
        for topic in marker["Topics"]:
            for index in topic["PartitionIndexes"]:
                results[(topic["Name"], index)] = ctx.replicas.write_txn_marker(
                    topic["Name"],
                    index,
                    marker["ProducerId"],
                    marker["ProducerEpoch"],
                    marker["CoordinatorEpoch"],
                    control,
                    acks=-1,
                )
        appended.append(results)
    return asyncio.ensure_future(_answer(ctx, markers, appended))


async def _answer(
    ctx: BrokerContext, markers: list[dict[str, Any]], appended: list[dict[tuple[str, int], AppendResult]]
) -> dict[str, Any]:
    answers = []
    for marker, results in zip(markers, appended, strict=True):
        final = await wait_replicated(ctx, TIMEOUT_MS, results)
        control = CONTROL_COMMIT if marker["TransactionResult"] else CONTROL_ABORT
        complete_offsets_txn(ctx, marker["ProducerId"], control, final)
        topics: dict[str, list[dict[str, int]]] = {}
        for (topic, index), code in final.items():
            topics.setdefault(topic, []).append({"PartitionIndex": index, "ErrorCode": code})
        answers.append(
            {
                "ProducerId": marker["ProducerId"],
                "Topics": [{"Name": name, "Partitions": parts} for name, parts in topics.items()],
            }
        )
    return {"Markers": answers}
