"""The SCRAM server exchange on its own (sans-IO): scramp's client logs in against it, and every malformed or
forged message is refused with the generic failure (Kafka's ``ScramMessages`` grammar; RFC 5802's checks)."""

from __future__ import annotations

import base64

import pytest
import scramp

from broker_runtime.security.scram_credentials import ScramCredential
from broker_runtime.security.scram_server import AUTHZID_MISMATCH, ScramError, ScramServer

MECHANISM = "SCRAM-SHA-256"


def _store(user: str, password: str) -> dict[str, ScramCredential]:
    salt, stored, server, iterations = scramp.ScramMechanism(MECHANISM).make_auth_info(password, 4096)
    return {user: ScramCredential(salt, stored, server, iterations)}


def test_scramp_client_logs_in_and_checks_the_server_signature() -> None:
    server = ScramServer(MECHANISM, _store("alice", "pw").get)
    client = scramp.ScramClient([MECHANISM], "alice", "pw")
    first = server.client_first(client.get_client_first().encode())
    client.set_server_first(first.decode())
    final = server.client_final(client.get_client_final().encode())
    client.set_server_final(final.decode())  # raises when the server's signature is wrong
    assert server.username == "alice"


def _first_round(server: ScramServer, message: bytes = b"n,,n=alice,r=abc") -> bytes:
    return server.client_first(message)


@pytest.mark.parametrize(
    "message",
    [
        b"",
        b"y,,n=alice,r=abc",  # channel-binding flag other than "n"
        b"p=tls-unique,,n=alice,r=abc",
        b"n,,n=alice",  # no nonce
        b"n,,n=,r=abc",  # empty name
        b"n,,n=al=ice,r=abc",  # "=" not followed by 2C / 3D
        b"n,,n=al\xc3\xa9ce,r=abc",  # outside US-ASCII
        b"n,,n=alice,r=a,b",  # a comma where an extension is expected
        b"n,,n=bob,r=abc",  # unknown user
    ],
)
def test_malformed_or_unknown_client_first_is_refused_generically(message: bytes) -> None:
    server = ScramServer(MECHANISM, _store("alice", "pw").get)
    with pytest.raises(ScramError) as caught:
        server.client_first(message)
    assert caught.value.client_message is None


def test_authzid_other_than_the_user_gets_kafkas_message_equal_one_is_accepted() -> None:
    store = _store("alice", "pw").get
    with pytest.raises(ScramError) as caught:
        ScramServer(MECHANISM, store).client_first(b"n,a=bob,n=alice,r=abc")
    assert caught.value.client_message == AUTHZID_MISMATCH
    assert ScramServer(MECHANISM, store).client_first(b"n,a=alice,n=alice,r=abc").startswith(b"r=abc")


def test_extensions_and_reserved_attribute_are_accepted_as_kafka() -> None:
    server = ScramServer(MECHANISM, _store("alice", "pw").get)
    assert server.client_first(b"n,,m=x,n=alice,r=abc,tokenauth=false").startswith(b"r=abc")


@pytest.mark.parametrize(
    "forge",
    [
        lambda c, n, p: f"c={c},r={n}x,p={p}",  # another nonce
        lambda c, n, p: f"c={base64.b64encode(b'n,a=alice,').decode()},r={n},p={p}",  # another gs2 header
        lambda c, n, p: f"c={c},r={n},p={base64.b64encode(b'0' * 32).decode()}",  # a wrong proof
        lambda c, n, p: f"c={c},r={n},p={base64.b64encode(b'0' * 31).decode()}",  # a proof of the wrong size
        lambda c, n, p: f"c={c},r={n},p=!!!!",  # not base64
        lambda c, n, p: f"c={c},r={n}",  # no proof
    ],
)
def test_forged_client_final_is_refused(forge: object) -> None:
    server = ScramServer(MECHANISM, _store("alice", "pw").get)
    first = _first_round(server).decode()
    nonce = first.split(",")[0][2:]
    channel = base64.b64encode(b"n,,").decode()
    proof = base64.b64encode(b"\0" * 32).decode()
    with pytest.raises(ScramError):
        server.client_final(forge(channel, nonce, proof).encode())  # type: ignore[operator]


def test_one_proof_per_exchange() -> None:
    server = ScramServer(MECHANISM, _store("alice", "pw").get)
    client = scramp.ScramClient([MECHANISM], "alice", "pw")
    client.set_server_first(server.client_first(client.get_client_first().encode()).decode())
    final = client.get_client_final().encode()
    server.client_final(final)
    with pytest.raises(ScramError):
        server.client_final(final)
