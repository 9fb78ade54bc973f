"""The election rules against a small model: random partitions, random fence/unfence sequences."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_runtime.controller import (
    NO_LEADER,
    PartitionInfo,
    fence_broker,
    preferred_election,
    unfence_broker,
)

BROKERS = range(5)


@st.composite
def partitions(draw: st.DrawFn) -> PartitionInfo:
    replicas = draw(st.permutations(list(BROKERS)).map(lambda p: p[: draw(st.integers(1, 5))]))
    isr = draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    return PartitionInfo(tuple(replicas), leader, 3, tuple(sorted(isr)), 7)


def _check_epochs(old: PartitionInfo, new: PartitionInfo) -> None:
    assert new.partition_epoch == old.partition_epoch + 1
    if new.leader != old.leader:
        assert new.leader_epoch == old.leader_epoch + 1
    else:
        assert new.leader_epoch == old.leader_epoch


@given(partitions(), st.sampled_from(list(BROKERS)), st.sets(st.sampled_from(list(BROKERS))), st.booleans())
@settings(max_examples=400)
def test_fencing_follows_the_model(entry: PartitionInfo, broker: int, live: set[int], unclean: bool) -> None:
    live = live - {broker}
    done = fence_broker(entry, broker, live, unclean=unclean)
    if broker not in entry.replicas:
        assert done is None
        return
    expected_isr = [r for r in entry.isr if r != broker] or list(entry.isr)
    if entry.leader != broker:
        expected_leader = entry.leader
    else:
        clean = [r for r in entry.replicas if r in expected_isr and r in live]
        outside = [r for r in entry.replicas if r in live]
        if clean:
            expected_leader = clean[0]
        elif unclean and outside:
            expected_leader, expected_isr = outside[0], [outside[0]]
        else:
            expected_leader = NO_LEADER
    if expected_leader == entry.leader and tuple(sorted(expected_isr)) == entry.isr:
        assert done is None
        return
    assert done is not None
    new = done.partition
    assert new.leader == expected_leader
    assert new.isr == tuple(sorted(expected_isr))
    assert new.isr, "the ISR never becomes empty"
    assert new.leader != broker, "a fenced broker never leads"
    assert done.unclean == (new.leader not in (NO_LEADER, *entry.isr))
    _check_epochs(entry, new)


@given(partitions(), st.sampled_from(list(BROKERS)), st.booleans())
def test_unfencing_only_gives_leaderless_partitions_a_leader(
    entry: PartitionInfo, broker: int, unclean: bool
) -> None:
    done = unfence_broker(entry, broker, unclean=unclean)
    if entry.leader != NO_LEADER:
        assert done is None
        return
    if broker in entry.isr:
        assert done is not None and done.partition.leader == broker and not done.unclean
        assert done.partition.isr == entry.isr
    elif unclean and broker in entry.replicas:
        assert done is not None and done.partition.leader == broker and done.unclean
        assert done.partition.isr == (broker,)
    else:
        assert done is None
    if done is not None:
        _check_epochs(entry, done.partition)


@given(
    partitions(),
    st.lists(st.tuples(st.sampled_from(["fence", "unfence"]), st.sampled_from(list(BROKERS))), max_size=12),
)
@settings(max_examples=300)
def test_clean_elections_never_lose_the_last_in_sync_copy(
    entry: PartitionInfo, events: list[tuple[str, int]]
) -> None:
    """With unclean election off, every leader ever elected was in the ISR of the moment, epochs only grow, and a
    partition is leaderless only while no ISR member is live."""
    live = set(BROKERS)
    if entry.leader == NO_LEADER:
        live -= set(entry.isr)
    for action, broker in events:
        if action == "fence":
            if broker not in live:
                continue
            live.discard(broker)
            done = fence_broker(entry, broker, live, unclean=False)
        else:
            if broker in live:
                continue
            live.add(broker)
            done = unfence_broker(entry, broker, unclean=False)
        if done is None:
            continue
        new = done.partition
        assert not done.unclean
        assert new.leader == NO_LEADER or new.leader in entry.isr
        assert new.leader_epoch >= entry.leader_epoch and new.partition_epoch > entry.partition_epoch
        assert set(new.isr) <= set(entry.isr) | {new.leader}
        entry = new
        if entry.leader == NO_LEADER:
            assert not (set(entry.isr) & live)
        else:
            assert entry.leader in live


def test_preferred_election_moves_leadership_back_only_when_it_can() -> None:
    entry = PartitionInfo((0, 1, 2), 1, 4, (0, 1, 2), 9)
    done, why = preferred_election(entry, live={0, 1, 2})
    assert why == "NONE" and done is not None
    assert done.partition.leader == 0 and done.partition.leader_epoch == 5
    assert preferred_election(done.partition, live={0, 1, 2}) == (None, "ELECTION_NOT_NEEDED")
    assert preferred_election(entry, live={1, 2}) == (None, "PREFERRED_LEADER_NOT_AVAILABLE")
    out_of_sync = replace(entry, isr=(1, 2))
    assert preferred_election(out_of_sync, live={0, 1, 2}) == (None, "PREFERRED_LEADER_NOT_AVAILABLE")
