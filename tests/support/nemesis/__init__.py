"""A nemesis of pylog's own: seeded random fault schedules over a local process cluster, under real clients,
with checkers once the cluster is healed (issue 36).

=============  ==============================================================================================
``schedule``   the faults of a run, drawn from a seed (the same seed, the same schedule)
``faults``     doing and undoing one step on a :class:`~broker_runtime.launch.BrokerCluster`
``workload``   librdkafka clients busy during the faults, recording what the cluster answered them
``checkers``   what must hold afterwards (acknowledged records, transactions, group offsets, replicas, errors)
``runner``     one run: workloads, schedule, healing, checkers; its :class:`~.runner.Report`
=============  ==============================================================================================

The suite's bounded run and the soak form are ``tests/replication/test_nemesis.py``.
"""
