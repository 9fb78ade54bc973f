"""The connector against Apache Kafka: the tests it has against pylog's broker, run against the real thing.

Modules by subject (so that xdist hands them to both workers): ``test_batch`` (writes and reads),
``test_stream`` (the streaming source), ``test_transactions`` (transactional writes, the exactly-once sink),
``test_cluster_and_security`` (a leader SIGKILL in a 3-node cluster; SASL_SSL, SCRAM and ACLs); the fixtures that
give them Apache Kafka are in this package's ``conftest.py``, :func:`~.support.peer` and Kafka's judge in
``support.py``.

Most tests here ARE tests of the connector's other modules (imported, not copied: :func:`peer` takes a copy of
the function with its ``compat`` mark, so the original keeps running against pylog unmarked): this package only
gives them Apache Kafka's broker through the fixtures they take. ``broker``, ``rbroker``, ``sbroker`` and
``txn_broker`` are the session's Apache Kafka node (``apache_kafka``: one KRaft node with 3 partitions per
auto-created topic and retention off, as the pylog brokers of those modules); their log directory is that node's,
so ``pylog.transport=local`` (and ``auto``) read the files Apache Kafka wrote. The records are checked as in the
original tests (confluent-kafka, or the connector's own reader compared with what was sent), and where the issue
asks for Kafka's own judgement, by Kafka's Java consumer (``kafka-console-consumer --isolation-level
read_committed``, :func:`kafka_read_committed`).

Written here, because their setup is Kafka's: the leader SIGKILL of one node of the 3-node
``apache_kafka_cluster`` during an acks=all write, and SASL_SSL with SCRAM-SHA-512 and ACLs
(``apache_kafka_secured``). A test listed here is one whose behaviour should be the same on both brokers; a
difference found is fixed in the connector, never in the test.
"""
