"""The client's side of SASL: PLAIN and SCRAM-SHA-256/512 token exchanges, without the I/O.

Use::

    mech = sasl_mechanism("SCRAM-SHA-256", "alice", "pw")
    token = mech.first()                 # send in the first SaslAuthenticate
    while not mech.complete:
        token = mech.step(answer_bytes)  # None once the server's last message was verified

Kafka's order on the wire (the caller's): ApiVersions, SaslHandshake v1 (mechanism), then SaslAuthenticate
requests carrying these tokens (:func:`handshake_and_authenticate` drives that with any request function).
SCRAM verifies the server's signature in its final message, so a broker that does not know the password
cannot pretend to. Not thread-safe: one instance per connection attempt.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from broker_runtime.errors import ErrorCode, KafkaError
from broker_runtime.protocol.messages import ApiKey
from broker_runtime.security.scram_credentials import SCRAM_MECHANISMS

if TYPE_CHECKING:
    import scramp

__all__ = [
    "ClientMechanism",
    "SaslClientMechanism",
    "handshake_and_authenticate",
    "reauthenticate_after_s",
    "sasl_mechanism",
]

SASL_HANDSHAKE_KEY = ApiKey.SASL_HANDSHAKE
SASL_AUTHENTICATE_KEY = ApiKey.SASL_AUTHENTICATE


class ClientMechanism(Protocol):
    """A client mechanism's exchange (this module's, or OAUTHBEARER's in :mod:`.oauthbearer_login`)."""

    name: str
    complete: bool

    def first(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None: ...


class SaslClientMechanism:
    """One mechanism's client state; see the module docstring."""

    def __init__(self, name: str, username: str, password: str) -> None:
        self.name = name
        self.complete = False
        self._user = username
        self._password = password
        self._scram: scramp.ScramClient | None = None
        if name in SCRAM_MECHANISMS:
            import scramp  # only a SCRAM client needs it (an import of ~25 ms)

            self._scram = scramp.ScramClient([name], username, password)
        self._round = 0

    def first(self) -> bytes:
        if self._scram is None:
            return b"\x00" + self._user.encode() + b"\x00" + self._password.encode()
        return str(self._scram.get_client_first()).encode()

    def step(self, challenge: bytes) -> bytes | None:
        """The next token for the server's ``challenge``; None when the exchange is complete."""
        if self._scram is None:
            self.complete = True
            return None
        self._round += 1
        import scramp  # already loaded by __init__: only for its exception type

        try:
            if self._round == 1:
                self._scram.set_server_first(bytes(challenge).decode())
                return str(self._scram.get_client_final()).encode()
            self._scram.set_server_final(bytes(challenge).decode())
        except (scramp.ScramException, UnicodeDecodeError) as exc:
            raise KafkaError(
                ErrorCode.SASL_AUTHENTICATION_FAILED,
                f"{self.name}: the broker's SCRAM answer is invalid: {exc}",
            ) from None
        self.complete = True
        return None


def sasl_mechanism(name: str, username: str, password: str) -> SaslClientMechanism:
    return SaslClientMechanism(name, username, password)


def handshake_and_authenticate(
    request: Callable[[int, int, Mapping[str, Any]], dict[str, Any]],
    broker_versions: Mapping[int, tuple[int, int]],
    mechanism: ClientMechanism,
    address: str,
) -> int:
    """SaslHandshake v1 + SaslAuthenticate rounds through ``request(api_key, version, body) -> response``;
    returns the session lifetime in ms the broker granted (KIP-368's SessionLifetimeMs, 0: none).

    Raises :class:`KafkaError` (UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE)
    with the broker's message and the broker's address."""
    if SASL_AUTHENTICATE_KEY not in broker_versions:
        raise KafkaError(
            ErrorCode.ILLEGAL_SASL_STATE,
            f"broker {address} does not offer SaslAuthenticate: is it a SASL listener of a broker new enough "
            "(Kafka 1.0+)?",
        )
    answer = request(SASL_HANDSHAKE_KEY, 1, {"Mechanism": mechanism.name})
    code = answer["ErrorCode"]
    if code != ErrorCode.NONE:
        raise KafkaError(
            code,
            f"broker {address} refused SASL mechanism {mechanism.name}; it enables "
            f"{', '.join(answer.get('Mechanisms') or []) or 'none'}",
        )
    version = min(2, broker_versions[SASL_AUTHENTICATE_KEY][1])
    token: bytes | None = mechanism.first()
    lifetime_ms = 0
    while token is not None:
        answer = request(SASL_AUTHENTICATE_KEY, version, {"AuthBytes": token})
        code = answer["ErrorCode"]
        if code != ErrorCode.NONE:
            raise KafkaError(
                code,
                f"broker {address}: {answer.get('ErrorMessage') or 'SASL authentication failed'} "
                f"(mechanism {mechanism.name})",
            )
        lifetime_ms = int(answer.get("SessionLifetimeMs", 0))
        token = mechanism.step(bytes(answer["AuthBytes"]))
        if mechanism.complete:
            break
    return lifetime_ms


def reauthenticate_after_s(lifetime_ms: int) -> float | None:
    """Seconds after a login to re-authenticate (KIP-368): a random 85-95 % of the session lifetime, as Kafka's
    clients; None when the session does not expire."""
    return lifetime_ms / 1000 * random.uniform(0.85, 0.95) if lifetime_ms > 0 else None
