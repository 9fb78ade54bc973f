"""Kafka request/response messages: the API registry, the headers, and whole-frame encode/decode.

Frames (the 4-byte size prefix is handled by :mod:`broker_runtime.protocol.framing` on the way in and added
by the ``encode_*`` functions on the way out)::

    request   = request header + request body
    response  = response header + response body

    request header v1   int16 RequestApiKey, int16 RequestApiVersion, int32 CorrelationId,
                        string ClientId (int16 length, nullable)
    request header v2   v1 + tagged fields (ClientId keeps its int16 length)
    response header v0  int32 CorrelationId
    response header v1  v0 + tagged fields

Request header v2 / response header v1 are used exactly when the API version is flexible, except that
ApiVersions responses always use response header v0 (a client must be able to read them before it knows what
the broker speaks). Header flexibility follows the API's open-ended flexible range even above the highest
known version, as Kafka does, so an ApiVersions request of a future version still parses.

Bodies are dicts keyed by Kafka's JSON field names (``body["TopicData"][0]["PartitionData"][0]["Records"]``);
see :mod:`.schema` for value types and defaults. One module per API holds the definitions.

Stateless apart from per-version codec caches; thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from broker_runtime.errors import ErrorCode, MessageDefinitionError, ProtocolError, UnsupportedVersionError
from broker_runtime.protocol.messages import (
    acls,
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    api_versions,
    client_quotas,
    consumer_group,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    scram_credentials,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from broker_runtime.protocol.messages.api_keys import ApiKey
from broker_runtime.protocol.messages.common import CONSUMER_REPLICA_ID, IsolationLevel
from broker_runtime.protocol.messages.list_offsets import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
)
from broker_runtime.protocol.messages.schema import Message
from broker_runtime.protocol.primitives import wire

__all__ = [
    "API_KEYS",
    "CONSUMER_REPLICA_ID",
    "EARLIEST_LOCAL_TIMESTAMP",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
    "ApiKey",
    "ApiSpec",
    "IsolationLevel",
    "RequestHeader",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_request_chunks",
    "encode_response",
    "encode_response_chunks",
]

Buffer = bytes | bytearray | memoryview

#: int16 RequestApiKey, int16 RequestApiVersion, int32 CorrelationId (request header v1/v2, before ClientId).
REQUEST_HEADER_FIXED = struct.Struct(">hhi")
#: int32 CorrelationId (response header v0/v1).
RESPONSE_HEADER_FIXED = struct.Struct(">i")
_SIZE = struct.Struct(">i")


class ApiSpec:
    """One API: its key, the version range pylog speaks, and its request/response definitions."""

    __slots__ = ("name", "api_key", "min_version", "max_version", "flexible_from", "request", "response")

    def __init__(self, request: Message, response: Message) -> None:
        if request.api_key != response.api_key or request.versions != response.versions:
            raise MessageDefinitionError(
                f"{request.name} and {response.name} disagree on api key or versions"
            )
        self.name = request.name.removesuffix("Request")
        self.api_key = request.api_key
        self.min_version, self.max_version = request.versions
        flexible = request.flexible
        self.flexible_from = flexible[0] if flexible is not None else 0x7FFF
        self.request = request
        self.response = response

    def is_flexible(self, version: int) -> bool:
        """True when ``version`` uses compact encodings, tagged fields and the flexible headers."""
        return version >= self.flexible_from

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def __repr__(self) -> str:
        return f"ApiSpec({self.name}, key={self.api_key}, versions={self.min_version}-{self.max_version})"


#: API key -> spec, for every API pylog can encode and decode.
API_KEYS: dict[int, ApiSpec] = {
    spec.api_key: spec
    for spec in (
        ApiSpec(produce.REQUEST, produce.RESPONSE),
        ApiSpec(fetch.REQUEST, fetch.RESPONSE),
        ApiSpec(list_offsets.REQUEST, list_offsets.RESPONSE),
        ApiSpec(metadata.REQUEST, metadata.RESPONSE),
        ApiSpec(find_coordinator.REQUEST, find_coordinator.RESPONSE),
        ApiSpec(api_versions.REQUEST, api_versions.RESPONSE),
        ApiSpec(create_topics.REQUEST, create_topics.RESPONSE),
        ApiSpec(init_producer_id.REQUEST, init_producer_id.RESPONSE),
        ApiSpec(describe_configs.REQUEST, describe_configs.RESPONSE),
        ApiSpec(elect_leaders.REQUEST, elect_leaders.RESPONSE),
        ApiSpec(delete_topics.REQUEST, delete_topics.RESPONSE),
        ApiSpec(delete_records.REQUEST, delete_records.RESPONSE),
        ApiSpec(create_partitions.REQUEST, create_partitions.RESPONSE),
        ApiSpec(alter_configs.ALTER_REQUEST, alter_configs.ALTER_RESPONSE),
        ApiSpec(alter_configs.INCREMENTAL_REQUEST, alter_configs.INCREMENTAL_RESPONSE),
        ApiSpec(describe_log_dirs.REQUEST, describe_log_dirs.RESPONSE),
        ApiSpec(describe_cluster.REQUEST, describe_cluster.RESPONSE),
        ApiSpec(describe_producers.REQUEST, describe_producers.RESPONSE),
        ApiSpec(describe_topic_partitions.REQUEST, describe_topic_partitions.RESPONSE),
        ApiSpec(add_partitions_to_txn.REQUEST, add_partitions_to_txn.RESPONSE),
        ApiSpec(add_offsets_to_txn.REQUEST, add_offsets_to_txn.RESPONSE),
        ApiSpec(end_txn.REQUEST, end_txn.RESPONSE),
        ApiSpec(offset_for_leader_epoch.REQUEST, offset_for_leader_epoch.RESPONSE),
        ApiSpec(describe_transactions.REQUEST, describe_transactions.RESPONSE),
        ApiSpec(list_transactions.REQUEST, list_transactions.RESPONSE),
        ApiSpec(join_group.REQUEST, join_group.RESPONSE),
        ApiSpec(sync_group.REQUEST, sync_group.RESPONSE),
        ApiSpec(heartbeat.REQUEST, heartbeat.RESPONSE),
        ApiSpec(leave_group.REQUEST, leave_group.RESPONSE),
        ApiSpec(offset_commit.REQUEST, offset_commit.RESPONSE),
        ApiSpec(offset_fetch.REQUEST, offset_fetch.RESPONSE),
        ApiSpec(list_groups.REQUEST, list_groups.RESPONSE),
        ApiSpec(describe_groups.REQUEST, describe_groups.RESPONSE),
        ApiSpec(delete_groups.REQUEST, delete_groups.RESPONSE),
        ApiSpec(offset_delete.REQUEST, offset_delete.RESPONSE),
        ApiSpec(write_txn_markers.REQUEST, write_txn_markers.RESPONSE),
        ApiSpec(txn_offset_commit.REQUEST, txn_offset_commit.RESPONSE),
        ApiSpec(sasl_handshake.REQUEST, sasl_handshake.RESPONSE),
        ApiSpec(sasl_authenticate.REQUEST, sasl_authenticate.RESPONSE),
        ApiSpec(acls.DESCRIBE_REQUEST, acls.DESCRIBE_RESPONSE),
        ApiSpec(acls.CREATE_REQUEST, acls.CREATE_RESPONSE),
        ApiSpec(acls.DELETE_REQUEST, acls.DELETE_RESPONSE),
        ApiSpec(client_quotas.DESCRIBE_REQUEST, client_quotas.DESCRIBE_RESPONSE),
        ApiSpec(client_quotas.ALTER_REQUEST, client_quotas.ALTER_RESPONSE),
        ApiSpec(scram_credentials.DESCRIBE_REQUEST, scram_credentials.DESCRIBE_RESPONSE),
        ApiSpec(scram_credentials.ALTER_REQUEST, scram_credentials.ALTER_RESPONSE),
        ApiSpec(consumer_group.HEARTBEAT_REQUEST, consumer_group.HEARTBEAT_RESPONSE),
        ApiSpec(consumer_group.DESCRIBE_REQUEST, consumer_group.DESCRIBE_RESPONSE),
    )
}


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _unsupported(header: RequestHeader, message: str) -> UnsupportedVersionError:
    err = UnsupportedVersionError(message)
    err.header = header  # type: ignore[attr-defined]
    return err


def decode_request_header(frame: Buffer) -> tuple[RequestHeader, int]:
    """Decode the request header at the start of ``frame`` (size prefix excluded).

    Returns the header and the position where the body starts. Works for unknown API keys and versions (the
    body position is then only meaningful if the header's flexibility could be told). Raises
    ``ProtocolError`` for a truncated header.
    """
    if len(frame) < REQUEST_HEADER_FIXED.size + 2:
        raise ProtocolError(
            f"request frame of {len(frame)} bytes is shorter than the smallest request header (10)"
        )
    api_key, api_version, correlation_id = REQUEST_HEADER_FIXED.unpack_from(frame, 0)
    try:
        client_id, pos = wire.decode_string(frame, REQUEST_HEADER_FIXED.size)
        spec = API_KEYS.get(api_key)
        if spec is not None and spec.is_flexible(api_version):
            pos = wire.skip_tagged_fields(frame, pos)
    except ProtocolError as e:
        raise ProtocolError(f"request header (api key {api_key} v{api_version}): {e}") from e
    except (struct.error, IndexError, ValueError) as e:
        raise ProtocolError(
            f"truncated or malformed request header (api key {api_key} v{api_version}): {e}"
        ) from e
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def decode_request(frame: Buffer) -> tuple[RequestHeader, dict[str, Any]]:
    """Decode a whole request frame (size prefix excluded) into its header and body.

    Raises ``UnsupportedVersionError`` (with the decoded header as ``.header``) for an API key or version pylog
    does not speak, and ``ProtocolError`` for truncated or malformed bytes.
    """
    header, pos = decode_request_header(frame)
    spec = API_KEYS.get(header.api_key)
    if spec is None:
        raise _unsupported(
            header, f"unknown API key {header.api_key} (correlation id {header.correlation_id})"
        )
    if not spec.supports(header.api_version):
        raise _unsupported(
            header,
            f"{spec.name} version {header.api_version} is outside the supported range "
            f"{spec.min_version}-{spec.max_version}",
        )
    body, _ = spec.request.decode(frame, pos, header.api_version)
    return header, body


def _spec_for(api_key: int, api_version: int) -> ApiSpec:
    spec = API_KEYS.get(api_key)
    if spec is None:
        raise UnsupportedVersionError(f"unknown API key {api_key}")
    if not spec.supports(api_version):
        raise UnsupportedVersionError(
            f"{spec.name} version {api_version} is outside the supported range {spec.min_version}-{spec.max_version}"
        )
    return spec


def _framed(chunks: list[Any]) -> list[Any]:
    chunks[0] = _SIZE.pack(sum(map(len, chunks)))  # chunks[0] is still the empty placeholder
    return chunks


def encode_request_chunks(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
) -> list[Any]:
    """Like :func:`encode_request` but return the chunks (size prefix first) for ``socket.sendmsg``."""
    spec = _spec_for(api_key, api_version)
    out: list[Any] = [b"", REQUEST_HEADER_FIXED.pack(api_key, api_version, correlation_id)]
    out.append(wire.encode_string(client_id))
    if spec.is_flexible(api_version):
        out.append(b"\x00")
    spec.request.encode_into(body, api_version, out)
    return _framed(out)


def encode_request(
    api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Mapping[str, Any]
) -> bytes:
    """Encode a request, 4-byte size prefix included. Missing body fields take their defaults."""
    return b"".join(encode_request_chunks(api_key, api_version, correlation_id, client_id, body))


def encode_response_chunks(
    api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]
) -> list[Any]:
    """Like :func:`encode_response` but return the chunks (size prefix first); record buffers are not copied."""
    spec = _spec_for(api_key, api_version)
    out: list[Any] = [b"", RESPONSE_HEADER_FIXED.pack(correlation_id)]
    if spec.is_flexible(api_version) and api_key != ApiKey.API_VERSIONS:
        out.append(b"\x00")
    spec.response.encode_into(body, api_version, out)
    return _framed(out)


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    """Encode a response, 4-byte size prefix included. Missing body fields take their defaults."""
    return b"".join(encode_response_chunks(api_key, api_version, correlation_id, body))


def decode_response(api_key: int, api_version: int, frame: Buffer) -> tuple[int, dict[str, Any]]:
    """Decode a response frame (size prefix excluded) to ``(correlation id, body)``.

    An ApiVersions response carrying UNSUPPORTED_VERSION is read as version 0, the version brokers answer
    with when the request's version is too new for them.
    """
    spec = _spec_for(api_key, api_version)
    try:
        (correlation_id,) = RESPONSE_HEADER_FIXED.unpack_from(frame, 0)
        pos = RESPONSE_HEADER_FIXED.size
        if api_key == ApiKey.API_VERSIONS:
            if api_version > 0:
                (error_code,) = wire.INT16.unpack_from(frame, pos)
                if error_code == ErrorCode.UNSUPPORTED_VERSION:
                    api_version = 0
        elif spec.is_flexible(api_version):
            pos = wire.skip_tagged_fields(frame, pos)
    except ProtocolError as e:
        raise ProtocolError(f"{spec.name} response header: {e}") from e
    except (struct.error, IndexError) as e:
        raise ProtocolError(
            f"truncated {spec.name} v{api_version} response header ({len(frame)} bytes): {e}"
        ) from e
    body, _ = spec.response.decode(frame, pos, api_version)
    return correlation_id, body
