"""Smoke test: writer threads appending while reader threads fetch, roll and retention run."""

from __future__ import annotations

import threading

from tests.support.storage import decode_all, make_batch


def test_concurrent_appends_and_reads(open_log):
    log = open_log(segment_bytes=4000, index_interval_bytes=200, retention_ms=-1)
    per_writer, writers = 60, 3
    errors: list[BaseException] = []
    done = threading.Event()
    batch = make_batch(3, value_size=15)

    def writer():
        try:
            for _ in range(per_writer):
                log.append(batch)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader():
        try:
            while not done.is_set():
                end = log.high_watermark
                offset = 0
                while offset < end:
                    data = log.read(offset, 700, max_offset=end)
                    records = decode_all(data.records)
                    assert [r[1] for r in records] == list(range(offset, offset + len(records)))
                    offset = data.next_offset
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer) for _ in range(writers)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors
    total = per_writer * writers * 3
    assert log.log_end_offset == total
    offset, seen = 0, []
    while offset < total:
        data = log.read(offset, 1 << 20)
        seen += [r[1] for r in decode_all(data.records)]
        offset = data.next_offset
    assert seen == list(range(total))
