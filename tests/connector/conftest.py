"""Fixtures of the connector tests: a real broker (child process) per module. The Spark session (``spark``) is
the suite's one shared session of the root conftest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real pylog broker (child process on a loopback port) for the tests of one module: ``host:port``."""
    from broker_runtime.launch import broker_process

    data_dir = tmp_path_factory.mktemp("broker")
    with broker_process(data_dir, overrides={"num.partitions": "3"}) as address:
        yield address
