"""A broker with every security protocol: PLAINTEXT, SSL (client certificate required), SASL_PLAINTEXT and
SASL_SSL listeners; PLAIN users from the JAAS config, SCRAM users in the credentials file (the ``secured``
fixture of tests/security starts one per module)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.security.certs import Pki

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
#: user -> (mechanism, password) stored salted by the fixture.
SCRAM_USERS = {"scram256": ("SCRAM-SHA-256", "pw-256"), "scram512": ("SCRAM-SHA-512", "pw-512")}


@dataclass
class SecuredBroker:
    broker: Any
    pki: Pki
    data_dir: Path

    def address(self, listener: str) -> str:
        return str(self.broker.listener_bootstrap(listener))


def secured_props(data_dir: Path, pki: Pki) -> dict[str, str]:
    return {
        "listeners": (
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
        ),
        "log.dirs": str(data_dir / "logs"),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(pki.server),
        "ssl.key.password": pki.key_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(pki.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    }
