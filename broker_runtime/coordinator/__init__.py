"""Coordinators hosted by a broker (Kafka's ``coordinator`` modules): the group coordinator
(:mod:`broker_runtime.coordinator.group`) and the transaction coordinator (:mod:`broker_runtime.coordinator.
transaction`), with what both share: the partition of a key (:mod:`.placement`) and the protocol of their internal
topic (:mod:`.internal_topic`). They keep their state in internal topics through that protocol, are driven by
thin request handlers of the server, and never touch sockets. Threading: the broker's event-loop thread only.
"""
