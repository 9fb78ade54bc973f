"""pylog's ApiVersions answer against the recorded answer of the pinned Apache Kafka broker.

Every API key Kafka answers that pylog does not, every version range that differs and every feature level that
differs must be declared, with its reason, in ``tests/support/api_parity.py``; the README's section is rendered
from that table. A new gap, a closed one, or a re-recording after the pin moved fails here until the table (and
with it the README: ``python -m tests.support.api_parity``) says so. pylog's answer is the ApiVersions handler's
body as it crosses the wire (encoded and decoded by the codec at the newest version both sides speak); the
broker tier checks the same ranges over a socket (``tests/server/test_requests.py``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from broker_runtime.protocol.messages import ApiKey, RequestHeader, decode_response, encode_response
from broker_runtime.server.handlers import api_versions, supported_versions
from tests.support import api_parity
from tests.support.apache_kafka import kafka_version

RECORD = "python -m tests.support.apache_kafka.record_api_versions"
RENDER = "python -m tests.support.api_parity"


@pytest.fixture(scope="module")
def kafka() -> dict[str, Any]:
    return api_parity.recording()


def pylog_answer(version: int = 4) -> dict[str, Any]:
    header = RequestHeader(ApiKey.API_VERSIONS, version, 1, "parity")
    ctx = SimpleNamespace(api_versions=supported_versions())
    body = api_versions.handle(ctx, header, {"ClientSoftwareName": "parity", "ClientSoftwareVersion": "1"})  # type: ignore[arg-type]
    _, decoded = decode_response(
        ApiKey.API_VERSIONS, version, encode_response(ApiKey.API_VERSIONS, version, 1, body)[4:]
    )
    return decoded


def test_the_recording_is_of_the_pinned_release(kafka: dict[str, Any]) -> None:
    assert kafka["kafka_version"] == kafka_version(), (
        f"the recorded ApiVersions answer is of Apache Kafka {kafka['kafka_version']}, the pin is "
        f"{kafka_version()}: run `{RECORD}`, then update tests/support/api_parity.py and `{RENDER}`"
    )


def test_every_api_difference_is_declared_with_its_reason(kafka: dict[str, Any]) -> None:
    answer = pylog_answer()
    assert answer["ErrorCode"] == 0
    pylog = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"]) for k in answer["ApiKeys"]}
    found = api_parity.api_diff(kafka, pylog)
    declared = {key: (d.kafka, d.pylog) for key, d in api_parity.API_DIFFERENCES.items()}
    undeclared = {k: v for k, v in found.items() if declared.get(k) != v}
    stale = {k: v for k, v in declared.items() if found.get(k) != v}
    assert not undeclared and not stale, (
        "ApiVersions differs from Apache Kafka's other than declared in tests/support/api_parity.py:\n"
        f"  found, (kafka, pylog) not declared so: {undeclared}\n"
        f"  declared, no longer so: {stale}\n"
        f"close the gap or declare it with its reason, then `{RENDER}`"
    )
    assert all(d.why and "|" not in d.why and "\n" not in d.why for d in api_parity.API_DIFFERENCES.values())


def test_every_feature_difference_is_declared_with_its_reason(kafka: dict[str, Any]) -> None:
    answer = pylog_answer()
    supported = {f["Name"]: (f["MinVersion"], f["MaxVersion"]) for f in answer["SupportedFeatures"]}
    finalized = {f["Name"]: (f["MinVersionLevel"], f["MaxVersionLevel"]) for f in answer["FinalizedFeatures"]}
    found = api_parity.feature_diff(kafka, supported, finalized)
    declared = {name: (d.kafka, d.pylog) for name, d in api_parity.FEATURE_DIFFERENCES.items()}
    assert found == declared, (
        f"feature levels differ from Apache Kafka's other than declared in tests/support/api_parity.py: found "
        f"{found}, declared {declared}; close the gap or declare it with its reason, then `{RENDER}`"
    )
    assert all(
        d.why and "|" not in d.why and "\n" not in d.why for d in api_parity.FEATURE_DIFFERENCES.values()
    )


def test_the_readme_section_is_the_rendered_table(kafka: dict[str, Any]) -> None:
    section = api_parity.readme_section(api_parity.README.read_text())
    assert section is not None, f"README.md lost its API versions markers ({api_parity.BEGIN}): `{RENDER}`"
    assert section == api_parity.render(kafka), f"README.md's API versions section is stale: `{RENDER}`"


def test_a_new_gap_and_a_closed_one_are_both_found() -> None:
    kafka = {
        "api_keys": {
            "1": {"name": "Fetch", "min": 4, "max": 18},
            "55": {"name": "DescribeQuorum", "min": 0, "max": 2},
        }
    }
    pylog = {ApiKey.FETCH: (4, 12), ApiKey.LEADER_AND_ISR: (0, 7)}
    assert api_parity.api_diff(kafka, pylog) == {
        ApiKey.FETCH: ((4, 18), (4, 12)),  # an older range
        ApiKey.DESCRIBE_QUORUM: ((0, 2), None),  # a key pylog lacks
        ApiKey.LEADER_AND_ISR: (None, (0, 7)),  # a key Kafka no longer answers
    }
    assert api_parity.api_diff(kafka, {ApiKey.FETCH: (4, 18), ApiKey.DESCRIBE_QUORUM: (0, 2)}) == {}
