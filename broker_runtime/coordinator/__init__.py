"""Coordinators hosted by a broker (Kafka's ``coordinator`` modules): today the transaction coordinator
(:mod:`broker_runtime.coordinator.transaction`). They keep their state in internal topics through the storage
layer and are driven by thin request handlers of the server; they never touch sockets."""
