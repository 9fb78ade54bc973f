"""The feature levels this broker answers in ApiVersions (KIP-584): Kafka's SupportedFeatures, FinalizedFeatures and
FinalizedFeaturesEpoch.

One home: :data:`FEATURES` declares, per feature name (Kafka's names), the range of levels this software
implements and the level finalized in a pylog cluster. pylog has no UpdateFeatures and no metadata log: the
finalized level of every feature is fixed by the software, the same on every node of a cluster running the same
release. A feature is listed only when pylog implements a level above 0 of it (level 0 of a feature is its
absence: Kafka's old behaviour); the README's "API versions against Apache Kafka" section says, per feature, what
pylog answers and why (rendered from ``tests/support/api_parity.py``).

The answer follows Kafka's ``ApiVersionsResponse.Builder`` and ``KafkaApis.handleApiVersionsRequest``:

* SupportedFeatures: ``name``, ``MinVersion``, ``MaxVersion`` of each feature. A request below ApiVersions v4 gets
  no feature whose minimum is 0 (KAFKA-17011: clients before v4 refuse a range starting at 0).
* FinalizedFeatures: ``name``, ``MinVersionLevel`` = ``MaxVersionLevel`` = the finalized level, for features
  finalized above 0 only (Kafka omits level 0, e.g. ``kraft.version`` of a static quorum).
* FinalizedFeaturesEpoch: Kafka's is the offset of the metadata record that last changed a level; a client takes
  the finalized levels of the answer with the highest epoch it has seen (the Java client ignores an epoch of -1).
  pylog's epoch is the sum of the finalized levels (:data:`FINALIZED_FEATURES_EPOCH`): levels only grow from one
  pylog release to the next, so a release that finalizes a higher level also answers a higher epoch, and a client
  connected across a rolling upgrade adopts the new levels; 0 while nothing is finalized.

Pure data and functions; immutable after import; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FEATURES", "FINALIZED_FEATURES_EPOCH", "Feature", "feature_fields", "finalized", "supported"]


@dataclass(frozen=True)
class Feature:
    """One feature: the levels this software implements (``min_level``-``max_level``) and its finalized level."""

    min_level: int
    max_level: int
    finalized_level: int
    #: What the finalized level means in pylog (the docstring of the table; the README says it per feature).
    what: str


#: Feature name -> its levels. Not listed: ``metadata.version`` and ``kraft.version``, which describe KRaft's metadata
#: log that pylog does not have (the README's API parity section says why per feature).
FEATURES: dict[str, Feature] = {
    # Kafka's GroupVersion.GV_1: the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat and
    # ConsumerGroupDescribe, its groups' records in __consumer_offsets), finalized as a Kafka 4 cluster does.
    "group.version": Feature(
        0,
        1,
        1,
        "the consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe are served and "
        "consumer groups written to __consumer_offsets",
    ),
    "transaction.version": Feature(
        min_level=0,
        max_level=2,
        finalized_level=2,
        what="transactions v2 (KIP-890 part 2), as Kafka 4 finalizes by default: a client that sees level 2 "
        "sends no AddPartitionsToTxn / AddOffsetsToTxn (Produce v12 and TxnOffsetCommit v5 add their partition "
        "through the partition's leader) and EndTxn v5, which bumps the producer epoch on every transaction; the "
        "transaction log is written at value version 1 (level 1). Clients below it keep transactions v1 on the "
        "same broker.",
    ),
}


def _epoch(features: dict[str, Feature]) -> int:
    return sum(f.finalized_level for f in features.values())


#: The FinalizedFeaturesEpoch of this release (see the module docstring).
FINALIZED_FEATURES_EPOCH = _epoch(FEATURES)


def supported(features: dict[str, Feature], request_version: int) -> list[dict[str, Any]]:
    """SupportedFeatures for an ApiVersions request of ``request_version``."""
    return [
        {"Name": name, "MinVersion": f.min_level, "MaxVersion": f.max_level}
        for name, f in sorted(features.items())
        if request_version >= 4 or f.min_level > 0
    ]


def finalized(features: dict[str, Feature]) -> list[dict[str, Any]]:
    """FinalizedFeatures: the features finalized above level 0."""
    return [
        {"Name": name, "MaxVersionLevel": f.finalized_level, "MinVersionLevel": f.finalized_level}
        for name, f in sorted(features.items())
        if f.finalized_level > 0
    ]


def feature_fields(request_version: int, features: dict[str, Feature] | None = None) -> dict[str, Any]:
    """The feature fields of an ApiVersions answer (tagged fields of v3+; v0-2 have none)."""
    if request_version < 3:
        return {}
    table = FEATURES if features is None else features
    return {
        "SupportedFeatures": supported(table, request_version),
        "FinalizedFeaturesEpoch": _epoch(table),
        "FinalizedFeatures": finalized(table),
    }
