"""Operator tools in Kafka's shape (``kafka-topics``, ``kafka-configs``, console producer/consumer, dump-log,
delete-records, consumer-groups, get-offsets), each a module with ``add_parser(subparsers)`` and a ``run(args)``
that talks to any Kafka-protocol broker through :mod:`broker_runtime.client` (``--bootstrap-server``), or reads
segment files read-only through :mod:`broker_runtime.storage` (dump-log). ``broker_runtime.cli`` registers them
as ``pylog-broker`` subcommands. Tools never import the server: what they can do, a remote Kafka admin can do.
"""
