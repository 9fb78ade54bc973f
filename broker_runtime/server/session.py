"""Who is on the other end of a connection: the listener it came in on, its security protocol, its principal.

One :class:`Session` per connection, created when the listener accepts it (Kafka's ``RequestContext`` keeps the
same facts per request: listener name, security protocol, principal, client address). The principal is
``User:ANONYMOUS`` on PLAINTEXT and on SSL without a client certificate, ``User:<certificate DN>`` (RFC 2253)
on SSL with a verified client certificate, ``User:<name>`` after SASL. An authorizer reads it from
``BrokerContext.request_session`` while a request is dispatched.

On a SASL listener :attr:`Session.authenticator` runs the SASL state machine; until it completes only
ApiVersions, SaslHandshake and SaslAuthenticate are served (:mod:`.dispatcher`). Event-loop thread only.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_runtime.security.sasl_server import SaslServerAuthenticator

__all__ = ["ANONYMOUS", "Session"]

ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Session:
    listener: str
    security_protocol: str
    principal: str = ANONYMOUS
    client_address: str = "?"
    #: The SASL state machine on SASL_PLAINTEXT / SASL_SSL listeners, None elsewhere.
    authenticator: SaslServerAuthenticator | None = None

    @property
    def authenticated(self) -> bool:
        return self.authenticator is None or self.authenticator.complete
