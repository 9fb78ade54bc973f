"""The compatibility matrix's one home: which peers there are, and how a test says what it proves.

A test that checks pylog against a peer carries ``@pytest.mark.compat(PEER, FEATURE)`` (several marks when it
proves several rows), optionally with ``differs="how pylog differs from the peer, and why"``. PEER is a key of
:data:`PEERS`; FEATURE is a short phrase ("kafka-consumer-groups: describe with lag, reset, delete"). The
README's compatibility matrix is generated from the results of the marked tests by ``jobs/compat_matrix.py``
(one row per PEER x FEATURE, a row passes when every test carrying it passed), and ``tests/test_compat_matrix.py``
keeps the README's rows equal to the marks in the tree.

Threading: plain data, read at collection time.
"""

from __future__ import annotations

#: Peer key -> what it is (the column's text); ``{kafka}`` is the pinned Apache Kafka release.
PEERS: dict[str, str] = {
    "kafka-broker": "Apache Kafka {kafka} broker, with the connector (and pylog's client) as its client",
    "kafka-java": "Apache Kafka {kafka} Java client (producer, consumer, AdminClient) against pylog's broker",
    "kafka-tools": "Apache Kafka {kafka} command-line tools against pylog's broker",
    "kafka-files": "Apache Kafka {kafka} files both ways (DumpLogSegments over pylog's files, pylog over Kafka's)",
}
