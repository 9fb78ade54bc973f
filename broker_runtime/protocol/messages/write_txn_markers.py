"""WriteTxnMarkers (API key 27): a transaction coordinator asks a partition leader to append COMMIT/ABORT markers.

Versions 1-2 (v0 was removed in Kafka 4.0), flexible. ``TransactionResult`` true = COMMIT, false = ABORT;
``CoordinatorEpoch`` is the leader epoch of the coordinator's ``__transaction_state`` partition; v2 adds
``TransactionVersion`` (KIP-1228). Broker to broker only. Definitions mirror Kafka's
WriteTxnMarkersRequest.json / WriteTxnMarkersResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.WRITE_TXN_MARKERS

REQUEST = Message(
    "WriteTxnMarkersRequest",
    api_key=API_KEY,
    versions="1-2",
    flexible="1+",
    fields=[
        Field(
            "Markers",
            "[]WritableTxnMarker",
            "0+",
            fields=[
                Field("ProducerId", "int64", "0+"),
                Field("ProducerEpoch", "int16", "0+"),
                Field("TransactionResult", "bool", "0+"),
                Field(
                    "Topics",
                    "[]WritableTxnMarkerTopic",
                    "0+",
                    fields=[
                        Field("Name", "string", "0+"),
                        Field("PartitionIndexes", "[]int32", "0+"),
                    ],
                ),
                Field("CoordinatorEpoch", "int32", "0+"),
                Field("TransactionVersion", "int8", "2+", default=0),
            ],
        )
    ],
)

RESPONSE = Message(
    "WriteTxnMarkersResponse",
    api_key=API_KEY,
    versions="1-2",
    flexible="1+",
    fields=[
        Field(
            "Markers",
            "[]WritableTxnMarkerResult",
            "0+",
            fields=[
                Field("ProducerId", "int64", "0+"),
                Field(
                    "Topics",
                    "[]WritableTxnMarkerTopicResult",
                    "0+",
                    fields=[
                        Field("Name", "string", "0+"),
                        Field(
                            "Partitions",
                            "[]WritableTxnMarkerPartitionResult",
                            "0+",
                            fields=[
                                Field("PartitionIndex", "int32", "0+"),
                                Field("ErrorCode", "int16", "0+"),
                            ],
                        ),
                    ],
                ),
            ],
        )
    ],
)
