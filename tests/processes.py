"""Moved to :mod:`tests.support.processes`; this name stays for test modules written before the move."""

from tests.support.processes import broker_pid, kill_broker, process_state, running

__all__ = ["broker_pid", "kill_broker", "process_state", "running"]
