"""The broker server: listeners and connections, the services handlers use (context, topics, groups,
transactions, metrics, configs), one handler per API key (``handlers``), and the composition root (``node``).

Public entry points: :class:`~broker_runtime.server.node.broker.Broker` and
:class:`~broker_runtime.server.config.BrokerConfig`. Packages import one way only: ``server`` <- ``handlers`` <-
``node`` (the root); this package's ``__init__`` imports nothing, so importing it (e.g. for the config alone) does
not pull in the storage.
"""
