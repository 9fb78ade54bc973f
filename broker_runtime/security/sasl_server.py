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

Session lifetime and re-authentication (KIP-368, Kafka's ``connections.max.reauth.ms``): with a positive
maximum for the mechanism used (``max_reauth_ms``), a completed login gets a session of that lifetime
(:attr:`session_lifetime_ms`, sent in SaslAuthenticate v1+; the credentials here never expire sooner) ending
at :attr:`session_expires_at` (``clock`` seconds). The caller closes a connection whose session expired when
its next request arrives (:meth:`session_expired`), whatever the client's SaslAuthenticate version, as Kafka.
Before that, a SaslHandshake on the authenticated connection may start a re-authentication
(:meth:`begin_reauthentication`: COMPLETE back to HANDSHAKE; at most one per second, as Kafka; never with
no session lifetime): the same mechanism (another one: UNSUPPORTED_SASL_MECHANISM, then closed; Kafka accepts
the handshake and fails the next token instead) and the same principal (another user: SASL_AUTHENTICATION_FAILED,
"Cannot change principals during re-authentication"), after which a new session starts. While it runs the
connection is not authenticated: only SaslHandshake/SaslAuthenticate are served.

Mechanisms: PLAIN (RFC 4616: ``authzid NUL authcid NUL password``; the users are the broker's
``user_<name>="<password>"`` JAAS options; an authzid other than the user is refused, as Kafka) and
SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, two rounds, :mod:`.scram_server`: Kafka's message grammar, no SASLprep,
an authzid equal to the user accepted; credentials from the salted credentials file, whose failure to be read
fails the login with a WARNING, never the connection as an internal error) and OAUTHBEARER (RFC 7628,
:mod:`.oauthbearer`: the listener's token validator decides; a refused token is answered with Kafka's
``{"status":"invalid_token"}`` challenge, the client's ``^A`` acknowledging it fails the login with it and any
other message is read as a new client first message, as Kafka's ``OAuthBearerSaslServer``; the session
never outlives the token, whatever ``connections.max.reauth.ms`` says, as Kafka's ``CREDENTIAL.LIFETIME.MS``). Error texts are Kafka's in substance
and never say whether the user or the password was wrong. Cost: a token is at most ``sasl.server.max.receive.size``
bytes (the connection enforces it from the size prefix) and every mechanism's parsing is linear C-level work on
it (splitting, decoding, one regular expression); no per-character Python code runs on an unauthenticated
client's bytes.

Not thread-safe: belongs to its connection (event-loop thread).
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from broker_runtime.errors import ConfigError, ErrorCode
from broker_runtime.security.oauthbearer import (
    InvalidMessage,
    InvalidToken,
    TokenValidator,
    parse_client_first,
)
from broker_runtime.security.scram_credentials import SCRAM_MECHANISMS, ScramCredential, ScramCredentialStore
from broker_runtime.security.scram_server import ScramError, ScramServer

__all__ = [
    "AUTHENTICATE",
    "COMPLETE",
    "FAILED",
    "HANDSHAKE",
    "SASL_MECHANISMS",
    "AuthStep",
    "SaslServerAuthenticator",
]

#: Kafka's ``MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS``: a connection re-authenticates at most once a second.
MIN_REAUTH_INTERVAL_S = 1.0

#: The mechanisms this broker implements.
SASL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")

HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = "HANDSHAKE", "AUTHENTICATE", "COMPLETE", "FAILED"

_log = logging.getLogger(__name__)


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
        max_reauth_ms: Mapping[str, int] | None = None,
        oauth_validator: TokenValidator | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.enabled = enabled
        self._plain_users = dict(plain_users or {})
        self._scram_store = scram_store
        #: mechanism -> ``connections.max.reauth.ms`` (0 or missing: sessions never expire).
        self._max_reauth_ms = dict(max_reauth_ms or {})
        self._clock = clock
        self._wall_ms = wall_ms
        self._oauth_validator = oauth_validator
        #: The JSON error of a refused OAUTHBEARER token, sent as a challenge; the client's next token fails.
        self._oauth_error: str | None = None
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.raw_tokens = False
        #: ``User:<name>`` once COMPLETE.
        self.principal: str | None = None
        #: The session lifetime of the last login (0: none), and when it ends (``clock`` seconds; None: never).
        self.session_lifetime_ms = 0
        self.session_expires_at: float | None = None
        #: ``(mechanism, principal)`` of the session being re-authenticated, None when not re-authenticating.
        self.reauthenticating_from: tuple[str, str] | None = None
        self._last_reauth_start: float | None = None
        self._scram: ScramServer | None = None

    @property
    def complete(self) -> bool:
        return self.state == COMPLETE

    def session_expired(self, now: float) -> bool:
        """True when a completed login's session lifetime is over (the connection must be closed)."""
        return (
            self.state == COMPLETE and self.session_expires_at is not None and now > self.session_expires_at
        )

    def begin_reauthentication(self, now: float) -> bool:
        """Start a re-authentication on a SaslHandshake of an authenticated connection; False when none may
        start (no session lifetime, or the last one began less than a second ago), so the handshake is answered
        as on any authenticated connection (ILLEGAL_SASL_STATE), as Kafka."""
        if self.state != COMPLETE or self.session_expires_at is None:
            return False
        if self._last_reauth_start is not None and now - self._last_reauth_start < MIN_REAUTH_INTERVAL_S:
            return False
        assert self.mechanism is not None and self.principal is not None
        self._last_reauth_start = now
        self.reauthenticating_from = (self.mechanism, self.principal)
        self.state = HANDSHAKE
        self._scram = None
        self._oauth_error = None
        return True

    def handshake(self, mechanism: str, version: int) -> int:
        """Answer SaslHandshake: NONE, UNSUPPORTED_SASL_MECHANISM or ILLEGAL_SASL_STATE (then close)."""
        if self.state != HANDSHAKE:
            self.state = FAILED
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.enabled:
            self.state = FAILED
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        if self.reauthenticating_from is not None and mechanism != self.reauthenticating_from[0]:
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
        if self.mechanism == "OAUTHBEARER":
            return self._oauthbearer(token)
        return self._scram_step(token)

    def _fail(self, message: str) -> AuthStep:
        self.state = FAILED
        return AuthStep(ErrorCode.SASL_AUTHENTICATION_FAILED, message, b"", False)

    def _generic_failure(self) -> str:
        """Kafka's answer to a mechanism's ``SaslException``: the phase and the mechanism, nothing else."""
        phase = "re-authentication" if self.reauthenticating_from is not None else "authentication"
        return f"Authentication failed during {phase} due to invalid credentials with SASL mechanism {self.mechanism}"

    def _done(self, user: str, challenge: bytes = b"", credential_expires_ms: int | None = None) -> AuthStep:
        principal = f"User:{user}"
        previous = self.reauthenticating_from
        if previous is not None and previous[1] != principal:
            return self._fail(
                f"Cannot change principals during re-authentication from {previous[1]}: {principal}"
            )
        self.state = COMPLETE
        self.principal = principal
        self.reauthenticating_from = None
        assert self.mechanism is not None
        lifetime_ms = max(0, self._max_reauth_ms.get(self.mechanism, 0))
        bounded = lifetime_ms > 0
        if credential_expires_ms is not None:
            # Kafka's SaslServerAuthenticator: a credential that expires bounds the session, whatever
            # connections.max.reauth.ms says (0 if it already expired within the allowed clock skew).
            remaining_ms = max(0, credential_expires_ms - self._wall_ms())
            lifetime_ms = min(lifetime_ms, remaining_ms) if bounded else remaining_ms
            bounded = True
        self.session_lifetime_ms = lifetime_ms
        self.session_expires_at = self._clock() + lifetime_ms / 1000 if bounded else None
        return AuthStep(ErrorCode.NONE, None, challenge, True)

    def _plain(self, token: bytes) -> AuthStep:
        parts = bytes(token).split(b"\x00", 3)  # at most 4 parts, whatever the token holds
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

    def _oauthbearer(self, token: bytes) -> AuthStep:
        """Kafka's ``OAuthBearerSaslServer.evaluateResponse``: a refused token is answered with the JSON error as
        a challenge; the client's next message, when it is the lone ``^A`` (``%x01``) that acknowledges it, fails
        the login with that JSON as the error message (``SaslAuthenticationException``); anything else is read
        as a new client first message. A message that is not one fails with the generic text (Kafka's
        ``SaslServerAuthenticator`` answers a ``SaslException`` so, naming nothing of what was wrong)."""
        refused, self._oauth_error = self._oauth_error, None
        if refused is not None and bytes(token) == b"\x01":
            return self._fail(refused)
        try:
            authzid, value = parse_client_first(token)
        except InvalidMessage as exc:
            _log.debug("SASL/OAUTHBEARER login failed: %s", exc)
            return self._fail(self._generic_failure())
        if self._oauth_validator is None:  # the listener's config check makes this unreachable
            return self._fail(self._generic_failure())
        try:
            bearer = self._oauth_validator.validate(value)
        except InvalidToken as exc:
            _log.warning("SASL/OAUTHBEARER token refused: %s", exc.reason)
            self._oauth_error = exc.error_json()
            return AuthStep(ErrorCode.NONE, None, self._oauth_error.encode(), False)
        if authzid and authzid != bearer.principal:
            return self._fail(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({bearer.principal})"
            )
        return self._done(bearer.principal, credential_expires_ms=bearer.expires_ms)

    def _scram_step(self, token: bytes) -> AuthStep:
        mechanism = self.mechanism
        assert mechanism is not None
        try:
            server = self._scram
            if server is None:
                server = self._scram = ScramServer(mechanism, self._scram_credential)
                return AuthStep(ErrorCode.NONE, None, server.client_first(bytes(token)), False)
            final = server.client_final(bytes(token))
            return self._done(server.username, final)
        except ScramError as exc:
            return self._fail(exc.client_message or self._generic_failure())

    def _scram_credential(self, user: str) -> ScramCredential | None:
        """The stored credential of ``user`` for this login's mechanism; a store that cannot be read fails the
        login (the client gets the generic answer) with a WARNING naming the file and why (as Kafka, whose
        ``ScramSaslServer`` fails the login when its credential callback throws)."""
        assert self.mechanism is not None
        if self._scram_store is None:
            return None
        try:
            return self._scram_store.lookup(user, self.mechanism)
        except ConfigError as exc:
            _log.warning(
                "SASL/%s login failed: the SCRAM credentials could not be obtained: %s", self.mechanism, exc
            )
            raise ScramError("credentials could not be obtained") from None
