"""The swap-file protocol: how a cleaned group of segments replaces the segments it was made from, crash-safely
(Kafka's ``.cleaned`` / ``.swap`` suffixes, ``LocalLog.replaceSegments`` and the swap pass of ``LogLoader``).

Files, in the partition directory, ``B`` the base offset of the group's first segment (20 digits)::

    B.log.cleaned        the group's cleaned batches being written (incomplete until renamed)
    B.txnindex.cleaned   the aborted transactions whose markers the group keeps (possibly empty)
    B.txnindex.swap      the same, fsynced and renamed: complete
    B.log.swap           the cleaned group, fsynced and renamed: complete; its rename is the commit point

Steps (:func:`commit_cleaned`, then :func:`finish_swap`):

1. the cleaner writes ``B.log.cleaned`` (:func:`open_cleaned`), fsyncs it, writes and fsyncs
   ``B.txnindex.cleaned``, renames it to ``B.txnindex.swap``, renames the log to ``B.log.swap`` and fsyncs the
   directory: the clean is committed;
2. under the partition lock (the partition log's ``replace_segments``), :func:`finish_swap` deletes the group's
   other segments and ``B``'s offset and time indexes, renames ``B.txnindex.swap`` over ``B.txnindex`` (or drops
   both when it is empty) and ``B.log.swap`` over ``B.log``, then fsyncs the directory. The partition log then
   reopens ``B`` and rebuilds its indexes.

Invariants: every step of :func:`finish_swap` can be repeated, so a crash anywhere leaves a directory that
:func:`complete_swaps` (run first when a log loads, before stray files are removed) brings to one of the two
states: the clean fully applied or not at all. A ``.log.swap`` is a complete cleaned group; the segments it
replaces are those whose base offset lies in ``[B, its next offset)`` (Kafka's rule; a later group member that
ended up empty and was not yet deleted keeps its old, uncleaned records, which is correct, just not compacted).
``.cleaned`` files and a ``.txnindex.swap`` without its ``.log.swap`` are an unfinished clean and are deleted.

Threading: the cleaner thread writes and commits without the partition lock (nothing else names these files);
:func:`finish_swap` runs under the partition lock (or while loading, before the log exists). Imports only the
segment layer, so the cleaner and the partition log both use it without importing each other.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from broker_runtime.fsutil import fsync_dir
from broker_runtime.protocol.batch_header import BatchHeader, iter_batch_spans
from broker_runtime.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    list_segment_bases,
    parse_segment_file_name,
    segment_path,
)
from broker_runtime.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn

__all__ = [
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "abandon_cleaned",
    "commit_cleaned",
    "complete_swaps",
    "discard_swap",
    "finish_swap",
    "open_cleaned",
]

_log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"


def open_cleaned(dir: Path, base: int) -> BinaryIO:
    """``B.log.cleaned``, created empty for writing (step 1); :func:`commit_cleaned` or :func:`abandon_cleaned`
    closes it."""
    return open(segment_path(dir, base, LOG_SUFFIX + CLEANED_SUFFIX), "wb")  # noqa: SIM115 - closed by commit/abandon


def commit_cleaned(dir: Path, base: int, log_file: BinaryIO, aborted: Sequence[AbortedTxn]) -> Path:
    """Finish step 1: fsync and close ``log_file`` (``B.log.cleaned``), write ``aborted`` as the group's
    ``.txnindex``, rename the txnindex then the log to ``.swap`` and fsync the directory. Returns the log swap."""
    log_file.flush()
    os.fsync(log_file.fileno())
    log_file.close()
    txn_cleaned = segment_path(dir, base, TXN_INDEX_SUFFIX + CLEANED_SUFFIX)
    with open(txn_cleaned, "wb") as f:
        if aborted:  # an empty file needs only the directory fsync below
            f.write(b"".join(e.encode() for e in aborted))
            f.flush()
            os.fsync(f.fileno())
    os.replace(txn_cleaned, segment_path(dir, base, TXN_INDEX_SUFFIX + SWAP_SUFFIX))
    swap = segment_path(dir, base, LOG_SUFFIX + SWAP_SUFFIX)
    os.replace(segment_path(dir, base, LOG_SUFFIX + CLEANED_SUFFIX), swap)
    fsync_dir(dir)
    return swap


def abandon_cleaned(dir: Path, base: int, log_file: BinaryIO) -> None:
    """Give up a clean before its commit: close ``log_file`` and delete ``B.log.cleaned``."""
    log_file.close()
    segment_path(dir, base, LOG_SUFFIX + CLEANED_SUFFIX).unlink(missing_ok=True)


def discard_swap(swap: Path) -> None:
    """Drop a committed ``B.log.swap`` and its ``B.txnindex.swap`` that will not be installed (the segments it
    would replace are gone)."""
    swap.unlink(missing_ok=True)
    swap.with_name(swap.name.replace(LOG_SUFFIX, TXN_INDEX_SUFFIX)).unlink(missing_ok=True)


def _next_offset_of(path: Path) -> int | None:
    """The offset after the last batch of a segment file; None when it holds no batch."""
    data = path.read_bytes()
    last: BatchHeader | None = None
    for _, header in iter_batch_spans(memoryview(data)):
        last = header
    return None if last is None else last.next_offset


def finish_swap(dir: Path, base: int, covered: list[int] | None = None) -> None:
    """Install ``<base>.log.swap`` (step 2): delete the segments it replaces (``covered``, else those with a base
    offset in ``(base, its next offset)``) and ``base``'s indexes, then rename the swap files into place. Every
    step may be repeated after a crash."""
    swap = segment_path(dir, base, LOG_SUFFIX + SWAP_SUFFIX)
    if covered is None:
        end = _next_offset_of(swap)
        covered = [] if end is None else [b for b in list_segment_bases(dir) if base < b < end]
    for other in covered:
        if other == base:
            continue
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            segment_path(dir, other, suffix).unlink(missing_ok=True)
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        segment_path(dir, base, suffix).unlink(missing_ok=True)
    txn_swap = segment_path(dir, base, TXN_INDEX_SUFFIX + SWAP_SUFFIX)
    if txn_swap.exists():
        txn = segment_path(dir, base, TXN_INDEX_SUFFIX)
        if txn_swap.stat().st_size:
            os.replace(txn_swap, txn)
        else:
            txn.unlink(missing_ok=True)
            txn_swap.unlink()
    os.replace(swap, segment_path(dir, base, LOG_SUFFIX))
    fsync_dir(dir)


def complete_swaps(dir: Path) -> None:
    """Finish or undo a clean a crash interrupted (see the module docstring). Called before a log loads."""
    names = sorted(os.listdir(dir))
    for name in names:
        if name.endswith(CLEANED_SUFFIX):
            os.unlink(dir / name)
    for name in names:
        if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
            parsed = parse_segment_file_name(name[: -len(SWAP_SUFFIX)])
            if parsed is None:
                continue
            _log.info("%s/%s: completing a clean interrupted by a crash", dir.name, name)
            finish_swap(dir, parsed[0])
    for name in os.listdir(dir):
        if name.endswith(SWAP_SUFFIX):  # a txnindex swap whose log swap never came: an unfinished clean
            os.unlink(dir / name)
