"""The streaming sink's log and its options, without Spark: checkpoint locations, the query id, entries on disk,
``pylog.deliveryGuarantee`` and what it conflicts with."""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from broker_runtime.errors import ConfigError, StreamingSinkError
from spark_kafka_log.common.writer_options import batch_options, parse_writer_options, stream_options
from spark_kafka_log.exactly_once.sink_log import (
    COMMITTED,
    PREPARED,
    RETAINED_ENTRIES,
    SinkEntry,
    SinkLog,
    checkpoint_dir,
    is_local,
    query_id,
)
from spark_kafka_log.exactly_once.task_transactions import TaskTransaction
from tests.support.steps import run_to_step


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/tmp/ck", "/tmp/ck"),
        ("file:///tmp/ck", "/tmp/ck"),
        ("file:/tmp/ck", "/tmp/ck"),  # Hadoop's spelling
        ("file://localhost/tmp/a%20b", "/tmp/a b"),
        ("rel/ck", os.path.abspath("rel/ck")),
    ],
)
def test_checkpoint_locations_on_the_local_file_system(location: str, expected: str) -> None:
    assert checkpoint_dir(location) == expected


@pytest.mark.parametrize(
    ("location", "scheme"),
    [
        ("nosuchfs://bucket/ck", "nosuchfs"),
        ("s3a://bucket/ck", "s3a"),
        ("simplecache::nosuchfs://b/ck", "nosuchfs"),
    ],
)
def test_a_scheme_without_an_fsspec_implementation_is_refused_naming_it(location: str, scheme: str) -> None:
    # s3a: fsspec knows it (s3fs), which is not installed here: the message says so and what to install.
    with pytest.raises(ConfigError, match=rf"fsspec has no usable file system for the scheme {scheme}:") as e:
        checkpoint_dir(location)
    assert "pip install 'pylog[fsspec]'" in str(e.value) and "s3fs for s3:/s3a:" in str(e.value)


def test_without_fsspec_other_schemes_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # what an environment without the extra sees
    with pytest.raises(
        ConfigError, match=r"the scheme s3a: needs fsspec, which is not installed: .*pylog\[fsspec\]"
    ):
        checkpoint_dir("s3a://bucket/ck")
    assert checkpoint_dir("file:/tmp/ck") == "/tmp/ck"  # local locations never need it


def test_fsspec_locations_are_kept_as_urls() -> None:
    assert checkpoint_dir("local:///tmp/ck/") == "local:///tmp/ck"
    assert checkpoint_dir("memory://ck") == "memory://ck"
    assert not is_local("local:///tmp/ck") and is_local("/tmp/ck")


def test_file_uri_with_a_remote_host_is_refused() -> None:
    with pytest.raises(ConfigError, match="with a host"):
        checkpoint_dir("file://nas/ck")


def test_query_id_comes_from_sparks_metadata_file(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text('{"id":"0d4ea3d6-da3d-4f32-9593-ca551a2f0bdb"}')
    assert query_id(str(tmp_path)) == "0d4ea3d6-da3d-4f32-9593-ca551a2f0bdb"
    (tmp_path / "metadata").write_text("{}")
    with pytest.raises(StreamingSinkError, match="holds no query id"):
        query_id(str(tmp_path))
    with pytest.raises(StreamingSinkError, match="is checkpointLocation the query's checkpoint directory"):
        query_id(str(tmp_path / "nowhere"))


def _entry(batch_id: int, status: str = PREPARED) -> SinkEntry:
    txn = TaskTransaction("pylog-stream-q-0", 4000, 3, (("events", 0), ("events", 2)), 1795437640000, 60000)
    return SinkEntry(batch_id, status, "q", [txn], records=10, tasks_ended_at_ms=5, prepared_at_ms=7)


def test_entries_round_trip_and_the_newest_wins(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    assert log.newest() is None and log.batch_ids() == []
    log.write(_entry(0, COMMITTED))
    log.write(_entry(1))
    (tmp_path / "pylog-sink" / "stalled-1.test").touch()  # other files are not entries
    newest = log.newest()
    assert newest == _entry(1) and not newest.committed
    log.mark_committed(newest)
    again = log.read(1)
    assert (
        again.committed and again.committed_at_ms is not None and again.transactions == _entry(1).transactions
    )
    doc = json.loads((tmp_path / "pylog-sink" / "1.json").read_text())
    assert (
        doc["version"] == 1 and doc["status"] == "committed" and doc["transactions"][0]["producerEpoch"] == 3
    )


def test_only_the_newest_entries_are_retained(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    for batch_id in range(RETAINED_ENTRIES + 5):
        log.mark_committed(_entry(batch_id))
    assert log.batch_ids() == list(range(5, RETAINED_ENTRIES + 5))


def test_a_corrupt_entry_is_an_error_naming_the_file(tmp_path: Path) -> None:
    log = SinkLog(str(tmp_path))
    log.write(_entry(3))
    path = tmp_path / "pylog-sink" / "3.json"
    path.write_text('{"version": 1, "batchId": 3, "status": "maybe"}')
    with pytest.raises(StreamingSinkError, match=r"3\.json is corrupt \(unknown status 'maybe'\)"):
        log.newest()


def test_streaming_is_exactly_once_by_default_with_its_own_transactional_id_prefix() -> None:
    default = stream_options(parse_writer_options({"topic": "t"}))
    assert default.transactional and default.transactional_id_prefix == "pylog-stream"
    mine = stream_options(parse_writer_options({"topic": "t", "kafka.transactional.id": "orders"}))
    assert mine.transactional_id_prefix == "orders"
    opted_out = stream_options(
        parse_writer_options({"topic": "t", "pylog.deliveryGuarantee": "At-Least-Once"})
    )
    assert not opted_out.transactional and opted_out.enable_idempotence


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"kafka.acks": "1"},
            "exactly-once by default, which needs the idempotent producer; it is off because of kafka.acks=1",
        ),
        (
            {"kafka.transactional.id": "x", "pylog.deliveryGuarantee": "at-least-once"},
            "'kafka.transactional.id' and 'pylog.deliveryGuarantee=at-least-once' contradict",
        ),
        ({"pylog.deliveryGuarantee": "exactly-twice"}, "allowed values: exactly-once, at-least-once"),
    ],
)
def test_stream_option_conflicts_are_clear_errors(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        stream_options(parse_writer_options({"topic": "t", **options}))


def test_delivery_guarantee_is_for_streaming_only() -> None:
    with pytest.raises(ConfigError, match="applies to writeStream only"):
        batch_options(parse_writer_options({"topic": "t", "pylog.deliveryGuarantee": "exactly-once"}))


# --- fsspec store: write-once objects (see the sink_log module docstring) ---------------------------------------


def _fsspec_url(tmp_path: Path) -> str:
    """A real file system reached through fsspec under another scheme than file: (fsspec's ``local``)."""
    return f"local://{tmp_path}"


def test_fsspec_store_writes_each_object_once_and_reads_committed_first(tmp_path: Path) -> None:
    url = _fsspec_url(tmp_path)
    (tmp_path / "metadata").write_text('{"id":"q-1"}')
    assert query_id(checkpoint_dir(url)) == "q-1"
    log = SinkLog(checkpoint_dir(url))
    assert log.newest() is None and log.path(4) == f"{url}/pylog-sink/4.json"
    log.mark_committed(_entry(0))
    log.write(_entry(1))
    prepared = (tmp_path / "pylog-sink" / "1.json").read_bytes()
    newest = log.newest()
    assert newest == _entry(1) and not newest.committed
    log.mark_committed(newest)
    # The prepared object is never rewritten; the committed record is an object of its own.
    assert (tmp_path / "pylog-sink" / "1.json").read_bytes() == prepared
    assert json.loads((tmp_path / "pylog-sink" / "1.committed").read_text())["status"] == COMMITTED
    assert log.read(1).committed and log.batch_ids() == [0, 1]
    with pytest.raises(
        StreamingSinkError, match=r"1\.json exists already; sink-log objects are written once"
    ):
        log.write(_entry(1))


def test_fsspec_store_retains_the_newest_entries(tmp_path: Path) -> None:
    log = SinkLog(checkpoint_dir(_fsspec_url(tmp_path)))
    for batch_id in range(RETAINED_ENTRIES + 3):
        log.mark_committed(_entry(batch_id))
    assert log.batch_ids() == list(range(3, RETAINED_ENTRIES + 3))
    assert not (tmp_path / "pylog-sink" / "2.committed").exists()


def test_fsspec_store_drops_a_newest_prepared_object_cut_short(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = SinkLog(checkpoint_dir(_fsspec_url(tmp_path)))
    log.write(_entry(0))
    log.mark_committed(_entry(0))
    whole = json.dumps(_entry(1).to_json()).encode()
    (tmp_path / "pylog-sink" / "1.json").write_bytes(whole[: len(whole) // 2])  # a crash mid-write
    newest = log.newest()
    assert newest is not None and newest.batch_id == 0 and newest.committed
    assert not (tmp_path / "pylog-sink" / "1.json").exists()
    assert "a write cut short by a crash before its read-back" in caplog.text
    # A committed marker cut short still says committed (it is written after every EndTxn succeeded).
    (tmp_path / "pylog-sink" / "0.committed").write_text("{")
    again = log.newest()
    assert again is not None and again.batch_id == 0 and again.committed
    assert "0.committed is corrupt" in caplog.text
    # A record that does not parse and is not the newest prepared one is never dropped: an error naming it.
    (tmp_path / "pylog-sink" / "0.json").write_text("{")
    with pytest.raises(StreamingSinkError, match=r"0\.json is corrupt .*written once and read back"):
        log.newest()


def _run_log_steps(url: str, visible: Path, last: int) -> None:
    """What the sink does to its log across restarts, with the EndTxns replaced by an idempotent append."""
    log = SinkLog(checkpoint_dir(url))

    def make_visible(batch_id: int) -> None:  # as EndTxn(commit) of a committed transaction: no effect twice
        with open(visible, "a+") as f:
            f.seek(0)
            if str(batch_id) not in f.read().split():
                f.write(f"{batch_id}\n")

    newest = log.newest()
    if newest is not None and not newest.committed:  # resolve_pending
        make_visible(newest.batch_id)
        log.mark_committed(newest)
    for batch_id in range(0 if newest is None else newest.batch_id + 1, last + 1):
        txn = TaskTransaction(f"t-{batch_id}", batch_id, 0, (("events", 0),), 0, 60000)
        entry = SinkEntry(batch_id, PREPARED, "q", [txn], records=batch_id)
        log.write(entry)
        make_visible(batch_id)
        log.mark_committed(entry)


def _log_steps(url: str, visible: Path, last: int) -> Callable[[], str]:
    """:func:`_run_log_steps` as the work of a forked run (:func:`tests.support.steps.run_to_step`)."""

    def work() -> str:
        _run_log_steps(url, visible, last)
        return ""

    return work


KILLS = 15

#: The soak form (``bash jobs/dev.sh soak``): more kills over a longer run, whose batches all stay within the
#: sink log's retention (RETAINED_ENTRIES), as the assertions read every one back; ``last`` leaves room for
#: the kills (at most two batches' worth of steps each, see the test).
SOAK_KILLS = 40
assert 2 * SOAK_KILLS + 10 < RETAINED_ENTRIES


@pytest.mark.parametrize("store", ["local", "fsspec"])
@pytest.mark.parametrize(
    "kills", [pytest.param(KILLS, id="bounded"), pytest.param(SOAK_KILLS, id="soak", marks=pytest.mark.soak)]
)
def test_sink_log_survives_process_kills_at_random_points(tmp_path: Path, store: str, kills: int) -> None:
    """A forked process running the commit protocol's log steps is SIGKILLed at seeded points and a new one
    takes over: every batch ends committed once, in order, and each one was made visible once.

    The points are steps (see :mod:`tests.support.steps`), not moments: the child stops at its seeded step and tells the
    parent, which kills it there, so every kill lands inside the run however fast the machine is, and the seed
    reproduces a failure. A first run to the end in a folder of its own counts the steps of one batch; each kill
    falls in the first two batches' worth of steps of its run, so no run before the last can reach the end."""
    seed = int(os.environ.get("PYLOG_TEST_SEED", random.randrange(2**31)))
    rng = random.Random(seed)
    last = 2 * kills + 10
    dry = tmp_path / "dry"
    dry.mkdir()
    dry_url = _fsspec_url(dry) if store == "fsspec" else str(dry)
    outcome, total, _ = run_to_step(_log_steps(dry_url, tmp_path / "dry-visible", last), 0, f"seed {seed}")
    assert outcome == "done"
    per_batch = total // (last + 1)
    ck = tmp_path / "ck"
    ck.mkdir()
    url = _fsspec_url(ck) if store == "fsspec" else str(ck)
    visible = tmp_path / "visible"
    lives = []
    for _ in range(kills):
        lives.append(
            run_to_step(_log_steps(url, visible, last), rng.randint(1, 2 * per_batch), f"seed {seed}")
        )
        lives[-1] = (*lives[-1][:2], max(SinkLog(checkpoint_dir(url)).batch_ids(), default=None))
    context = f"seed {seed}, {per_batch} steps a batch, (outcome, step, newest batch) of each run {lives}"
    assert all(outcome == "killed" for outcome, _, _ in lives), context  # every kill landed inside the run
    assert run_to_step(_log_steps(url, visible, last), 0, f"seed {seed}")[0] == "done", context
    log = SinkLog(checkpoint_dir(url))
    assert log.batch_ids() == list(range(last + 1)), context
    assert all(log.read(b).committed and log.read(b).records == b for b in range(last + 1)), context
    assert visible.read_text().split() == [str(b) for b in range(last + 1)], context
    print(context)
