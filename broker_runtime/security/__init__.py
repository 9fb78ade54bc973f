"""Security: TLS contexts, SASL mechanisms (PLAIN, SCRAM-SHA-256/512), principals, SCRAM credentials.

Modules: :mod:`.tls` (Kafka's ``ssl.*`` settings into ``ssl.SSLContext``), :mod:`.keystores` (JKS and PKCS12
stores read), :mod:`.jaas` (Kafka's JAAS ``sasl.jaas.config`` syntax), :mod:`.scram_credentials` (the salted
credentials file), :mod:`.sasl_server` (the broker's per-connection authenticator), :mod:`.sasl_client` (the
client's mechanisms), :mod:`.client_security` (a client's ``security.protocol`` + SASL + SSL settings, one
frozen dataclass).

Imports nothing of the project but :mod:`broker_runtime.errors`; the server, the client and the connector use it.
"""

from __future__ import annotations

from broker_runtime.security.client_security import SECURITY_PROTOCOLS, ClientSecurity

__all__ = ["SECURITY_PROTOCOLS", "ClientSecurity"]
