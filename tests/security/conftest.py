"""One secured broker per test module: PLAINTEXT, SSL (client certificate required), SASL_PLAINTEXT and
SASL_SSL listeners; PLAIN users from the JAAS config, SCRAM users in the credentials file; certificates made by
:mod:`tests.security.certs`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.security.certs import make_pki
from tests.support.secured import PLAIN_JAAS, SCRAM_USERS, SecuredBroker, secured_props

__all__ = ["PLAIN_JAAS", "SCRAM_USERS", "SecuredBroker", "secured_props"]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    from broker_runtime.security.scram_credentials import credentials_path, upsert_user
    from broker_runtime.server.config import BrokerConfig
    from broker_runtime.server.node.broker import Broker

    data_dir = tmp_path_factory.mktemp("secured")
    pki = make_pki(data_dir / "pki")
    config = BrokerConfig.from_properties(secured_props(data_dir, pki))
    for user, (mechanism, password) in SCRAM_USERS.items():
        upsert_user(credentials_path(config.log_dirs, None), user, mechanism, password, iterations=4096)
    broker = Broker(config).start()
    try:
        yield SecuredBroker(broker, pki, data_dir)
    finally:
        broker.stop()
