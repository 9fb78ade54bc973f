"""The README's compatibility matrix is the marks of the tree: every ``compat`` mark has its row, every row a mark.

The rows' results come from a run of the peer tests (``python -m tests.support.compat_matrix``); this test checks
what can be checked without running them: the same (peer, feature) rows, the same ``differs`` texts and test
modules, and every row showing ``passes`` (the suite is green when it lands, so a row saying otherwise is stale).
In a run that collected only part of the tree, only the rows of the collected modules are checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import compat

README = Path(__file__).resolve().parent.parent / "README.md"
FIX = "run `python -m tests.support.compat_matrix` to regenerate the README's matrix"


def _collected(request: pytest.FixtureRequest) -> tuple[dict[tuple[str, str], compat.Row], set[str]]:
    seen = request.config.stash.get(compat.SEEN, {})
    modules = {nodeid.split("::", 1)[0] for nodeid in seen}
    table = compat.rows((nodeid, m, True) for nodeid, marks in seen.items() for m in marks)
    return table, modules


def test_readme_has_the_matrix_markers() -> None:
    text = README.read_text()
    assert compat.BEGIN in text and compat.END in text, (
        f"README.md lost its compatibility matrix markers: {FIX}"
    )


def test_every_compat_mark_has_its_row_and_every_row_its_mark(request: pytest.FixtureRequest) -> None:
    marked, modules = _collected(request)
    readme = compat.parse(README.read_text())
    missing = sorted(f"{p} / {f}" for p, f in marked if (p, f) not in readme)
    assert not missing, f"marks without a README row: {missing}: {FIX}"
    for (peer, feature), (result, tests, differs) in readme.items():
        named = {m.strip("`").strip() for m in tests.split(" in ", 1)[-1].split(",")}
        gone = sorted(m for m in named if not (README.parent / "tests" / m).is_file())
        assert not gone, f"README row {peer} / {feature} names test modules that are gone: {gone}: {FIX}"
        if not all(f"tests/{m}" in modules for m in named):
            continue  # a module this run did not collect
        row = marked.get((peer, feature))
        assert row is not None, f"README row {peer} / {feature} has no test marked with it any more: {FIX}"
        assert differs == row.mark.differs, (
            f"README row {peer} / {feature}: its 'differs' text is stale: {FIX}"
        )
        assert named == {m.removeprefix("tests/") for m in row.modules}, (
            f"{peer} / {feature}: test modules: {FIX}"
        )
        assert result == "passes", f"README row {peer} / {feature} says {result!r}: {FIX}"


class _Item:
    """Enough of a pytest item for :func:`compat.marks_of`."""

    nodeid = "tests/peers/test_x.py::test_y"

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def iter_markers(self, name: str) -> list[pytest.Mark]:
        return [m for m in self.marks if m.name == name]


def test_a_mark_naming_an_unknown_peer_or_a_bad_text_stops_collection() -> None:
    with pytest.raises(pytest.UsageError, match="not one of"):
        compat.marks_of(_Item(pytest.mark.compat("kafka-brokr", "x")))  # type: ignore[arg-type]
    with pytest.raises(pytest.UsageError, match="one line"):
        compat.marks_of(_Item(pytest.mark.compat("kafka-tools", "a | b")))  # type: ignore[arg-type]
    with pytest.raises(pytest.UsageError, match="differs=TEXT"):
        compat.marks_of(_Item(pytest.mark.compat("kafka-tools")))  # type: ignore[arg-type]


def test_render_and_parse_round_trip_with_a_failed_row() -> None:
    results = [
        ("tests/peers/test_a.py::test_1", compat.Mark("kafka-tools", "kafka-topics: create", ""), True),
        ("tests/peers/test_b.py::test_2", compat.Mark("kafka-tools", "kafka-topics: create", ""), True),
        (
            "tests/peers/test_a.py::test_3",
            compat.Mark("kafka-java", "AdminClient: listTopics", "no KIP-848"),
            False,
        ),
    ]
    text = compat.render(compat.rows(results), "9.9.9")
    assert "Apache Kafka 9.9.9 command-line tools" in text
    assert compat.parse(text) == {
        ("kafka-tools", "kafka-topics: create"): ("passes", "2 in `peers/test_a.py`, `peers/test_b.py`", ""),
        ("kafka-java", "AdminClient: listTopics"): ("FAILS (1 of 1)", "1 in `peers/test_a.py`", "no KIP-848"),
    }
    with pytest.raises(ValueError, match="disagree on differs"):
        compat.rows(
            [
                *results,
                ("tests/peers/test_c.py::t", compat.Mark("kafka-java", "AdminClient: listTopics"), True),
            ]
        )
