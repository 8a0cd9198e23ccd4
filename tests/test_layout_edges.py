"""Edges of the layout modules (spans, groups, ranks, grid) that mutation testing found untested.

Unit counts are checked against a brute force (every point of the runs listed with
``itertools.product``, then ``len({r // unit})``); group lookups against a scan of the listed
groups; texts against values worked out by hand from the documented formats.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Grid, TopologyError
from topology._layout import runs as runs_mod
from topology._layout import spans
from topology._layout.groups import DerivedGroups, GroupList, OrthogonalGroups
from topology._layout.ranks import SHOWN_RANKS, Ranks
from topology._layout.runs import Runs
from topology._layout.spans import Shape, ranks_units, units_spanned


def _points(runs: Runs) -> list[int]:
    """Every point of ``runs``, listed independently of :mod:`topology._layout.runs`."""
    digits = [range(size) for size, _ in runs]
    return [
        sum(c * d for c, (_, d) in zip(cs, runs, strict=True)) for cs in itertools.product(*digits)
    ]


def _brute_units(base: int, runs: Runs, unit: int) -> int:
    """How many units ``r // unit`` the ranks ``base + X`` touch, by listing them."""
    return len({(base + p) // unit for p in _points(runs)})


@st.composite
def digit_runs(draw: st.DrawFn) -> Runs:
    """1 to 3 runs, each stride above the largest point of the runs below (mixed-radix digits).

    Size-1 runs are drawn too: lazy groups may carry them.
    """
    runs: list[tuple[int, int]] = []
    largest = 0
    for _ in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 4))  # a size-1 run adds no point, only a level
        stride = largest + 1 + draw(st.integers(0, 12))
        if runs and runs[-1][0] * runs[-1][1] == stride:
            stride += 1  # keep the runs canonical: no run continues the one below it
        runs.append((size, stride))
        largest += (size - 1) * stride
    return tuple(runs)


@settings(max_examples=300, deadline=None)
@given(digit_runs(), st.integers(1, 24), st.integers(0, 40))
def test_recursive_count_matches_listing(runs: Runs, unit: int, base: int) -> None:
    """The residue recursion counts the units of base + X exactly as listing the ranks does."""
    assert spans._recursive(base, runs, unit) == _brute_units(base % unit, runs, unit)


@settings(max_examples=100, deadline=None)
@given(digit_runs(), st.integers(1, 24), st.integers(0, 40))
def test_units_spanned_by_recursion_matches_listing(runs: Runs, unit: int, base: int) -> None:
    """With point-by-point counting switched off, units_spanned still counts exactly."""
    with patch.object(spans, "_POINTS_LIMIT", 0):
        assert units_spanned(base, runs, unit) == (_brute_units(base, runs, unit), True)


def test_recursion_out_of_budget_gives_a_bound() -> None:
    """A group whose recursion needs more steps than its budget gets a bound, marked inexact."""
    # units of 4093 (prime) and strides 1009, 10**7 prime to it: the copies' residues only
    # cycle after 4093 copies, at each of up to 4093 start residues: far past 2**14 steps.
    runs = ((2, 1), (3000, 1009), (3000, 10**7))
    units, exact = units_spanned(0, runs, 4093)
    assert not exact
    assert 1 <= units <= 2 * 3000 * 3000


@settings(max_examples=150, deadline=None)
@given(digit_runs(), st.integers(0, 30), st.data(), st.integers(1, 24))
def test_ranks_units_of_a_chunk_matches_listing(
    runs: Runs, base: int, data: st.DataObject, unit: int
) -> None:
    """A chunk of a group (cut anywhere) touches the listed count of units."""
    count = len(_points(runs))
    start = data.draw(st.integers(0, count - 1))
    stop = data.draw(st.integers(start + 1, count))
    group = Ranks(base, runs, range(start, stop))
    brute = len({r // unit for r in group})
    units, exact = ranks_units(group, unit)
    assert units == brute if exact else units >= brute


def test_ranks_units_counts_units_shared_by_pieces_once() -> None:
    """Consecutive pieces of a chunk that meet in one unit count it once."""
    # points 0-3, 16-19, 32-35; positions 2..10 are ranks 2 3 | 16 17 18 19 | 32 33 34:
    # units of 32 are {0, 1} (the first two pieces share unit 0)
    assert ranks_units(Ranks(0, ((4, 1), (3, 16)), range(2, 11)), 32) == (2, True)
    # points 0-3, 6-9, 12-15; positions 2..10 are ranks 2 3 | 6 7 8 9 | 12 13 14:
    # units of 8 are {0, 1}, each shared by two pieces
    assert ranks_units(Ranks(0, ((4, 1), (3, 6)), range(2, 11)), 8) == (2, True)


def test_ranks_units_of_a_long_strided_chunk_is_a_bound() -> None:
    """A strided chunk of several runs past the block limit is measured by its size, inexactly."""
    group = Ranks(0, ((3, 1), (3000, 16)), range(0, 9000, 2))  # 4500 ranks: 0, 2, 17, 32, 34, ...
    assert ranks_units(group, 64) == (4500, False)  # several ranks share each unit of 64


def test_residues_stop_at_the_limit() -> None:
    """Past ``limit`` residues the answer holds ``limit`` of them and says it is incomplete."""
    shape = Shape.regular([], [(8, 1)], 0)  # groups of one rank at 0 .. 7: residues 0 .. 7 of 8
    found, complete = shape.residues(8, limit=3)
    assert (len(found), complete) == (3, False)
    assert all(base % 8 == residue for residue, base in found.items())
    assert shape.residues(8, limit=8) == ({r: r for r in range(8)}, True)


def test_leaves_of_explicit_offsets() -> None:
    """A family given by explicit offsets leaves a unit exactly when one group crosses a border."""
    # groups {0, 2} + 4k (k < 3): inside units of 4, across units of 2 (0 // 2 != 2 // 2)
    shape = Shape(None, (0, 2), ((3, 4),), 0)
    assert not shape.leaves(4)
    assert shape.leaves(2)
    # groups {0, 1, 3} + 4k: the largest offset 3 decides; (0, 1, 3) reaches past 2
    assert not Shape(None, (0,), ((3, 4),), 0).leaves(4)  # groups of one rank never leave
    wide = Shape(None, (0, 1, 3), ((2, 4),), 0)
    assert wide.leaves(3)
    assert not wide.leaves(4)


def test_leaves_when_the_group_spans_exactly_a_unit() -> None:
    """A group whose largest offset equals the unit leaves it, whatever its residue."""
    assert Shape.regular([(2, 4)], [], 0).leaves(4)  # {0, 4}: units 0 and 1
    assert not Shape.regular([(2, 3)], [], 0).leaves(4)  # {0, 3}: unit 0 only


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 5), st.integers(1, 4), st.integers(0, 7), st.integers(2, 9)
)
def test_leaves_matches_listing(size: int, stride: int, count: int, step: int, unit: int) -> None:
    """leaves(unit) is True exactly when some listed group touches two units."""
    shape = Shape.regular([(size, stride)], [(count, size * stride + step)], 0)
    groups = [
        [base + p for p in _points(((size, stride),))]
        for base in _points(((count, size * stride + step),))
    ]
    assert shape.leaves(unit) == any(len({r // unit for r in g}) > 1 for g in groups)


class _Listed(GroupList):
    """The smallest GroupList: groups given as a list, every other query inherited."""

    __slots__ = ("_groups",)

    def __init__(self, groups: Sequence[tuple[int, ...]]) -> None:
        self._groups = list(groups)

    def __len__(self) -> int:
        return len(self._groups)

    def _item(self, index: int) -> tuple[int, ...]:
        return self._groups[index]


GROUPS = [(1, 3), (0, 2), (2, 4, 7)]


@pytest.mark.parametrize("groups", [_Listed(GROUPS), DerivedGroups(3, GROUPS.__getitem__)])
def test_inherited_lookups_scan_the_groups(groups: GroupList) -> None:
    """index_of_rank and ranks_of find the first group holding a rank, by the listed groups."""
    for rank in range(9):
        expected = next((i for i, g in enumerate(GROUPS) if rank in g), None)
        assert groups.index_of_rank(rank) == expected
        found = groups.ranks_of(rank)
        assert (None if found is None else tuple(found)) == (
            None if expected is None else GROUPS[expected]
        )
    assert groups.index_of_rank(True) is None
    assert groups.index_of_rank("1") is None  # type: ignore[arg-type]


def test_inherited_ranks_and_repr_use_the_listed_groups() -> None:
    """ranks(i) of the base class is group i as a Ranks; repr shows the groups."""
    groups = _Listed(GROUPS)
    assert [tuple(groups.ranks(i)) for i in range(3)] == GROUPS
    assert repr(groups) == "[(1, 3), (0, 2), (2, 4, 7)]"


def test_base_contains_needs_a_nonempty_sequence_of_ints() -> None:
    """`in` holds for a group given as a tuple or a list, never for a string or an empty group."""
    groups = _Listed([(), (0, 2)])
    assert (0, 2) in groups
    found: list[object] = [[0, 2]]
    refused: list[object] = [(), [], "ab", 0, 5, {0, 2}]  # a set is no sequence
    assert all(probe in groups for probe in found)
    assert not any(probe in groups for probe in refused)


def test_base_equality_needs_a_sequence_of_sequences() -> None:
    """== compares with lists of lists; a string or a shorter list is not equal."""
    groups = _Listed([(0, 1), (2, 3)])
    assert groups == [[0, 1], [2, 3]]
    assert groups != [[0, 1]]
    assert groups != ["ab", "cd"]
    assert groups != "ab"
    assert groups.__eq__("ab") is NotImplemented


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=0, max_size=3),
    st.integers(0, 5),
)
def test_bases_are_the_first_rank_of_each_group(pairs: list[tuple[int, int]], offset: int) -> None:
    """bases() yields the smallest rank of every group, in the groups' order."""
    # a grid with axes of the drawn sizes; every other axis numbers the groups
    sizes = [s for pair in pairs for s in pair] or [1]
    names = [f"a{i}" for i in range(len(sizes))]
    grid = Grid.from_sizes(**dict(zip(names, sizes, strict=True)), rank_offset=offset)
    groups = grid.groups(*names[::2])
    assert isinstance(groups, OrthogonalGroups)
    assert list(groups.bases()) == [min(g) for g in groups]


def test_bases_of_a_single_group() -> None:
    """A family of one group (no outer runs) has one base, its offset."""
    assert list(OrthogonalGroups(((4, 1),), (), 7).bases()) == [7]
    assert list(OrthogonalGroups(((2, 1),), ((3, 2),), 1).bases()) == [1, 3, 5]


def test_orthogonal_contains_rejects_a_string_and_a_shifted_group() -> None:
    """`in` on a grid's groups: a string is no group, nor is a group's ranks shifted by one."""
    groups = OrthogonalGroups(((2, 4),), ((4, 1),), 8)  # (8, 12), (9, 13), (10, 14), (11, 15)
    assert (9, 13) in groups
    refused: list[object] = ["ab", 9]
    assert not any(probe in groups for probe in refused)
    assert (12, 16) not in groups
    assert (13, 17) not in groups


def test_derived_lookup_without_index_function() -> None:
    """Without index_of, a DerivedGroups scans its groups for a rank."""
    groups = DerivedGroups(2, lambda i: (2 * i + 1, 2 * i))
    assert [groups.index_of_rank(r) for r in range(5)] == [0, 0, 1, 1, None]


def test_short_ranks_hash_like_their_tuple() -> None:
    """A Ranks of up to 4096 ranks hashes like the tuple it equals."""
    for size in (1, 5, 4096):
        group = Ranks(3, ((size, 2),))
        assert hash(group) == hash(tuple(range(3, 3 + 2 * size, 2)))


def test_long_ranks_hash_by_their_ranks() -> None:
    """Long Ranks with different first ranks (or lengths) hash differently."""
    assert hash(Ranks(0, ((5000, 1),))) != hash(Ranks(1, ((5000, 1),)))
    assert hash(Ranks(0, ((5000, 1),))) != hash(Ranks(0, ((5001, 1),)))


def test_ranks_repr_up_to_the_shown_limit_is_a_tuple() -> None:
    """A Ranks of exactly SHOWN_RANKS ranks prints as the tuple it equals."""
    group = Ranks(0, ((SHOWN_RANKS, 1),))
    assert repr(group) == repr(tuple(range(SHOWN_RANKS)))


def test_long_ranks_without_runs_summarise_to_json() -> None:
    """A long group that is a chunk across runs summarises with runs null (docs/cli.md)."""
    group = Ranks(0, ((3, 1), (1000, 16)), range(1, 2999))  # ranks 1, 2, 16, 17, 18, 32, ...
    assert group.runs is None
    summary = group.to_json(limit=8)
    assert isinstance(summary, dict)
    assert summary["runs"] is None
    assert summary["first"] == [1, 2, 16, 17, 18, 32, 33, 34]


def test_grid_texts_without_offset() -> None:
    """str and repr of a grid from rank 0 say nothing about an offset."""
    grid = Grid.from_sizes(pp=2, dp=3, tp=4)
    assert str(grid) == "tp4·dp3·pp2 (tp fastest)"
    assert repr(grid) == "Grid.from_sizes(pp=2, dp=3, tp=4)"


def test_grid_coordinate_error_shows_the_value() -> None:
    """An out-of-range coordinate is named with its value and the valid range."""
    grid = Grid.from_sizes(dp=2, tp=4)
    message = r"^coordinate tp=7 is out of range; valid: 0 to 3$"
    with pytest.raises(TopologyError, match=message):
        grid.rank(dp=0, tp=7)
    with pytest.raises(TopologyError, match=message):
        grid.matching(tp=7)


def test_rank_name_omit_error_shows_the_value() -> None:
    """A non-tuple omit is refused with the value shown."""
    with pytest.raises(TopologyError, match=r"got 'dp'$"):
        Grid.from_sizes(dp=2, tp=2).rank_name(0, omit="dp")  # type: ignore[arg-type]


# -- runs: the mixed-radix arithmetic, against the listed points ---------------------------------


@settings(max_examples=100, deadline=None)
@given(digit_runs())
def test_runs_measures_match_the_listed_points(runs: Runs) -> None:
    """volume, top, offsets and max_gap of digit runs agree with the listed points."""
    listed = sorted(_points(runs))
    assert runs_mod.volume(runs) == len(listed)
    assert runs_mod.top(runs) == listed[-1]
    assert runs_mod.offsets(runs) == tuple(listed)  # digits ascend: points in rank order
    gaps = [b - a for a, b in itertools.pairwise(listed)]
    assert runs_mod.max_gap(runs) == max([1, *gaps])


def test_no_runs_are_the_single_point_zero() -> None:
    """Empty runs hold one point, 0 (a group of one rank at its base)."""
    assert runs_mod.offsets(()) == (0,)
    assert (runs_mod.volume(()), runs_mod.top(()), runs_mod.max_gap(())) == (1, 0, 1)
    assert (runs_mod.point(0, ()), runs_mod.index_of(7, ()), runs_mod.project(7, ())) == (0, 0, 0)


@st.composite
def grid_runs(draw: st.DrawFn) -> Runs:
    """1 to 3 runs as a grid's axes make them: each stride a multiple of the span below."""
    runs: list[tuple[int, int]] = []
    span = 1
    for _ in range(draw(st.integers(1, 3))):
        size = draw(st.integers(2, 4))
        stride = span * draw(st.integers(1, 3))
        runs.append((size, stride))
        span = size * stride
    return tuple(runs)


@settings(max_examples=100, deadline=None)
@given(grid_runs(), st.integers(0, 200))
def test_point_index_and_project_invert_each_other(runs: Runs, value: int) -> None:
    """point numbers the points in order; index_of inverts it; project is their round trip."""
    listed = sorted(_points(runs))
    for position, rank in enumerate(listed):
        assert runs_mod.point(position, runs) == rank
        assert runs_mod.index_of(rank, runs) == position
    projected = runs_mod.project(value, runs)
    assert projected == runs_mod.point(runs_mod.index_of(value, runs), runs)
    assert projected in listed


@settings(max_examples=100, deadline=None)
@given(digit_runs(), st.data())
def test_split_at_a_digit_boundary(runs: Runs, data: st.DataObject) -> None:
    """Cut at a prefix product of the sizes, point(p) = low point(p % w) + high point(p // w)."""
    sizes = [s for s, _ in runs]
    cut = data.draw(st.integers(0, len(sizes)))
    width = 1
    for size in sizes[:cut]:
        width *= size
    if cut < len(sizes):  # also cut inside the next digit, at a divisor of its size
        width *= data.draw(
            st.sampled_from([d for d in range(1, sizes[cut] + 1) if sizes[cut] % d == 0])
        )
    parts = runs_mod.split(runs, width)
    assert parts is not None
    low, high = parts
    assert runs_mod.volume(low) == width
    assert all(type(n) is int for run in low + high for n in run)  # sizes stay ints
    for position in range(runs_mod.volume(runs)):
        expected = runs_mod.point(position % width, low) + runs_mod.point(position // width, high)
        assert runs_mod.point(position, runs) == expected


def test_split_off_a_digit_boundary_is_none() -> None:
    """A width that cuts a digit unevenly has no split; one that divides it splits in ints."""
    assert runs_mod.split(((4, 1), (3, 8)), 3) is None
    # the docstring's cut inside a digit: 2 of the 4 low positions, then 2 blocks of 2 and 3 of 8
    low, high = runs_mod.split(((4, 1), (3, 8)), 2) or ((), ())
    assert (low, high) == (((2, 1),), ((2, 2), (3, 8)))
    assert all(type(n) is int for run in low + high for n in run)
    low, high = runs_mod.split(((2, 1), (4, 2)), 4) or ((), ())  # a whole digit, then half
    assert (low, high) == (((2, 1), (2, 2)), ((2, 4),))
    assert all(type(n) is int for run in low + high for n in run)
    assert runs_mod.split(((2, 1), (3, 8)), 4) is None  # 2 then 2 of a digit of 3


@settings(max_examples=100, deadline=None)
@given(digit_runs(), st.data())
def test_aligned_pieces_tile_the_positions(runs: Runs, data: st.DataObject) -> None:
    """aligned cuts start..stop into consecutive pieces of whole lower digits, in order."""
    count = runs_mod.volume(runs)
    start = data.draw(st.integers(0, count - 1))
    stop = data.draw(st.integers(start + 1, count))
    scales = [1]
    for size, _ in runs:
        scales.append(scales[-1] * size)
    position = start
    for first, level, pieces in runs_mod.aligned(start, stop, runs):
        assert first == position
        assert first % scales[level] == 0  # every lower digit free
        digit = (first // scales[level]) % runs[level][0]
        assert pieces >= 1 and digit + pieces <= runs[level][0]  # stays inside digit `level`
        position += pieces * scales[level]
    assert position == stop


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 9)), max_size=4))
def test_normal_keeps_the_point_multiset(runs: list[tuple[int, int]]) -> None:
    """normal sorts by stride, drops size-1 runs and merges runs, keeping every point."""
    canonical = runs_mod.normal(runs)
    assert sorted(_points(canonical)) == sorted(_points(tuple(runs)))
    assert all(size > 1 for size, _ in canonical)
    assert [d for _, d in canonical] == sorted(d for _, d in canonical)
    assert all(a[0] * a[1] != b[1] for a, b in itertools.pairwise(canonical))
