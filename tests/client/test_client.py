"""Tests of the Kafka client: error paths against real loopback sockets (no broker needed), then the whole
API against pylog's embedded broker. Record batches are built and read with kafka-python's record code, an
implementation independent of pylog's."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from broker_runtime.client import BrokerConnectionError, KafkaClient, NewTopic
from broker_runtime.client.connection import MAX_RESPONSE_BYTES
from broker_runtime.errors import ErrorCode, KafkaError, ProtocolError
from broker_runtime.launch import broker_process
from broker_runtime.protocol.messages import ApiKey, decode_request, encode_response

# --- error paths without a broker -----------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_connection_refused_names_the_address() -> None:
    port = _closed_port()
    with (
        KafkaClient(f"127.0.0.1:{port}", request_timeout_ms=2000) as client,
        pytest.raises(KafkaError) as info,
    ):
        client.metadata()
    assert isinstance(info.value, BrokerConnectionError)
    assert info.value.code == ErrorCode.NETWORK_EXCEPTION
    assert f"127.0.0.1:{port}" in str(info.value)


def test_bad_bootstrap_address() -> None:
    with pytest.raises(ValueError, match="host:port"):
        KafkaClient("localhost")
    with pytest.raises(ValueError):
        KafkaClient("")


class FakeBroker:
    """A loopback server whose per-connection behaviour is a function of the accepted socket."""

    def __init__(self, behaviour: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.behaviour = behaviour
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        with conn, contextlib.suppress(OSError):
            self.behaviour(conn)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def _read_request(conn: socket.socket) -> bytes:
    size = struct.unpack(">i", _recv(conn, 4))[0]
    return _recv(conn, size)


def _recv(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise OSError("peer closed")
        data += chunk
    return data


@pytest.fixture
def fake_broker() -> Iterator[Callable[[Callable[[socket.socket], None]], FakeBroker]]:
    made: list[FakeBroker] = []

    def make(behaviour: Callable[[socket.socket], None]) -> FakeBroker:
        made.append(FakeBroker(behaviour))
        return made[-1]

    yield make
    for b in made:
        b.close()


def test_peer_closing_is_a_clear_error(fake_broker: Callable[..., FakeBroker]) -> None:
    broker = fake_broker(lambda conn: None)  # accept, then close
    with (
        KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000) as client,
        pytest.raises(
            BrokerConnectionError, match=f"127.0.0.1:{broker.port}: .*(closed by the broker|reset)"
        ),
    ):
        client.api_versions()


def test_silent_peer_times_out(fake_broker: Callable[..., FakeBroker]) -> None:
    done = threading.Event()
    broker = fake_broker(lambda conn: done.wait(5))
    with (
        KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=200) as client,
        pytest.raises(BrokerConnectionError, match="timed out"),
    ):
        client.api_versions()
    done.set()


def test_wrong_correlation_id_is_rejected(fake_broker: Callable[..., FakeBroker]) -> None:
    def answer_wrong(conn: socket.socket) -> None:
        header, _ = decode_request(_read_request(conn))
        conn.sendall(
            encode_response(
                ApiKey.API_VERSIONS, header.api_version, header.correlation_id + 1, {"ApiKeys": []}
            )
        )
        conn.recv(1)

    broker = fake_broker(answer_wrong)
    with (
        KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000) as client,
        pytest.raises(BrokerConnectionError, match="correlation id"),
    ):
        client.api_versions()


def test_garbage_response_is_protocol_error(fake_broker: Callable[..., FakeBroker]) -> None:
    def answer_garbage(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(struct.pack(">i", 5) + b"\x00\x00\x00\x01\xff")  # truncated ApiVersions body
        conn.recv(1)

    broker = fake_broker(answer_garbage)
    with (
        KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000) as client,
        pytest.raises(ProtocolError),
    ):
        client.api_versions()


def test_oversized_response_frame_is_refused_naming_size_and_bound(
    fake_broker: Callable[..., FakeBroker],
) -> None:
    def answer_huge(conn: socket.socket) -> None:
        _read_request(conn)
        conn.sendall(struct.pack(">i", 0x7FFFFFFF))  # a size prefix above the bound, and nothing after it
        conn.recv(1)

    broker = fake_broker(answer_huge)
    with (
        KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000) as client,
        pytest.raises(
            ProtocolError, match=f"{0x7FFFFFFF} bytes exceeds max_frame_bytes {MAX_RESPONSE_BYTES}"
        ),
    ):
        client.api_versions()


def test_version_negotiation_falls_back_when_broker_is_older(fake_broker: Callable[..., FakeBroker]) -> None:
    seen: list[int] = []

    def old_broker(conn: socket.socket) -> None:
        for _ in range(2):
            header, _ = decode_request(_read_request(conn))
            seen.append(header.api_version)
            keys = [
                {"ApiKey": 18, "MinVersion": 0, "MaxVersion": 2},
                {"ApiKey": 3, "MinVersion": 0, "MaxVersion": 5},
            ]
            if header.api_version > 2:  # what an old broker does: a v0 answer with UNSUPPORTED_VERSION
                conn.sendall(
                    encode_response(
                        ApiKey.API_VERSIONS, 0, header.correlation_id, {"ErrorCode": 35, "ApiKeys": keys}
                    )
                )
            else:
                conn.sendall(
                    encode_response(
                        ApiKey.API_VERSIONS, header.api_version, header.correlation_id, {"ApiKeys": keys}
                    )
                )
                break
        conn.recv(1)

    broker = fake_broker(old_broker)
    with KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000) as client:
        assert client.api_versions() == {18: (0, 2), 3: (0, 5)}
        assert client.negotiated_version(3) == 5  # min(ours 12, theirs 5)
        with pytest.raises(KafkaError) as info:
            client.negotiated_version(0)  # Produce not advertised
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
    assert seen == [4, 2]


# --- against the embedded broker -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data_dir: Path = tmp_path_factory.mktemp("broker")
    with broker_process(data_dir) as address:
        yield address


def _batch(values: list[bytes], timestamp: int = 1_700_000_000_000) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, v in enumerate(values):
        builder.append(i, timestamp=timestamp + i, key=b"k%d" % i, value=v, headers=[])
    return bytes(builder.build())


def _read_values(records: bytes | memoryview | None) -> list[tuple[int, bytes]]:
    from kafka.record.memory_records import MemoryRecords

    out: list[tuple[int, bytes]] = []
    mr = MemoryRecords(bytes(records or b""))
    while (batch := mr.next_batch()) is not None:
        out.extend((r.offset, r.value) for r in batch)
    return out


@pytest.fixture
def client(bootstrap: str) -> Iterator[KafkaClient]:
    with KafkaClient(bootstrap, client_id="pylog-test", request_timeout_ms=10000) as c:
        yield c


def test_api_versions_and_metadata(client: KafkaClient, bootstrap: str) -> None:
    versions = client.api_versions()
    for key in (0, 1, 2, 3, 18):
        assert key in versions
    assert client.admin.create_topics({"md-topic": (3, 1)}) == {"md-topic": ErrorCode.NONE}
    md = client.metadata(["md-topic"])
    assert set(md.topics["md-topic"].partitions) == {0, 1, 2}
    port = int(bootstrap.rpartition(":")[2])
    assert any(b.port == port for b in md.brokers.values())
    for p in md.topics["md-topic"].partitions.values():
        assert p.leader in md.brokers and p.leader in p.replicas and p.error == 0
    assert "md-topic" in client.metadata(None).topics


def test_create_existing_topic_reports_code(client: KafkaClient) -> None:
    assert client.admin.create_topics([NewTopic("dup-topic", 1, 1)]) == {"dup-topic": ErrorCode.NONE}
    assert client.admin.create_topics([NewTopic("dup-topic", 1, 1)]) == {
        "dup-topic": ErrorCode.TOPIC_ALREADY_EXISTS
    }


def test_produce_fetch_list_offsets(client: KafkaClient) -> None:
    client.admin.create_topics({"pf": (2, 1)})
    leader = client.leader_for("pf", 1)
    first = client.produce(leader, {("pf", 1): _batch([b"a", b"b", b"c"])}, acks=1, timeout_ms=5000)
    assert first is not None and first[("pf", 1)].error == 0 and first[("pf", 1)].base_offset == 0
    second = client.produce(leader, {("pf", 1): _batch([b"d"])}, acks=-1, timeout_ms=5000)
    assert second is not None and second[("pf", 1)].base_offset == 3

    offsets = client.list_offsets({("pf", 1): -2, ("pf", 0): -1})
    assert offsets[("pf", 1)][0] == 0
    assert offsets[("pf", 0)][0] == 0  # empty partition
    assert client.list_offsets({("pf", 1): -1})[("pf", 1)][0] == 4

    fetched = client.fetch({("pf", 1): 0, ("pf", 0): 0}, max_wait_ms=10)
    r = fetched[("pf", 1)]
    assert (r.error, r.high_watermark) == (0, 4)
    assert _read_values(r.records) == [(0, b"a"), (1, b"b"), (2, b"c"), (3, b"d")]
    assert fetched[("pf", 0)].high_watermark == 0 and _read_values(fetched[("pf", 0)].records) == []


def test_pipelined_produce_keeps_order(client: KafkaClient) -> None:
    client.admin.create_topics({"pipe": (1, 1)})
    leader = client.leader_for("pipe", 0)
    requests = [{("pipe", 0): _batch([b"%d-%d" % (i, j) for j in range(3)])} for i in range(12)]
    results = list(client.produce_pipelined(leader, requests, acks=1, timeout_ms=5000, max_in_flight=4))
    assert [r[("pipe", 0)].base_offset for r in results if r is not None] == [3 * i for i in range(12)]
    # explicit handles: answers are read in order even when polled out of order
    h1 = client.send_produce(leader, {("pipe", 0): _batch([b"x"])}, acks=1, timeout_ms=5000)
    h2 = client.send_produce(leader, {("pipe", 0): _batch([b"y"])}, acks=1, timeout_ms=5000)
    r2 = client.poll_produce(h2)
    r1 = client.poll_produce(h1)
    assert r1 is not None and r2 is not None
    assert (r1[("pipe", 0)].base_offset, r2[("pipe", 0)].base_offset) == (36, 37)


def test_acks_zero_returns_none(client: KafkaClient) -> None:
    client.admin.create_topics({"fire": (1, 1)})
    leader = client.leader_for("fire", 0)
    assert client.produce(leader, {("fire", 0): _batch([b"z"])}, acks=0, timeout_ms=5000) is None
    # the connection stays usable and the record lands
    assert client.list_offsets({("fire", 0): -1})[("fire", 0)][0] == 1


def test_unknown_topic_errors_name_it(client: KafkaClient) -> None:
    with pytest.raises(KafkaError) as info:
        client.leader_for("no-such-topic", 0)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "no-such-topic" in str(info.value)


def test_init_producer_id(client: KafkaClient) -> None:
    pid, epoch = client.transactions.init_producer_id()
    assert pid >= 0 and epoch >= 0
    pid2, _ = client.transactions.init_producer_id()
    assert pid2 != pid


def test_min_versions_refuse_a_broker_below_the_floor(fake_broker: Callable[..., FakeBroker]) -> None:
    def broker_with_old_apis(conn: socket.socket) -> None:
        header, _ = decode_request(_read_request(conn))
        keys = [
            {"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4},
            {"ApiKey": 3, "MinVersion": 0, "MaxVersion": 3},  # no AllowAutoTopicCreation before v4
            {"ApiKey": 0, "MinVersion": 0, "MaxVersion": 2},  # no magic-2 record batches before v3
            {"ApiKey": 1, "MinVersion": 0, "MaxVersion": 12},
        ]
        conn.sendall(
            encode_response(ApiKey.API_VERSIONS, header.api_version, header.correlation_id, {"ApiKeys": keys})
        )
        conn.recv(1)

    broker = fake_broker(broker_with_old_apis)
    with KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000, min_versions={3: 4}) as client:
        assert client.negotiated_version(1) == 12  # no floor asked: min(ours, theirs)
        with pytest.raises(KafkaError, match=r"speaks Metadata 0-3, pylog 4-") as info:
            client.negotiated_version(3)
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION
        with pytest.raises(KafkaError, match=r"speaks Produce 0-2, pylog 3-") as info:
            client.negotiated_version(0)  # the floor every client has
        assert info.value.code == ErrorCode.UNSUPPORTED_VERSION


def test_disconnect_loses_unanswered_produce_requests_only(client: KafkaClient) -> None:
    client.admin.create_topics({"cut": (1, 1)})
    leader = client.leader_for("cut", 0)
    tp = ("cut", 0)
    read = [
        client.send_produce(leader, {tp: _batch([b"r%d" % i])}, acks=1, timeout_ms=5000) for i in range(3)
    ]
    # A request on the same connection reads (and keeps) the three earlier answers first.
    assert client.list_offsets({tp: -1})[tp][0] == 3
    client.disconnect(leader)
    assert [client.poll_produce(h)[tp].base_offset for h in read] == [0, 1, 2]  # type: ignore[index]

    lost = client.send_produce(leader, {tp: _batch([b"lost?"])}, acks=1, timeout_ms=5000)
    client.disconnect(leader)
    with pytest.raises(BrokerConnectionError, match="closed before the answer"):
        client.poll_produce(lost)
    client.disconnect(12345)  # no connection to that node: nothing to do

    # The next call reconnects; the lost request may or may not have reached the log.
    after = client.produce(leader, {tp: _batch([b"after"])}, acks=1, timeout_ms=5000)
    assert after is not None and after[tp].error == 0 and after[tp].base_offset in (3, 4)
    assert client.list_offsets({tp: -1})[tp][0] == after[tp].base_offset + 1


def test_partitions_for_waits_for_auto_creation_and_never_creates_unasked(client: KafkaClient) -> None:
    assert client.admin.create_topics({"pf-known": (3, 1)}) == {"pf-known": ErrorCode.NONE}
    assert client.partitions_for("pf-known") == [0, 1, 2]

    with pytest.raises(KafkaError) as info:
        client.partitions_for("pf-missing", timeout_ms=300)
    assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and "pf-missing" in str(info.value)
    assert client.metadata(["pf-missing"]).topics["pf-missing"].error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    created = client.partitions_for("pf-auto", allow_auto_create=True)
    assert created and created == list(range(len(created)))
    assert client.metadata(["pf-auto"]).topics["pf-auto"].error == ErrorCode.NONE


def test_a_top_level_metadata_error_fails_loudly(fake_broker: Callable[..., FakeBroker]) -> None:
    # Metadata v13+ (KIP-1102): a broker may answer REBOOTSTRAP_REQUIRED (129) instead of topics
    def rebootstrapping_broker(conn: socket.socket) -> None:
        header, _ = decode_request(_read_request(conn))
        keys = [
            {"ApiKey": 18, "MinVersion": 0, "MaxVersion": 4},
            {"ApiKey": 3, "MinVersion": 0, "MaxVersion": 13},
        ]
        conn.sendall(
            encode_response(ApiKey.API_VERSIONS, header.api_version, header.correlation_id, {"ApiKeys": keys})
        )
        header, _ = decode_request(_read_request(conn))
        assert header.api_version == 13
        conn.sendall(encode_response(ApiKey.METADATA, 13, header.correlation_id, {"ErrorCode": 129}))
        conn.recv(1)

    broker = fake_broker(rebootstrapping_broker)
    with (
        KafkaClient(f"127.0.0.1:{broker.port}", request_timeout_ms=2000, retries=0) as client,
        pytest.raises(KafkaError, match="bootstrap again") as info,
    ):
        client.metadata()
    assert info.value.code == 129
