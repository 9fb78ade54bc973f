"""Files that hold secrets are private from the moment they exist: the SCRAM credentials file, the dynamic broker
configs and the cluster metadata (a dynamic listener key store's password is among their values) are written
0600 through a temporary file that already has those bits before the data goes in, never chmod-ed after."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from broker_runtime import fsutil
from broker_runtime.security.scram_credentials import CREDENTIALS_FILE, upsert_user


def _spy_on_writes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, bytes]]:
    """Every temporary file as it is when ``write_atomically`` renames it into place: (name, mode, content)."""
    seen: list[tuple[str, int, bytes]] = []
    real_replace = os.replace

    def replace(src: Any, dst: Any) -> None:
        seen.append((Path(dst).name, stat.S_IMODE(os.stat(src).st_mode), Path(src).read_bytes()))
        real_replace(src, dst)

    monkeypatch.setattr(fsutil.os, "replace", replace)
    return seen


def test_write_atomically_creates_the_file_with_its_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(fsutil.os, "fsync", fsync)
    old_umask = os.umask(0o022)
    try:
        stale = (
            tmp_path / f"secret.{os.getpid()}.tmp"
        )  # a leftover temporary file of that name, world-readable
        stale.write_bytes(b"old")
        stale.chmod(0o644)
        modes.clear()
        fsutil.write_atomically(tmp_path / "secret", b"s3cret", mode=0o600)
        fsutil.write_atomically(tmp_path / "plain", b"data")
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE((tmp_path / "secret").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "plain").stat().st_mode) == 0o644
    assert modes == [0o600, 0o644], modes  # the bits the data was written under, the stale file's 0644 gone


def test_scram_credentials_file_is_never_readable_by_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _spy_on_writes(monkeypatch)
    old_umask = os.umask(0o022)
    try:
        upsert_user(tmp_path / CREDENTIALS_FILE, "alice", "SCRAM-SHA-256", "pw-alice", iterations=4096)
    finally:
        os.umask(old_umask)
    assert [(name, mode) for name, mode, _ in seen] == [(CREDENTIALS_FILE, 0o600)]
    assert stat.S_IMODE((tmp_path / CREDENTIALS_FILE).stat().st_mode) == 0o600
