"""The API versions pylog advertises to match Apache Kafka 4's (``tests/support/api_parity.py``), each answered as
Kafka answers it, over a real socket to one broker shared by the module."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker_runtime.errors import ErrorCode
from broker_runtime.protocol.messages import ApiKey
from tests.server.rawclient import RawConnection, create_topic_body
from tests.support.brokers import start_broker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    instance = start_broker(tmp_path_factory.mktemp("kafka4-versions"))
    try:
        with RawConnection(instance.bootstrap) as conn:
            created = conn.call(ApiKey.CREATE_TOPICS, 7, create_topic_body("v4-topic", 2, 1, {}))
            assert created["Topics"][0]["ErrorCode"] == 0
        yield str(instance.bootstrap)
    finally:
        instance.stop()


@pytest.fixture
def conn(shared: str) -> Iterator[RawConnection]:
    with RawConnection(shared) as c:
        yield c


def test_metadata_v13_answers_the_top_level_error_code(conn: RawConnection) -> None:
    answer: dict[str, Any] = conn.call(ApiKey.METADATA, 13, {"Topics": [{"Name": "v4-topic"}]})
    assert answer["ErrorCode"] == ErrorCode.NONE
    (topic,) = answer["Topics"]
    assert (topic["Name"], topic["ErrorCode"], len(topic["Partitions"])) == ("v4-topic", 0, 2)
    assert answer["ClusterId"] and answer["Brokers"]
