"""The cluster test helpers live in :mod:`tests.support.cluster`; this name stays for test modules written
before the move (import from ``tests.support.cluster``)."""

from tests.support.cluster import *  # noqa: F403
