"""The read-only ``.txnindex`` reader a process beside the broker uses (the connector's direct scan)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker_runtime.errors import CorruptIndexError
from broker_runtime.storage.txn_index import AbortedTxn, TransactionIndex, read_entries_read_only


def test_whole_entries_only_while_an_entry_is_being_appended(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    assert read_entries_read_only(path) == []  # no file: no aborted transaction
    index = TransactionIndex(path, 0)
    entries = [AbortedTxn(7, 0, 4, 5), AbortedTxn(9, 3, 10, 11)]
    for entry in entries:
        index.append(entry)
    assert read_entries_read_only(path) == entries
    with open(path, "ab") as f:  # the broker's next append, caught half written
        f.write(AbortedTxn(7, 12, 15, 16).encode()[:20])
    assert read_entries_read_only(path) == entries


def test_a_malformed_entry_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(
        AbortedTxn(7, 5, 9, 10).encode() + AbortedTxn(8, 0, 3, 4).encode()
    )  # markers out of order
    with pytest.raises(CorruptIndexError, match=path.name):
        read_entries_read_only(path)
