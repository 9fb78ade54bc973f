"""Record the ApiVersions answer of the pinned Apache Kafka broker into ``api_versions.json`` beside this file.

Usage (from the repository root, with the project's virtualenv; run it again whenever ``kafka.version`` of
``pom.xml`` moves, the test ``tests/protocol/test_api_versions_parity.py`` fails until then)::

    python -m tests.support.apache_kafka.record_api_versions

It starts ONE default Apache Kafka node (:class:`~tests.support.apache_kafka.KafkaCluster`, the same defaults as
the suite's nodes), sends ApiVersions v4 (the newest version pylog's codec knows; flexible, so the answer carries
the feature tagged fields) over a plain socket with pylog's codec, and writes:

``kafka_version``
    the release that answered (the pin of ``pom.xml``).
``api_versions_request_version``
    the ApiVersions version the recording sent.
``api_keys``
    ``{"<key>": {"name": ..., "min": ..., "max": ...}}`` for every API key the broker answers on its client
    listener (the names are those of Kafka's message definitions, read from the release's ``kafka-clients`` jar).
``supported_features``
    ``{"<feature>": {"min": ..., "max": ...}}``: the feature levels this broker software supports.
``finalized_features``
    ``{"<feature>": {"min": ..., "max": ...}}``: the levels finalized in the cluster's metadata (its default
    ``kafka-storage format`` levels), without the epoch (it counts metadata records and changes with timing).

The file is sorted and indented so that a re-recording diffs line by line. Nothing else reads the node; it is
stopped before the script exits.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from broker_runtime.protocol.messages import ApiKey, decode_response, encode_request
from tests.support.apache_kafka import KafkaCluster, ensure_fetched, kafka_version

RECORDING = Path(__file__).resolve().parent / "api_versions.json"
#: The ApiVersions version the recording sends (pylog's codec decodes up to 4; Kafka 4.x answers it).
REQUEST_VERSION = 4


def api_names(libs: Path) -> dict[int, str]:
    """API key -> name (``ProduceRequest`` -> ``Produce``) from the message definitions of the release's client jar."""
    jars = sorted(libs.glob("kafka-clients-*.jar"))
    if not jars:
        raise SystemExit(f"no kafka-clients jar in {libs}: the fetch of the release is incomplete")
    names: dict[int, str] = {}
    with zipfile.ZipFile(jars[0]) as jar:
        for entry in jar.namelist():
            if not re.fullmatch(r"common/message/\w+Request\.json", entry):
                continue
            # the definitions carry // comments, which json does not read: only the two fields are needed
            text = jar.read(entry).decode()
            key = re.search(r'"apiKey"\s*:\s*(\d+)', text)
            name = re.search(r'"name"\s*:\s*"(\w+)Request"', text)
            if key and name:
                names[int(key.group(1))] = name.group(1)
    return names


def api_versions(bootstrap: str) -> dict[str, Any]:
    """One ApiVersions request to ``bootstrap`` (host:port) over a plain socket; the decoded answer."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            encode_request(
                ApiKey.API_VERSIONS,
                REQUEST_VERSION,
                1,
                "pylog-record-api-versions",
                {"ClientSoftwareName": "pylog-record-api-versions", "ClientSoftwareVersion": "1"},
            )
        )
        size = struct.unpack(">i", _read(sock, 4))[0]
        _, body = decode_response(ApiKey.API_VERSIONS, REQUEST_VERSION, _read(sock, size))
    if body["ErrorCode"] != 0:
        raise SystemExit(
            f"Apache Kafka answered ApiVersions v{REQUEST_VERSION} with error {body['ErrorCode']}"
        )
    return body


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"Apache Kafka closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def recording(body: dict[str, Any], names: dict[int, str], version: str) -> dict[str, Any]:
    """The data file's content from an ApiVersions answer (see the module docstring)."""
    return {
        "kafka_version": version,
        "api_versions_request_version": REQUEST_VERSION,
        "api_keys": {
            str(k["ApiKey"]): {
                "name": names.get(k["ApiKey"], f"Unknown{k['ApiKey']}"),
                "min": k["MinVersion"],
                "max": k["MaxVersion"],
            }
            for k in sorted(body["ApiKeys"], key=lambda k: k["ApiKey"])
        },
        "supported_features": {
            f["Name"]: {"min": f["MinVersion"], "max": f["MaxVersion"]}
            for f in sorted(body.get("SupportedFeatures") or [], key=lambda f: f["Name"])
        },
        "finalized_features": {
            f["Name"]: {"min": f["MinVersionLevel"], "max": f["MaxVersionLevel"]}
            for f in sorted(body.get("FinalizedFeatures") or [], key=lambda f: f["Name"])
        },
    }


def main() -> int:
    libs = ensure_fetched()
    version = kafka_version()
    with (
        tempfile.TemporaryDirectory(prefix="pylog-record-api-versions-") as base,
        KafkaCluster(Path(base), 1) as cluster,
    ):
        body = api_versions(cluster.bootstrap)
    data = recording(body, api_names(libs), version)
    RECORDING.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    print(
        f"wrote {RECORDING.name}: Apache Kafka {version}, {len(data['api_keys'])} API keys, "
        f"{len(data['finalized_features'])} finalized features",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
