"""TxnOffsetCommit (key 28, v0-4): a transactional producer commits a group's offsets inside its transaction.

Thin: see :meth:`~broker_runtime.coordinator.group.GroupCoordinator.txn_commit_offsets` (answered once the
transactional batch is appended and flushed; the offsets become visible when the transaction's COMMIT marker lands on
the group's ``__consumer_offsets`` partition, which AddOffsetsToTxn added to the transaction). Without a group
coordinator every partition answers NOT_COORDINATOR. In a cluster a group of a ``__consumer_offsets`` partition this
node does not lead answers NOT_COORDINATOR, and the answer waits for the replication of what the request wrote
(:mod:`broker_runtime.server.groups`).
"""

from __future__ import annotations

from typing import Any

from broker_runtime.coordinator.group import Committer
from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, txn_offset_commit
from broker_runtime.security.acl import AclOperation, ResourceType
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.handlers.offset_commit import commit_and_answer, refused_offsets, requested_offsets

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

REQUEST = txn_offset_commit.REQUEST
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    wanted = requested_offsets(body)
    if not ctx.authorized(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["TransactionalId"]):
        refused = dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        refused = refused_offsets(ctx, body["GroupId"], wanted)
    return commit_and_answer(
        ctx,
        body,
        refused,
        lambda coordinator, offsets: coordinator.txn_commit_offsets(
            body["GroupId"],
            (body["ProducerId"], body["ProducerEpoch"]),
            Committer(body["GenerationId"], body["MemberId"], body["GroupInstanceId"]),
            offsets,
        ),
    )
