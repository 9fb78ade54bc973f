"""The protocol fuzzer (``jobs/fuzz.py``) against a real broker process: afterwards the broker still answers
ApiVersions, Metadata, Produce and Fetch correctly, the data produced before is unchanged, no request hit an
internal error, and every batch stored anywhere on disk decodes fully (CRC, every record).

The suite's run is bounded in time (``FUZZ_SECONDS``); the ``soak`` form (``bash jobs/dev.sh soak``) fuzzes for
``SOAK_SECONDS``, and ``python -m jobs.bench validation`` runs the benchmark's long form.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from broker_runtime.launch import broker_process, create_topic
from broker_runtime.launch.layout import broker_log_dir
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.protocol.record_codec.decode import decode_batches
from jobs.fuzz import fuzz, valid_batch
from tests.server.rawclient import RawConnection, fetch_body, produce_body

pytestmark = pytest.mark.timeout(180)

#: The fuzzing part of the test, in seconds (frames as many as fit, at most FUZZ_FRAMES).
FUZZ_SECONDS = 8.0
FUZZ_FRAMES = 100_000
#: The soak form: as long as the frames last, at most this many seconds.
SOAK_SECONDS, SOAK_FRAMES = 120.0, 2_000_000
OVERRIDES = {"auto.create.topics.enable": "false", "group.initial.rebalance.delay.ms": "0"}


def _fetch_all(conn: RawConnection, topic: str) -> Any:
    resp = conn.call(ApiKey.FETCH, 11, fetch_body(topic, 0, 0))
    part = resp["Responses"][0]["Partitions"][0]
    assert part["ErrorCode"] == 0, part
    return decode_batches(bytes(part["Records"]))


def _produce(conn: RawConnection, topic: str, batch: bytes) -> dict[str, Any]:
    resp = conn.call(ApiKey.PRODUCE, 9, produce_body(topic, 0, batch, acks=-1))
    part: dict[str, Any] = resp["Responses"][0]["PartitionResponses"][0]
    return part


@pytest.mark.parametrize(
    ("seconds", "frames"),
    [
        pytest.param(FUZZ_SECONDS, FUZZ_FRAMES, id="bounded"),
        pytest.param(
            SOAK_SECONDS, SOAK_FRAMES, id="soak", marks=[pytest.mark.soak, pytest.mark.timeout(600)]
        ),
    ],
)
def test_broker_survives_the_fuzzer_and_stores_only_decodable_batches(
    tmp_path: Path, seconds: float, frames: int
) -> None:
    data_dir = tmp_path / "broker"
    with broker_process(data_dir, overrides=OVERRIDES) as address:
        create_topic(address, "fuzz", partitions=1)
        create_topic(address, "kept", partitions=1)
        with RawConnection(address) as conn:
            for i in range(20):
                assert _produce(conn, "kept", valid_batch(5, value=b"kept-%d" % i))["ErrorCode"] == 0
            before = _fetch_all(conn, "kept")
        assert before.num_rows == 100

        started = time.monotonic()
        stats = fuzz(address, frames, seed=20261123, topic="fuzz", deadline_s=seconds)
        elapsed = time.monotonic() - started
        print(
            f"fuzz: {stats.sent} frames in {elapsed:.1f} s, {stats.consumed} consumed by the broker, "
            f"{stats.answered} answered, {stats.closed_by_broker}/{stats.connections} connections closed by it"
        )
        assert stats.consumed >= 1000, stats
        assert {int(k) for k in stats.per_api} >= {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 22, 32}

        with RawConnection(address) as conn:
            versions = conn.call(
                ApiKey.API_VERSIONS, 3, {"ClientSoftwareName": "t", "ClientSoftwareVersion": "1"}
            )
            assert versions["ErrorCode"] == 0 and versions["ApiKeys"]
            meta = conn.call(
                ApiKey.METADATA,
                12,
                {
                    "Topics": [{"TopicId": None, "Name": "kept"}],
                    "AllowAutoTopicCreation": False,
                    "IncludeTopicAuthorizedOperations": False,
                },
            )
            assert meta["Topics"][0]["ErrorCode"] == 0 and len(meta["Topics"][0]["Partitions"]) == 1
            answer = _produce(conn, "kept", valid_batch(3, value=b"after"))
            assert (answer["ErrorCode"], answer["BaseOffset"]) == (0, 100)
            after = _fetch_all(conn, "kept")
        assert after.slice(0, 100).equals(before), "records produced before the fuzzer changed"
        assert after.num_rows == 103

    log = (data_dir / "broker.log").read_text(encoding="utf-8", errors="replace")
    assert "unexpected error while handling a request" not in log, log[log.find("unexpected error") - 2000 :][
        :6000
    ]
    assert "Traceback" not in log, log[log.find("Traceback") - 2000 :][:6000]

    batches = 0
    for segment in sorted(broker_log_dir(data_dir).glob("*/*.log")):
        data = segment.read_bytes()
        if data:
            decoded = decode_batches(data, include_control=True, allow_partial_tail=False)
            batches += 1
            assert decoded.num_rows >= 0
    assert batches >= 2
