"""The SCRAM credentials file: salted keys per mechanism and user, never a password.

Location: ``scram-credentials.json`` in the broker's first log directory (a single broker) or in
``pylog.cluster.dir`` (every broker of a cluster reads the same file); :func:`credentials_path` decides.
Format (JSON, written atomically under ``scram-credentials.json.lock``)::

    {"version": 1,
     "users": {"alice": {"SCRAM-SHA-256": {"salt": "<base64>", "stored_key": "<base64>",
                                            "server_key": "<base64>", "iterations": 8192}, ...}}}

These are RFC 5802's StoredKey = H(HMAC(SaltedPassword, "Client Key")) and ServerKey = HMAC(SaltedPassword,
"Server Key") (computed by ``scramp``): enough to verify a client's proof, not to recover the password or to
log in as the user (Kafka's ScramCredential, kept in its metadata log; pylog keeps it in this file). The file
is created 0600.

Readers (the broker's authenticator) re-read the file when it changed (its inode, modification and change
times or size: every write renames a new file over it), so users added or removed take effect on the next
authentication without a restart, on every broker reading the file. Writers, each a read-modify-write under the
lock: the CLI (``pylog-broker users``, offline) and any broker answering AlterUserScramCredentials
(:func:`alter_credentials`, the salted password a client sent turned into StoredKey and ServerKey as Kafka's
``ScramControlManager`` does). Thread-safe: :class:`ScramCredentialStore` caches one parsed snapshot and
replaces it whole. Nothing here logs; a :class:`ScramCredential`'s repr hides its salt and keys.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker_runtime.errors import ConfigError
from broker_runtime.fsutil import FileLock, write_atomically

__all__ = [
    "CREDENTIALS_FILE",
    "DEFAULT_ITERATIONS",
    "MAX_ITERATIONS",
    "MIN_ITERATIONS",
    "SCRAM_MECHANISMS",
    "ScramCredential",
    "ScramCredentialStore",
    "alter_credentials",
    "credential_from_salted_password",
    "credentials_path",
    "delete_user",
    "list_users",
    "salted_password",
    "upsert_user",
    "user_name_problem",
]

CREDENTIALS_FILE = "scram-credentials.json"
#: Kafka's minimum iteration count for SCRAM-SHA-256/512 is 4096; its tools' common example is 8192.
DEFAULT_ITERATIONS = 8192
MIN_ITERATIONS = 4096
#: Kafka's maximum for SCRAM-SHA-256/512 (its ``ScramMechanism.maxIterations``): AlterUserScramCredentials
#: refuses more (UNACCEPTABLE_CREDENTIAL), as Kafka's controller does.
MAX_ITERATIONS = 16384
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_LOCK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """The tuple ``scramp`` servers look users up as."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def credentials_path(log_dirs: tuple[str, ...] | list[str], cluster_dir: str | None) -> Path:
    """Where the broker (or the CLI for that broker's config) keeps the SCRAM credentials."""
    base = cluster_dir or log_dirs[0]
    return Path(base) / CREDENTIALS_FILE


def user_name_problem(user: str) -> str | None:
    """Why ``user`` cannot be a SCRAM user here (None: it can): empty, or not US-ASCII without NUL (Kafka's SCRAM
    grammar, which pylog's authenticator applies: such a user could never log in)."""
    if not user:
        return "the user name must not be empty"
    if not all(0 < ord(c) < 0x80 for c in user):
        return (
            f"user name {user!r}: SCRAM user names must be US-ASCII without NUL (Kafka's SCRAM grammar; the broker "
            "could never log this user in)"
        )
    return None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(password, salt, iterations), PBKDF2 with the mechanism's HMAC over the UTF-8 password (no
    SASLprep, as Kafka's ``ScramFormatter``): what a client sends in an AlterUserScramCredentials upsertion."""
    return hashlib.pbkdf2_hmac(_HASHES[mechanism], password.encode("utf-8"), salt, iterations)


def credential_from_salted_password(
    mechanism: str, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential of a salted password: StoredKey = H(HMAC(salted, "Client Key")), ServerKey =
    HMAC(salted, "Server Key") (RFC 5802; Kafka's ``ScramFormatter`` on its controller)."""
    digest = _HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", digest).digest()
    stored_key = hashlib.new(digest, client_key).digest()
    return ScramCredential(salt, stored_key, hmac.new(salted, b"Server Key", digest).digest(), iterations)


def _encoded(credential: ScramCredential) -> dict[str, Any]:
    return {
        "salt": base64.b64encode(credential.salt).decode(),
        "stored_key": base64.b64encode(credential.stored_key).decode(),
        "server_key": base64.b64encode(credential.server_key).decode(),
        "iterations": credential.iterations,
    }


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"version": 1, "users": {}}
    except (OSError, ValueError) as exc:
        raise ConfigError(f"SCRAM credentials file {str(path)!r} is unreadable: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("users"), dict):
        raise ConfigError(f"SCRAM credentials file {str(path)!r} has no 'users' object")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True).encode(), mode=0o600)


class _Locked:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = FileLock(str(path) + ".lock")

    def __enter__(self) -> dict[str, Any]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.lock.acquire(_LOCK_TIMEOUT_S):
            raise ConfigError(f"SCRAM credentials file {str(self.path)!r} is locked by another writer")
        return _read(self.path)

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def upsert_user(
    path: Path, user: str, mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS
) -> None:
    """Add or replace ``user``'s credential for ``mechanism`` (salted with a fresh random salt)."""
    if mechanism not in SCRAM_MECHANISMS:
        raise ConfigError(f"mechanism {mechanism!r}: expected one of {', '.join(SCRAM_MECHANISMS)}")
    if iterations < MIN_ITERATIONS:
        raise ConfigError(f"iterations={iterations}: must be >= {MIN_ITERATIONS} (as Kafka)")
    problem = user_name_problem(user)
    if problem is not None:
        raise ConfigError(problem)
    if not password:
        raise ConfigError("the password must not be empty")
    import scramp  # only writing a credential needs it

    salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    locked = _Locked(path)
    with locked as data:
        entry = data["users"].setdefault(user, {})
        entry[mechanism] = _encoded(ScramCredential(salt, stored_key, server_key, count))
        _write(path, data)


def alter_credentials(
    path: Path,
    deletions: Iterable[tuple[str, str]],
    upsertions: Iterable[tuple[str, str, ScramCredential]],
) -> set[str]:
    """Remove each ``(user, mechanism)`` of ``deletions`` and store each ``(user, mechanism, credential)`` of
    ``upsertions``, in one atomic write under the lock (no write when nothing changes). A deletion of a
    credential that is not stored is not applied: its user is returned (Kafka's RESOURCE_NOT_FOUND), the others
    are. The caller validated names, mechanisms and iterations and gives each user at most one alteration."""
    missing: set[str] = set()
    changed = False
    with _Locked(path) as data:
        users = data["users"]
        for user, mechanism in deletions:
            entry = users.get(user)
            if entry is None or mechanism not in entry:
                missing.add(user)
                continue
            del entry[mechanism]
            if not entry:
                del users[user]
            changed = True
        for user, mechanism, credential in upsertions:
            users.setdefault(user, {})[mechanism] = _encoded(credential)
            changed = True
        if changed:
            _write(path, data)
    return missing


def delete_user(path: Path, user: str, mechanism: str | None = None) -> bool:
    """Remove ``user``'s credential for ``mechanism`` (every mechanism when None); False if there was none."""
    with _Locked(path) as data:
        entry = data["users"].get(user)
        if entry is None or (mechanism is not None and mechanism not in entry):
            return False
        if mechanism is None:
            del data["users"][user]
        else:
            del entry[mechanism]
            if not entry:
                del data["users"][user]
        _write(path, data)
        return True


def list_users(path: Path) -> dict[str, dict[str, int]]:
    """user -> {mechanism: iterations}."""
    data = _read(path)
    return {
        user: {mech: int(cred["iterations"]) for mech, cred in sorted(entry.items())}
        for user, entry in sorted(data["users"].items())
    }


class ScramCredentialStore:
    """The broker's read side: looks credentials up, re-reading the file when it changed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int, int] | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism`` (None: none stored); :class:`ConfigError` naming the file and
        the defect when the file cannot be read or parsed (nothing is cached then: the next lookup reads again)."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp != self._stamp:
            users: dict[str, dict[str, ScramCredential]] = {}
            if stamp is not None:
                for name, entry in _read(self.path)["users"].items():
                    try:
                        users[name] = {
                            mech: ScramCredential(
                                base64.b64decode(c["salt"], validate=True),
                                base64.b64decode(c["stored_key"], validate=True),
                                base64.b64decode(c["server_key"], validate=True),
                                int(c["iterations"]),
                            )
                            for mech, c in entry.items()
                        }
                    except (
                        KeyError,
                        TypeError,
                        ValueError,
                        AttributeError,
                    ) as exc:  # binascii.Error is a ValueError
                        raise ConfigError(
                            f"SCRAM credentials file {str(self.path)!r} has a malformed entry for user {name!r}: "
                            f"{type(exc).__name__}: {exc}"
                        ) from None
            self._users, self._stamp = users, stamp
        return self._users.get(user, {}).get(mechanism)
