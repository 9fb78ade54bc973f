"""The broker's side of SASL on one connection: Kafka's ``SaslServerAuthenticator``, without the I/O.

State machine (one instance per connection of a SASL_PLAINTEXT / SASL_SSL listener)::

    HANDSHAKE --SaslHandshake(enabled mechanism)--> AUTHENTICATE --token(s) ok--> COMPLETE
        |                |                                |
        |                +--unknown mechanism: answer UNSUPPORTED_SASL_MECHANISM, then FAILED (closed)
        +-- ApiVersions is served in HANDSHAKE (and AUTHENTICATE for v1); anything else closes the connection
                                                          +--bad token / wrong password: FAILED (the answer
                                                             carries SASL_AUTHENTICATION_FAILED, then closed)

Handshake v1 is followed by SaslAuthenticate requests (KIP-152); handshake v0 by raw tokens (a 4-byte size
and the token, no Kafka header, answered the same way): :attr:`raw_tokens` tells the caller how to frame.

Mechanisms: PLAIN (RFC 4616: ``authzid NUL authcid NUL password``; the users are the broker's
``user_<name>="<password>"`` JAAS options; an authzid other than the user is refused, as Kafka) and
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802 via ``scramp``, two rounds; credentials from the salted credentials
file). Error texts are Kafka's in substance and never say whether the user or the password was wrong.

Not thread-safe: belongs to its connection (event-loop thread).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import scramp

from broker_runtime.errors import ErrorCode
from broker_runtime.security.scram_credentials import SCRAM_MECHANISMS, ScramCredentialStore

__all__ = [
    "AUTHENTICATE",
    "COMPLETE",
    "FAILED",
    "HANDSHAKE",
    "SASL_MECHANISMS",
    "AuthStep",
    "SaslServerAuthenticator",
]

#: The mechanisms this broker implements.
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)

HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "HANDSHAKE", "AUTHENTICATE", "COMPLETE", "FAILED"


@dataclass(frozen=True)
class AuthStep:
    """The answer to one token: ``error_code`` NONE with a ``challenge`` (possibly empty) or a failure."""

    error_code: int
    error_message: str | None
    challenge: bytes
    complete: bool


class SaslServerAuthenticator:
    """See the module docstring."""

    def __init__(
        self,
        enabled: tuple[str, ...],
        *,
        plain_users: Mapping[str, str] | None = None,
        scram_store: ScramCredentialStore | None = None,
    ) -> None:
        self.enabled = enabled
        self._plain_users = dict(plain_users or {})
        self._scram_store = scram_store
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False
        #: ``User:<name>`` once COMPLETE.
        self.principal: str | None = None
        self._scram: Any = None
        self._scram_user = ""

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def handshake(self, mechanism: str, version: int) -> int:
        """Answer SaslHandshake: NONE, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE (then close)."""
        if self.state != HANDSHAKE:
            self.state = FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.enabled:
            self.state = FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self.state = AUTHENTICATE
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> AuthStep:
        """Process one client token (SaslAuthenticate's AuthBytes or a raw v0 token)."""
        if self.state != AUTHENTICATE:
            self.state = FAILED
            return AuthStep(
                ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SASL token: no SaslHandshake yet", b"", False
            )
        if self.mechanism == "PLAIN":
            return self._plain(token)
        return self._scram_step(token)

    def _fail(self, message: str) -> AuthStep:
        self.state = FAILED
        return AuthStep(ErrorCode.SASL_AUTHENTICATION_FAILED, message, b"", False)

    def _done(self, user: str, challenge: bytes = b"") -> AuthStep:
        self.state = COMPLETE
        self.principal = f"User:{user}"
        return AuthStep(ErrorCode.NONE, None, challenge, True)

    def _plain(self, token: bytes) -> AuthStep:
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            return self._fail("Authentication failed: invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, user, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            return self._fail("Authentication failed: invalid SASL/PLAIN response: not UTF-8")
        if not user:
            return self._fail("Authentication failed: username not specified")
        if authzid and authzid != user:
            return self._fail(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        expected = self._plain_users.get(user)
        # Compare even for an unknown user, so the answer time does not tell which part was wrong.
        ok = hmac.compare_digest((expected or "\x00").encode(), password.encode()) and expected is not None
        if not ok:
            return self._fail("Authentication failed: Invalid username or password")
        return self._done(user)

    def _scram_step(self, token: bytes) -> AuthStep:
        mechanism = self.mechanism
        assert mechanism is not None
        store = self._scram_store
        try:
            text = bytes(token).decode("utf-8")
            if self._scram is None:

                def lookup(user: str) -> tuple[bytes, bytes, bytes, int]:
                    self._scram_user = user
                    cred = store.lookup(user, mechanism) if store is not None else None
                    if cred is None:
                        raise scramp.ScramException("unknown user")
                    return cred.auth_info()

                server = scramp.ScramMechanism(mechanism).make_server(lookup)
                server.set_client_first(text)
                self._scram = server
                return AuthStep(ErrorCode.NONE, None, server.get_server_first().encode(), False)
            server = self._scram
            server.set_client_final(text)
            final = server.get_server_final().encode()
            return self._done(self._scram_user, final)
        except (scramp.ScramException, UnicodeDecodeError, ValueError, KeyError):
            return self._fail(
                f"Authentication failed during authentication due to invalid credentials with SASL mechanism "
                f"{mechanism}"
            )
