"""AddOffsetsToTxn (key 25, v0-3): a transactional producer is about to commit a group's offsets.

Decodes, asks the transaction coordinator (:meth:`~broker_runtime.coordinator.transaction.
TransactionCoordinator.add_offsets`), encodes its error. There is no group coordinator yet: the answer checks
the producer and opens the transaction, but no ``__consumer_offsets`` partition joins it, and the
TxnOffsetCommit that would follow is not served (``send_offsets_to_transaction`` cannot complete).
"""

from __future__ import annotations

import logging
from typing import Any

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import RequestHeader, add_offsets_to_txn
from broker_runtime.server.context import BrokerContext
from broker_runtime.server.transactions import answer_after_state_write

__all__ = ["MAX_VERSION", "MIN_VERSION", "REQUEST", "handle"]

_log = logging.getLogger(__name__)

REQUEST = add_offsets_to_txn.REQUEST
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx: BrokerContext, header: RequestHeader, body: dict[str, Any]) -> Any:
    coordinator = ctx.txn_coordinator
    if coordinator is None:
        return {"ThrottleTimeMs": 0, "ErrorCode": ErrorCode.COORDINATOR_NOT_AVAILABLE}
    coordinator.take_appended()  # only this request's state writes are waited for
    code = coordinator.add_offsets(
        body["TransactionalId"], body["ProducerId"], body["ProducerEpoch"], body["GroupId"]
    )
    if code == ErrorCode.NONE:
        _log.warning(
            "AddOffsetsToTxn from client %r for group %r: there is no group coordinator, so the offsets of this "
            "transaction cannot be committed with it",
            header.client_id,
            body["GroupId"],
        )
    return answer_after_state_write(ctx, lambda failed: {"ThrottleTimeMs": 0, "ErrorCode": failed or code})
