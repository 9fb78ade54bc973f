"""The server's half of one SCRAM-SHA-256 / SCRAM-SHA-512 exchange (RFC 5802), as Kafka's ``ScramSaslServer``
speaks it; sans-IO, two rounds: :meth:`ScramServer.client_first` answers the server-first message,
:meth:`ScramServer.client_final` checks the proof and answers the server-final message.

Message grammar (Kafka's ``ScramMessages``, US-ASCII only, matched on the raw token bytes)::

    client-first = "n," ["a=" saslname] "," ["m=" value ","] "n=" saslname ",r=" nonce *("," alpha "=" value)
    client-final = "c=" base64 ",r=" nonce *("," alpha "=" value) ",p=" base64
    saslname     = 1*(any byte 0x01-0x7F but "=" and "," | "=2C" | "=3D")
    nonce        = 1*(printable ASCII but ",");   value = 1*(any byte 0x01-0x7F but ",")

Only the channel-binding flag "n" is accepted (no channel binding; as Kafka). The user name is the saslname with
``=2C`` / ``=3D`` decoded, looked up exactly as written: no SASLprep, as Kafka (a name outside US-ASCII cannot
log in with SCRAM, there as here). An authorization id equal to the user name is accepted, another one refused
with Kafka's message (after the credential lookup, so an unknown user still gets the generic failure).
Extensions are accepted and ignored (the AuthMessage covers them as sent).

Cost (nothing before login may cost more than its bytes): each message is checked by one regular expression
whose every byte is decided once (no backtracking across attributes), then sliced; no per-character Python
code runs on client bytes, and the token itself is bounded by ``sasl.server.max.receive.size`` (see
:mod:`broker_runtime.server.network`). The proof check is one HMAC and one hash per exchange; the expensive
salted-password derivation happened when the credential was created.

Failures raise :class:`ScramError`: its ``client_message`` is the text Kafka sends for that case, or None for the
generic "invalid credentials" answer (never saying which part was wrong). Not thread-safe: one per login.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable

from broker_runtime.security.scram_credentials import MIN_ITERATIONS, ScramCredential

__all__ = ["AUTHZID_MISMATCH", "ScramError", "ScramServer"]

#: Kafka's answer to an authorization id other than the user name (``ScramSaslServer``).
AUTHZID_MISMATCH = (
    "Authentication failed: Client requested an authorization id that is different from username"
)

_HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}

_SAFE = rb"[\x01-\x2b\x2d-\x3c\x3e-\x7f]"  # 0x01-0x7F but "," and "="
#: 1*(SAFE | "=2C" | "=3D"), written so that runs of plain bytes are one C-level loop (an alternation per byte
#: costs ~20x more in ``re``).
_SASLNAME = rb"(?=[^,])" + _SAFE + rb"*(?:=(?:2C|3D)" + _SAFE + rb"*)*"
_VALUE = rb"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = rb"[\x21-\x2b\x2d-\x7e]+"
_BASE64 = rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?"
_EXTENSIONS = rb"(?:,[A-Za-z]+=" + _VALUE + rb")*"
_CLIENT_FIRST = re.compile(
    rb"(?P<gs2>n,(?:a=(?P<authzid>" + _SASLNAME + rb"))?,)"
    rb"(?P<bare>(?:m="
    + _VALUE
    + rb",)?n=(?P<saslname>"
    + _SASLNAME
    + rb"),r=(?P<nonce>"
    + _PRINTABLE
    + rb")"
    + _EXTENSIONS
    + rb")"
)
_CLIENT_FINAL = re.compile(
    rb"(?P<without_proof>c=(?P<channel>"
    + _BASE64
    + rb"),r=(?P<nonce>"
    + _PRINTABLE
    + rb")"
    + _EXTENSIONS
    + rb")"
    rb",p=(?P<proof>" + _BASE64 + rb")"
)


class ScramError(Exception):
    """A refused SCRAM message; ``client_message`` is what the client is told (None: the generic failure)."""

    def __init__(self, reason: str, client_message: str | None = None) -> None:
        super().__init__(reason)
        self.client_message = client_message


def _saslname(raw: bytes) -> str:
    return raw.decode("ascii").replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange; ``lookup(user)`` returns the user's credential for this mechanism, or None."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None]) -> None:
        self._hash = _HASHES[mechanism]
        self._lookup = lookup
        #: The user name of the client-first message ("" before it).
        self.username = ""
        self._credential: ScramCredential | None = None
        self._gs2_header = b""
        self._nonce = b""
        self._auth_prefix = b""  # client-first-bare "," server-first ","

    def client_first(self, token: bytes) -> bytes:
        """Check the client-first message, look the user up; return the server-first message."""
        if self._credential is not None:
            raise ScramError("unexpected second client-first message")
        match = _CLIENT_FIRST.fullmatch(token)
        if match is None:
            raise ScramError("invalid SCRAM client first message format")
        self.username = _saslname(match["saslname"])
        credential = self._lookup(self.username)
        if credential is None:
            raise ScramError("invalid user credentials")
        authzid = match["authzid"]
        if authzid is not None and _saslname(authzid) != self.username:
            raise ScramError("authorization id differs from the user name", AUTHZID_MISMATCH)
        if credential.iterations < MIN_ITERATIONS:
            raise ScramError(f"iterations {credential.iterations} is less than the minimum {MIN_ITERATIONS}")
        self._credential = credential
        self._gs2_header = match["gs2"]
        self._nonce = match["nonce"] + secrets.token_urlsafe(24).encode()
        server_first = b"r=%s,s=%s,i=%d" % (
            self._nonce,
            base64.b64encode(credential.salt),
            credential.iterations,
        )
        self._auth_prefix = match["bare"] + b"," + server_first + b","
        return server_first

    def client_final(self, token: bytes) -> bytes:
        """Check the client's proof; return the server-final message (the server signature)."""
        credential = self._credential
        if credential is None:
            raise ScramError("client final message before the client first message")
        self._credential = None  # one proof per exchange
        match = _CLIENT_FINAL.fullmatch(token)
        if match is None:
            raise ScramError("invalid SCRAM client final message format")
        try:
            channel = base64.b64decode(match["channel"], validate=True)
            proof = base64.b64decode(match["proof"], validate=True)
        except (binascii.Error, ValueError):
            raise ScramError("invalid base64 in the SCRAM client final message") from None
        if not hmac.compare_digest(channel, self._gs2_header):
            raise ScramError("the channel binding does not match the client first message's gs2 header")
        if match["nonce"] != self._nonce:
            raise ScramError("invalid client nonce in the final client message")
        auth_message = self._auth_prefix + match["without_proof"]
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(client_signature):
            raise ScramError("invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self._hash(client_key).digest(), credential.stored_key):
            raise ScramError("invalid client credentials")
        return b"v=" + base64.b64encode(hmac.digest(credential.server_key, auth_message, self._hash))
