"""Fetch (API key 1): read record batches from topic partitions (consumers and follower replicas).

Versions 0-18; flexible from 12. ``MaxBytes`` from v3,
``IsolationLevel`` and per-partition ``LastStableOffset``/``AbortedTransactions`` from v4, ``LogStartOffset``
from v5, fetch sessions (``SessionId``/``SessionEpoch``, ``ForgottenTopicsData``) from v7 (a broker without
sessions answers ``SessionId`` 0), ``CurrentLeaderEpoch`` from v9, ``RackId`` and ``PreferredReadReplica`` from
v11, ``LastFetchedEpoch`` and the tagged ``DivergingEpoch``/``CurrentLeader``/``SnapshotId`` from v12. From v13
topics are named by ``TopicId`` instead of ``Topic`` (KIP-516), in requests, forgotten topics and responses alike;
v14 is v13 (KIP-405 changed only the broker's behaviour); v15 moves ``ReplicaId`` into the tagged ``ReplicaState``
(KIP-903: a consumer leaves it at -1); v16 adds the response's tagged ``NodeEndpoints`` (KIP-951: where the
``CurrentLeader`` of a NOT_LEADER_OR_FOLLOWER partition is); v17 the tagged ``ReplicaDirectoryId`` (KIP-853); v18
the tagged per-partition ``HighWatermark`` (KIP-1166: a follower's, Long.MAX_VALUE from a consumer).
``Records`` decode as zero-copy memoryviews; on encode they may be a list of buffers (concatenated on the wire).
Definitions mirror Kafka's FetchRequest.json / FetchResponse.json. Immutable; thread-safe.
"""

from __future__ import annotations

from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.common import CONSUMER_REPLICA_ID, IsolationLevel
from broker_runtime.protocol.messages.schema import Field, Message

__all__ = ["API_KEY", "REQUEST", "RESPONSE"]

API_KEY = ApiKey.FETCH

REQUEST = Message(
    "FetchRequest",
    api_key=API_KEY,
    versions="0-18",
    flexible="12+",
    fields=[
        Field("ClusterId", "string", "12+", nullable="12+", default=None, tag=0, tagged="12+"),
        Field("ReplicaId", "int32", "0-14", default=CONSUMER_REPLICA_ID),
        Field(
            "ReplicaState",
            "ReplicaState",
            "15+",
            tag=1,
            tagged="15+",
            fields=[
                Field("ReplicaId", "int32", "15+", default=CONSUMER_REPLICA_ID),
                Field("ReplicaEpoch", "int64", "15+", default=-1),
            ],
        ),
        Field("MaxWaitMs", "int32", "0+"),
        Field("MinBytes", "int32", "0+"),
        Field("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
        Field("IsolationLevel", "int8", "4+", default=IsolationLevel.READ_UNCOMMITTED),
        Field("SessionId", "int32", "7+", default=0),
        Field("SessionEpoch", "int32", "7+", default=-1),
        Field(
            "Topics",
            "[]FetchTopic",
            "0+",
            fields=[
                Field("Topic", "string", "0-12"),
                Field("TopicId", "uuid", "13+"),
                Field(
                    "Partitions",
                    "[]FetchPartition",
                    "0+",
                    fields=[
                        Field("Partition", "int32", "0+"),
                        Field("CurrentLeaderEpoch", "int32", "9+", default=-1),
                        Field("FetchOffset", "int64", "0+"),
                        Field("LastFetchedEpoch", "int32", "12+", default=-1),
                        Field("LogStartOffset", "int64", "5+", default=-1),
                        Field("PartitionMaxBytes", "int32", "0+"),
                        Field("ReplicaDirectoryId", "uuid", "17+", tag=0, tagged="17+"),
                        Field("HighWatermark", "int64", "18+", default=2**63 - 1, tag=1, tagged="18+"),
                    ],
                ),
            ],
        ),
        Field(
            "ForgottenTopicsData",
            "[]ForgottenTopic",
            "7+",
            fields=[
                Field("Topic", "string", "7-12"),
                Field("TopicId", "uuid", "13+"),
                Field("Partitions", "[]int32", "7+"),
            ],
        ),
        Field("RackId", "string", "11+", default=""),
    ],
)

RESPONSE = Message(
    "FetchResponse",
    api_key=API_KEY,
    versions="0-18",
    flexible="12+",
    fields=[
        Field("ThrottleTimeMs", "int32", "1+"),
        Field("ErrorCode", "int16", "7+"),
        Field("SessionId", "int32", "7+", default=0),
        Field(
            "Responses",
            "[]FetchableTopicResponse",
            "0+",
            fields=[
                Field("Topic", "string", "0-12"),
                Field("TopicId", "uuid", "13+"),
                Field(
                    "Partitions",
                    "[]PartitionData",
                    "0+",
                    fields=[
                        Field("PartitionIndex", "int32", "0+"),
                        Field("ErrorCode", "int16", "0+"),
                        Field("HighWatermark", "int64", "0+"),
                        Field("LastStableOffset", "int64", "4+", default=-1),
                        Field("LogStartOffset", "int64", "5+", default=-1),
                        Field(
                            "DivergingEpoch",
                            "EpochEndOffset",
                            "12+",
                            tag=0,
                            tagged="12+",
                            fields=[
                                Field("Epoch", "int32", "12+", default=-1),
                                Field("EndOffset", "int64", "12+", default=-1),
                            ],
                        ),
                        Field(
                            "CurrentLeader",
                            "LeaderIdAndEpoch",
                            "12+",
                            tag=1,
                            tagged="12+",
                            fields=[
                                Field("LeaderId", "int32", "12+", default=-1),
                                Field("LeaderEpoch", "int32", "12+", default=-1),
                            ],
                        ),
                        Field(
                            "SnapshotId",
                            "SnapshotId",
                            "12+",
                            tag=2,
                            tagged="12+",
                            fields=[
                                Field("EndOffset", "int64", "0+", default=-1),
                                Field("Epoch", "int32", "0+", default=-1),
                            ],
                        ),
                        Field(
                            "AbortedTransactions",
                            "[]AbortedTransaction",
                            "4+",
                            nullable="4+",
                            fields=[
                                Field("ProducerId", "int64", "4+"),
                                Field("FirstOffset", "int64", "4+"),
                            ],
                        ),
                        Field("PreferredReadReplica", "int32", "11+", default=-1),
                        Field("Records", "records", "0+", nullable="0+"),
                    ],
                ),
            ],
        ),
        Field(
            "NodeEndpoints",
            "[]NodeEndpoint",
            "16+",
            tag=0,
            tagged="16+",
            fields=[
                Field("NodeId", "int32", "16+"),
                Field("Host", "string", "16+"),
                Field("Port", "int32", "16+"),
                Field("Rack", "string", "16+", nullable="16+", default=None),
            ],
        ),
    ],
)
