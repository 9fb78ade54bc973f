"""TxnOffsetCommit (key 28, v0-5): a transactional producer commits a group's offsets inside its transaction.

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.txn_commit_offsets` (answered once the
transactional batch is appended and flushed; the offsets become visible when the transaction's COMMIT marker lands on
the group's ``__consumer_offsets`` partition, which AddOffsetsToTxn added to the transaction). Without a group
coordinator every partition answers NOT_COORDINATOR. In a cluster a group of a ``__consumer_offsets`` partition this
node does not lead answers NOT_COORDINATOR, and the answer waits for the replication of what the request wrote
(:mod:`broker_runtime.server.groups`).

Before the group's ``__consumer_offsets`` partition gets the producer's first batch of a transaction, it is verified
with the transaction coordinator as a produce is (KIP-890 part 1, :mod:`broker_runtime.server.txn_verification`;
Kafka's group coordinator does the same): a commit arriving after its transaction ended is refused for every
partition (TRANSACTION_ABORTABLE from v4, INVALID_TXN_STATE below; the retriable verification errors as
COORDINATOR_NOT_AVAILABLE, as Kafka's group coordinator answers them), so no pending offsets are left that no
marker will ever complete. From v5 (transaction version 2: the producer sends no AddOffsetsToTxn) the same question
adds the partition to the transaction instead (:mod:`broker_runtime.server.txn_verification`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.coordinator.group import CONSUMER_OFFSETS_TOPIC, Committer
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, txn_offset_commit
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.handlers.offset_commit import commit_and_answer, refused_offsets, requested_offsets
from broker_runtime.server.replica_manager import AppendResult
from broker_runtime.server.txn_verification import verify_partition_then

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = txn_offset_commit.REQUEST
MIN_VERSION = 0
MAX_VERSION = 5
#: The first version of transaction version 2: the offsets partition is added to the transaction, not verified.
_ADD_SINCE = 5


#: The first version whose clients handle TRANSACTION_ABORTABLE (KIP-890).
_ABORTABLE_SINCE = 4
#: Kafka's group coordinator answers these (``handleOperationException``) as COORDINATOR_NOT_AVAILABLE.
_AS_NOT_AVAILABLE = frozenset({ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT})


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    wanted = requested_offsets(body)
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["TransactionalId"]):
        refused = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        refused = refused_offsets(ctx, body["GroupId"], wanted)

    def commit(verification: AppendResult | None) -> Any:
        final = refused
        if verification is not None:
            code = verification.error
            final = {
                **dict.fromkeys(
                    wanted, ErrorCode.COORDINATOR_NOT_AVAILABLE if code in _AS_NOT_AVAILABLE else code
                ),
                **refused,
            }
        return commit_and_answer(
            ctx,
            body,
            final,
            lambda coordinator, offsets: coordinator.txn_commit_offsets(
                body["GroupId"],
                (body["ProducerId"], body["ProducerEpoch"]),
                Committer(body["GenerationId"], body["MemberId"], body["GroupInstanceId"]),
                offsets,
            ),
        )

    if not wanted or len(refused) == len(wanted):
        return commit(None)
    offsets_partition = (CONSUMER_OFFSETS_TOPIC, ctx.group_coordinator.partition_for(body["GroupId"]))
    return verify_partition_then(
        ctx,
        body["TransactionalId"],
        body["ProducerId"],
        body["ProducerEpoch"],
        offsets_partition,
        header.api_version >= _ABORTABLE_SINCE,
        commit,
        add=header.api_version >= _ADD_SINCE,
    )
