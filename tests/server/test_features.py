"""The feature levels of ApiVersions (``broker_runtime/server/features.py``) as Kafka answers them: features whose
minimum is 0 only from ApiVersions v4 (KAFKA-17011), finalized levels above 0 only, an epoch a client adopts, the
real table's answer over a socket. Unit tier except the last test (the shared ``bootstrap`` broker)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker_runtime.protocol.messages import ApiKey, RequestHeader, decode_response, encode_response
from broker_runtime.server import features
from broker_runtime.server.features import Feature, feature_fields
from broker_runtime.server.handlers import api_versions, supported_versions
from tests.server.rawclient import RawConnection

#: A table of the shapes Kafka 4.4 answers: a range from 0 finalized above it (transaction.version), one from 0
#: finalized at 0 (kraft.version of a static quorum), one starting above 0 (metadata.version).
TABLE = {
    "transaction.version": Feature(0, 2, 2, "test"),
    "kraft.version": Feature(0, 1, 0, "test"),
    "metadata.version": Feature(7, 33, 33, "test"),
}


def _names(entries: list[dict[str, object]]) -> list[object]:
    return [e["Name"] for e in entries]


def test_a_v4_request_gets_every_supported_feature_a_v3_request_none_starting_at_0() -> None:
    v4 = feature_fields(4, TABLE)
    assert v4["SupportedFeatures"] == [
        {"Name": "kraft.version", "MinVersion": 0, "MaxVersion": 1},
        {"Name": "metadata.version", "MinVersion": 7, "MaxVersion": 33},
        {"Name": "transaction.version", "MinVersion": 0, "MaxVersion": 2},
    ]
    # Kafka's ApiVersionsResponse.Builder with alterFeatureLevel0 (request below v4): clients before v4 refuse 0
    assert _names(feature_fields(3, TABLE)["SupportedFeatures"]) == ["metadata.version"]
    assert feature_fields(2, TABLE) == {}  # v0-2 have no feature fields


def test_only_levels_above_0_are_finalized_and_the_epoch_grows_with_them() -> None:
    for version in (3, 4):
        answer = feature_fields(version, TABLE)
        assert answer["FinalizedFeatures"] == [
            {"Name": "metadata.version", "MaxVersionLevel": 33, "MinVersionLevel": 33},
            {"Name": "transaction.version", "MaxVersionLevel": 2, "MinVersionLevel": 2},
        ]
        assert answer["FinalizedFeaturesEpoch"] == 35
    lower = {**TABLE, "transaction.version": Feature(0, 1, 1, "test")}
    # a release finalizing a higher level answers a higher epoch: a client adopts the levels of the higher one
    assert (
        feature_fields(4, lower)["FinalizedFeaturesEpoch"]
        < feature_fields(4, TABLE)["FinalizedFeaturesEpoch"]
    )
    # the Java client ignores an epoch of -1 (ApiVersions.update): the answer never carries it
    assert feature_fields(4, {})["FinalizedFeaturesEpoch"] == 0


@pytest.mark.parametrize("version", [3, 4])
def test_the_handler_answers_the_declared_table_through_the_codec(version: int) -> None:
    header = RequestHeader(ApiKey.API_VERSIONS, version, 1, "features")
    ctx = SimpleNamespace(api_versions=supported_versions())
    body = api_versions.handle(ctx, header, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"})  # type: ignore[arg-type]
    _, decoded = decode_response(
        ApiKey.API_VERSIONS, version, encode_response(ApiKey.API_VERSIONS, version, 1, body)[4:]
    )
    expected = feature_fields(version)
    assert decoded["SupportedFeatures"] == expected["SupportedFeatures"]
    assert decoded["FinalizedFeatures"] == expected["FinalizedFeatures"]
    assert decoded["FinalizedFeaturesEpoch"] == features.FINALIZED_FEATURES_EPOCH >= 0


def test_a_broker_answers_its_features_over_a_socket(bootstrap: str) -> None:
    with RawConnection(bootstrap) as conn:
        for version in (3, 4):
            resp = conn.call(
                ApiKey.API_VERSIONS, version, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
            )
            assert resp["ErrorCode"] == 0
            expected = feature_fields(version)
            assert resp["SupportedFeatures"] == expected["SupportedFeatures"]
            assert resp["FinalizedFeatures"] == expected["FinalizedFeatures"]
            assert resp["FinalizedFeaturesEpoch"] == features.FINALIZED_FEATURES_EPOCH
