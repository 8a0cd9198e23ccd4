"""Group sequences and lazy groups behave like the lists and tuples they stand for.

The reference for a lazy group (:class:`Ranks`) is the tuple of its points, enumerated here
with nested loops; the reference for a group sequence is ``list(seq)`` checked against a
brute-force grouping elsewhere (test_grid_laws). Every operation (indexing with negative and
out-of-range indices, slices, ``==``, ``in``, ``index``, ``repr``, JSON) is compared with the
same operation on the plain list or tuple.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Grid, Topology
from topology._layout.groups import (
    JSON_RANKS,
    SHOWN_RANKS,
    DerivedGroups,
    GroupList,
    OrthogonalGroups,
    Ranks,
    compress,
)
from topology.strategies import grids, topologies

# Example budget relative to the loaded profile (100 in ci/dev, fewer in `mutation`).
BUDGET = settings.default.max_examples

CHEAP = settings(max_examples=3 * BUDGET // 2)


def points(base: int, runs: tuple[tuple[int, int], ...]) -> list[int]:
    """``base + sum(c_i * stride_i)`` for every digit tuple, innermost digit fastest."""
    digits = itertools.product(*(range(size) for size, _ in reversed(runs)))
    found = [
        base + sum(c * s for c, (_, s) in zip(cell, reversed(runs), strict=True)) for cell in digits
    ]
    return found


@st.composite
def run_lists(draw: st.DrawFn) -> tuple[int, tuple[tuple[int, int], ...]]:
    """A base and runs whose strides exceed the largest point below them (points ascend)."""
    base = draw(st.integers(0, 50))
    runs: list[tuple[int, int]] = []
    for _ in range(draw(st.integers(0, 3))):
        top = sum((s - 1) * d for s, d in runs)
        runs.append((draw(st.integers(1, 5)), top + draw(st.integers(1, 6))))
    return base, tuple(runs)


@st.composite
def lazy_groups(draw: st.DrawFn) -> tuple[Ranks, tuple[int, ...]]:
    """A Ranks (whole, or a range or tuple of its positions) and the tuple it stands for."""
    base, runs = draw(run_lists())
    every = points(base, runs)
    how = draw(st.sampled_from(("whole", "range", "tuple")))
    if how == "whole":
        return Ranks(base, runs), tuple(every)
    if how == "range":
        start = draw(st.integers(0, len(every)))
        stop = draw(st.integers(start, len(every)))
        step = draw(st.integers(1, 3))
        chosen: range | tuple[int, ...] = range(start, stop, step)
    else:
        chosen = tuple(sorted(draw(st.sets(st.integers(0, len(every) - 1)))))
    return Ranks(base, runs, chosen), tuple(every[i] for i in chosen)


slices = st.builds(
    slice,
    st.none() | st.integers(-12, 12),
    st.none() | st.integers(-12, 12),
    st.none() | st.integers(-3, 3).filter(bool),
)


# -- Ranks --------------------------------------------------------------------------------------


@CHEAP
@given(lazy_groups())
def test_ranks_iterate_and_index_like_their_tuple(case: tuple[Ranks, tuple[int, ...]]) -> None:
    """tuple(), len, [i] for every valid i (negative too) and IndexError outside agree."""
    group, expected = case
    assert tuple(group) == expected and len(group) == len(expected)
    for i in range(-len(expected), len(expected)):
        assert group[i] == expected[i]
    for bad in (len(expected), -len(expected) - 1):
        with pytest.raises(IndexError):
            group[bad]


@CHEAP
@given(lazy_groups(), slices)
def test_ranks_slices_are_tuple_slices(case: tuple[Ranks, tuple[int, ...]], cut: slice) -> None:
    """group[a:b:c] equals the tuple's slice, and stays a Ranks."""
    group, expected = case
    part = group[cut]
    assert isinstance(part, Ranks)
    assert tuple(part) == expected[cut] and len(part) == len(expected[cut])


@CHEAP
@given(lazy_groups())
def test_ranks_membership_index_and_count(case: tuple[Ranks, tuple[int, ...]]) -> None:
    """in, index and count agree with the tuple for ranks around the group and non-ints."""
    group, expected = case
    low = min(expected, default=0) - 3
    high = max(expected, default=0) + 40
    for rank in range(max(low, -2), high):
        assert (rank in group) == (rank in expected), rank
        assert group.count(rank) == expected.count(rank), rank
        if rank in expected:
            assert group.index(rank) == expected.index(rank)
        else:
            with pytest.raises(ValueError, match="is not in this group"):
                group.index(rank)
    for junk in ("0", 1.0, None, (0,)):
        assert junk not in group


@CHEAP
@given(lazy_groups(), st.data())
def test_ranks_index_honours_start_and_stop(
    case: tuple[Ranks, tuple[int, ...]], data: st.DataObject
) -> None:
    """index(x, start, stop) finds x only inside [start, stop), as tuple.index does."""
    group, expected = case
    if not expected:
        return
    rank = data.draw(st.sampled_from(expected))
    start = data.draw(st.integers(0, len(expected)))
    stop = data.draw(st.integers(0, len(expected)))
    where = expected.index(rank)
    if start <= where < stop:
        assert group.index(rank, start, stop) == where
    else:
        with pytest.raises(ValueError):
            group.index(rank, start, stop)
    assert group.index(rank, start if start <= where else 0) == where


@CHEAP
@given(lazy_groups(), lazy_groups())
def test_ranks_equality_is_equality_of_ranks(
    one: tuple[Ranks, tuple[int, ...]], two: tuple[Ranks, tuple[int, ...]]
) -> None:
    """== compares the ranks (with Ranks, tuples and lists alike); equal groups hash equal."""
    a, a_ranks = one
    b, b_ranks = two
    assert a == a_ranks and a == list(a_ranks) and a == Ranks.of(a_ranks)
    assert (a == b) == (a_ranks == b_ranks)
    assert (a != b) == (a_ranks != b_ranks)
    if a == b:
        assert hash(a) == hash(b)
    assert hash(a) == hash(Ranks.of(a_ranks))
    assert a != "ab" and a != b"ab"
    if a_ranks:
        assert a != (*a_ranks[:-1], a_ranks[-1] + 1)
        assert a != (a_ranks[0] - 1, *a_ranks[1:])
        assert a != a_ranks[:-1]
    if len(a_ranks) > 2:
        middle = list(a_ranks)
        middle[1] = middle[0]
        assert a != middle


@CHEAP
@given(lazy_groups())
def test_ranks_repr_is_the_tuple_or_a_short_summary(case: tuple[Ranks, tuple[int, ...]]) -> None:
    """repr is the tuple's up to SHOWN_RANKS ranks, else the count, four first and the last."""
    group, expected = case
    if len(expected) <= SHOWN_RANKS:
        assert repr(group) == repr(expected)
    else:
        head = ", ".join(map(str, expected[:4]))
        assert repr(group) == f"<{len(expected)} ranks: {head}, …, {expected[-1]}>"


@CHEAP
@given(lazy_groups(), st.integers(1, 40))
def test_ranks_json_is_the_list_or_a_summary(
    case: tuple[Ranks, tuple[int, ...]], limit: int
) -> None:
    """to_json is the list up to the limit, else size, first eight and last."""
    group, expected = case
    data = json.loads(json.dumps(group.to_json(limit)))
    if len(expected) <= limit:
        assert data == list(expected)
    else:
        assert (data["size"], data["first"], data["last"]) == (
            len(expected),
            list(expected[:8]),
            expected[-1],
        )
        whole = group.runs
        if whole is not None:
            assert points(whole[0], whole[1]) == list(expected)


@CHEAP
@given(lazy_groups())
def test_ranks_structure_describes_the_same_ranks(case: tuple[Ranks, tuple[int, ...]]) -> None:
    """runs and blocks, when given, enumerate exactly the group's ranks."""
    group, expected = case
    whole = group.runs
    if whole is not None:
        assert points(whole[0], whole[1]) == list(expected)
    pieces = group.blocks()
    if pieces is not None:
        assert [r for first, runs in pieces for r in points(first, runs)] == list(expected)


@CHEAP
@given(lazy_groups(), st.data())
def test_ranks_take_picks_positions(
    case: tuple[Ranks, tuple[int, ...]], data: st.DataObject
) -> None:
    """take(range) and take(tuple) pick those positions of the group."""
    group, expected = case
    start = data.draw(st.integers(0, len(expected)))
    stop = data.draw(st.integers(start, len(expected)))
    step = data.draw(st.integers(1, 3))
    assert tuple(group.take(range(start, stop, step))) == expected[start:stop:step]
    chosen = tuple(sorted(data.draw(st.sets(st.integers(0, max(len(expected) - 1, 0))))))
    if expected:
        assert tuple(group.take(chosen)) == tuple(expected[i] for i in chosen)


def test_ranks_of_ranges_and_tuples() -> None:
    """Ranks.of keeps a Ranks, reads a range and an ascending tuple; empty is empty."""
    assert Ranks.of(range(3, 12, 4)) == (3, 7, 11)
    assert Ranks.of(range(5, 6)).runs == (5, ())
    group = Ranks(4, ((2, 1),))
    assert Ranks.of(group) is group
    assert Ranks.of(()) == () and len(Ranks.of([])) == 0
    assert Ranks.of((2, 3, 7)).index(7) == 2


@pytest.mark.parametrize(
    ("sizes", "strides", "runs"),
    [
        ([2, 1, 4], [1, 2, 2], ((8, 1),)),
        ([2, 4], [1, 4], ((2, 1), (4, 4))),
        ([1, 1], [1, 3], ()),
        ([3, 2, 2], [1, 3, 6], ((12, 1),)),
        ([2, 3], [2, 5], ((2, 2), (3, 5))),
    ],
)
def test_compress_merges_contiguous_runs(
    sizes: list[int], strides: list[int], runs: tuple[tuple[int, int], ...]
) -> None:
    """compress drops size-1 axes and merges an axis that continues the previous run."""
    assert compress(sizes, strides) == runs
    assert points(0, compress(sizes, strides)) == points(0, tuple(zip(sizes, strides, strict=True)))


# -- group sequences ----------------------------------------------------------------------------


@st.composite
def group_lists(draw: st.DrawFn) -> tuple[GroupList, list[tuple[int, ...]]]:
    """A group sequence (a grid's or a topology's, any kind) and its list of groups."""
    if draw(st.booleans()):
        grid = draw(grids(max_world_size=48))
        axes = draw(st.permutations(grid.axes))[: draw(st.integers(0, len(grid.axes)))]
        seq: GroupList = grid.groups(*axes)
    else:
        topo = draw(topologies(max_world_size=48))
        seq = topo.groups(draw(st.sampled_from(topo.kinds)))
    return seq, [tuple(g) for g in seq]


@CHEAP
@given(group_lists())
def test_group_sequences_index_like_lists(
    case: tuple[OrthogonalGroups, list[tuple[int, ...]]],
) -> None:
    """[i] for every valid i (negative too) and ranks(i) agree; outside raises IndexError."""
    seq, listed = case
    assert len(seq) == len(listed)
    for i in range(-len(listed), len(listed)):
        assert seq[i] == listed[i] and seq.ranks(i) == listed[i]
    for bad in (len(listed), -len(listed) - 1, "0", 1.5):
        with pytest.raises(IndexError, match="out of range"):
            seq[bad]  # type: ignore[index]
        with pytest.raises(IndexError, match="out of range"):
            seq.ranks(bad)  # type: ignore[arg-type]


@CHEAP
@given(group_lists(), slices)
def test_group_sequence_slices_are_list_slices(
    case: tuple[OrthogonalGroups, list[tuple[int, ...]]], cut: slice
) -> None:
    """seq[a:b:c] equals the list's slice, as a list of tuples."""
    seq, listed = case
    assert seq[cut] == listed[cut]
    assert all(type(g) is tuple for g in seq[cut])


@CHEAP
@given(group_lists(), group_lists())
def test_group_sequence_equality(
    one: tuple[OrthogonalGroups, list[tuple[int, ...]]],
    two: tuple[OrthogonalGroups, list[tuple[int, ...]]],
) -> None:
    """== compares the groups with lists, tuples and other sequences; sequences are unhashable."""
    seq, listed = one
    other, other_listed = two
    assert seq == listed and seq == tuple(listed) and seq == [list(g) for g in listed]
    assert (seq == other) == (listed == other_listed)
    assert (seq != other) == (listed != other_listed)
    assert seq != listed[:-1] and seq != [*listed, (0,)]
    assert seq != [(*listed[0][:-1], listed[0][-1] + 1), *listed[1:]]
    assert seq != [*listed[:-1], (*listed[-1][:-1], listed[-1][-1] + 1)]
    assert seq != [(listed[0][0] + 1, *listed[0][1:]), *listed[1:]]
    assert seq != "ab"
    with pytest.raises(TypeError):
        hash(seq)


@CHEAP
@given(group_lists())
def test_group_sequence_membership(case: tuple[OrthogonalGroups, list[tuple[int, ...]]]) -> None:
    """in holds for each group (tuple or list) and for nothing else."""
    seq, listed = case
    for group in listed:
        assert group in seq and list(group) in seq
        near = [
            (group[0] + 1, *group[1:]),
            (*group[:-1], group[-1] + 1),
            group[:-1],
            (*group, group[-1] + 1),
            group[::-1],
        ]
        for candidate in near:
            assert (candidate in seq) == (candidate in listed), candidate
    world = sorted(r for g in listed for r in g)
    assert (world[-1] + 1,) not in seq and (world[0] - 1,) not in seq
    for junk in ((), "0", ("0",), 0, None):
        assert junk not in seq


@CHEAP
@given(group_lists())
def test_group_sequence_repr_shows_three_groups_and_the_count(
    case: tuple[OrthogonalGroups, list[tuple[int, ...]]],
) -> None:
    """repr is the list's up to three groups; longer lists show three groups and the count."""
    seq, listed = case
    shown = ", ".join(repr(Ranks.of(g)) for g in listed[:3])
    if len(listed) <= 3:
        assert repr(seq) == f"[{shown}]"
    else:
        assert repr(seq) == f"[{shown}, ... ({len(listed)} groups)]"


def test_group_sequence_repr_of_small_groups_is_the_list() -> None:
    """A short sequence of short groups prints like the list of tuples."""
    assert repr(Grid.from_sizes(dp=2, tp=2).groups("tp")) == "[(0, 1), (2, 3)]"
    assert repr(Topology(8, tp=2).groups("tp")) == "[(0, 1), (2, 3), (4, 5), ... (4 groups)]"


@CHEAP
@given(group_lists())
def test_group_lists_locate_every_rank(case: tuple[GroupList, list[tuple[int, ...]]]) -> None:
    """index_of_rank and ranks_of find the first listed group holding a rank, else None."""
    seq, listed = case
    assert isinstance(seq, GroupList)
    world = sorted({r for g in listed for r in g})
    for rank in [*world, world[-1] + 1, world[0] - 1]:
        found = next((i for i, g in enumerate(listed) if rank in g), None)
        assert seq.index_of_rank(rank) == found
        assert seq.ranks_of(rank) == (None if found is None else listed[found])
    assert seq.index_of_rank("0") is None and seq.ranks_of(1.0) is None  # type: ignore[arg-type]


@CHEAP
@given(group_lists())
def test_group_size_when_known_is_every_group_size(
    case: tuple[GroupList, list[tuple[int, ...]]],
) -> None:
    """group_size is None or the size of every group; a grid's groups always know it."""
    seq, listed = case
    assert seq.group_size is None or {len(g) for g in listed} == {seq.group_size}
    if isinstance(seq, OrthogonalGroups):
        assert seq.group_size is not None


def test_derived_groups_use_the_given_facts() -> None:
    """group_size and index_of, when given, answer for the derived sequence."""
    calls: list[int] = []

    def index_of(rank: int) -> int | None:
        calls.append(rank)
        return rank // 3 if 0 <= rank < 6 else None

    seq = DerivedGroups(2, lambda i: range(3 * i, 3 * i + 3), group_size=3, index_of=index_of)
    assert (seq.group_size, seq.index_of_rank(4), seq.ranks_of(7)) == (3, 1, None)
    assert seq.ranks_of(2) == range(3)
    assert calls == [4, 7, 2]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: DerivedGroups(2, lambda i: (i,), group_size=-1),
            r"group_size must be a non-negative int, got -1 \(int\)",
        ),
        (
            lambda: DerivedGroups(2, lambda i: (i,), index_of=3),  # type: ignore[arg-type]
            "index_of must be a function from a rank to a group index, got 3",
        ),
        (
            lambda: DerivedGroups(2, lambda i: (i,), index_of=lambda r: 2).index_of_rank(0),
            r"index_of\(0\) must return a group index from 0 to 1 or None, got 2",
        ),
    ],
)
def test_derived_groups_refuse_bad_facts(make: Callable[[], object], message: str) -> None:
    """A bad group_size or index_of is refused with the rule and the value."""
    from topology import TopologyError

    with pytest.raises(TopologyError, match=message):
        make()


def test_derived_groups_reject_a_negative_count() -> None:
    """A derived sequence with a negative count is refused."""
    from topology import TopologyError

    with pytest.raises(TopologyError, match=r"count must be a non-negative int, got -1 \(int\)"):
        DerivedGroups(-1, lambda i: (i,))
    assert list(DerivedGroups(0, lambda i: (i,))) == []


def test_json_limit_default_is_the_documented_one() -> None:
    """A group of JSON_RANKS ranks is a list; one more rank makes a summary."""
    assert Ranks(0, ((JSON_RANKS, 1),)).to_json() == list(range(JSON_RANKS))
    summary = Ranks(0, ((JSON_RANKS + 1, 1),)).to_json()
    assert isinstance(summary, dict) and summary["size"] == JSON_RANKS + 1
    assert summary["runs"] == [[JSON_RANKS + 1, 1]]


@CHEAP
@given(topologies(max_world_size=32))
def test_membership_means_the_same_for_every_kind_of_sequence(topo: Topology) -> None:
    """``g in groups`` holds for a group as tuple or list, never for floats, for every kind."""
    for kind in topo.kinds:
        groups = topo.groups(kind)
        listed = [tuple(g) for g in groups]
        first = listed[0]
        assert first in groups and list(first) in groups
        assert tuple(float(r) for r in first) not in groups
        assert (max(max(g) for g in listed) + 1,) not in groups
        assert "0" not in groups and () not in groups
