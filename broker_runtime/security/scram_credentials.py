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

Readers (the broker's authenticator) re-read the file when its modification time changes, so users added or
removed with ``pylog-broker users`` take effect on the next authentication without a restart. Writers are the
CLI (offline edits under the lock). Thread-safe: :class:`ScramCredentialStore` caches one parsed snapshot and
replaces it whole.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import scramp

from broker_runtime.errors import ConfigError
from broker_runtime.fsutil import FileLock, write_atomically

__all__ = [
    "CREDENTIALS_FILE",
    "DEFAULT_ITERATIONS",
    "SCRAM_MECHANISMS",
    "ScramCredential",
    "ScramCredentialStore",
    "credentials_path",
    "delete_user",
    "list_users",
    "upsert_user",
]

CREDENTIALS_FILE = "scram-credentials.json"
#: Kafka's minimum iteration count for SCRAM-SHA-256/512 is 4096; its tools' common example is 8192.
DEFAULT_ITERATIONS = 8192
MIN_ITERATIONS = 4096
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_LOCK_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def auth_info(self) -> tuple[bytes, bytes, bytes, int]:
        """The tuple ``scramp`` servers look users up as."""
        return self.salt, self.stored_key, self.server_key, self.iterations


def credentials_path(log_dirs: tuple[str, ...] | list[str], cluster_dir: str | None) -> Path:
    """Where the broker (or the CLI for that broker's config) keeps the SCRAM credentials."""
    base = cluster_dir or log_dirs[0]
    return Path(base) / CREDENTIALS_FILE


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
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True).encode())
    os.chmod(path, 0o600)


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
    if not user:
        raise ConfigError("the user name must not be empty")
    if not all(0 < ord(c) < 0x80 for c in user):
        raise ConfigError(
            f"user name {user!r}: SCRAM user names must be US-ASCII without NUL (Kafka's SCRAM grammar; the broker "
            "could never log this user in)"
        )
    if not password:
        raise ConfigError("the password must not be empty")
    salt, stored_key, server_key, count = scramp.ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    locked = _Locked(path)
    with locked as data:
        entry = data["users"].setdefault(user, {})
        entry[mechanism] = {
            "salt": base64.b64encode(salt).decode(),
            "stored_key": base64.b64encode(stored_key).decode(),
            "server_key": base64.b64encode(server_key).decode(),
            "iterations": count,
        }
        _write(path, data)


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
        self._stamp: tuple[int, int] | None = None
        self._users: dict[str, dict[str, ScramCredential]] = {}

    def lookup(self, user: str, mechanism: str) -> ScramCredential | None:
        """``user``'s credential for ``mechanism`` (None: none stored); :class:`ConfigError` naming the file and
        the defect when the file cannot be read or parsed (nothing is cached then: the next lookup reads again)."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
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
