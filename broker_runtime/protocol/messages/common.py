"""Named values of request fields that several APIs share (Kafka's ``IsolationLevel`` and the
``CONSUMER_REPLICA_ID`` of ``FetchRequest``/``ListOffsetsRequest``).

``ReplicaId`` (Fetch up to v14, ListOffsets): the node id of a follower replica fetching for replication, or
:data:`CONSUMER_REPLICA_ID` (-1) for an ordinary client. ``IsolationLevel`` (Fetch v4+, ListOffsets v2+): int8,
:attr:`IsolationLevel.READ_UNCOMMITTED` (0) reads up to the high watermark, :attr:`IsolationLevel.READ_COMMITTED`
(1) up to the last stable offset. Immutable; thread-safe.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["CONSUMER_REPLICA_ID", "IsolationLevel"]

#: ``ReplicaId`` of a request sent by a consumer (or any client that is not a follower replica).
CONSUMER_REPLICA_ID = -1


class IsolationLevel(IntEnum):
    """The int8 ``IsolationLevel`` of Fetch and ListOffsets requests (Kafka's numbers)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1
