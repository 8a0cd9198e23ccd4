"""Laws of Grid, checked against a brute-force reference written here (DESIGN 2.1 and 4).

The reference enumerates every coordinate with ``itertools.product`` in row-major order (the
outermost axis first, the last axis fastest), so the n-th coordinate tuple is rank
``rank_offset + n``; a group along some axes is the set of ranks that share every other
coordinate, listed in enumeration order; groups are listed by their smallest rank.
"""

from __future__ import annotations

import itertools
from math import prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Grid, TopologyError
from topology.strategies import grids

# Example budget relative to the loaded profile (100 in ci/dev, fewer in `mutation`).
BUDGET = settings.default.max_examples

CHEAP = settings(max_examples=2 * BUDGET)


def reference_coords(grid: Grid) -> dict[int, tuple[int, ...]]:
    """Every rank's coordinate tuple (outermost axis first), by row-major enumeration."""
    cells = itertools.product(*(range(size) for size in grid.shape))
    return {grid.rank_offset + n: cell for n, cell in enumerate(cells)}


def reference_groups(grid: Grid, axes: set[str]) -> list[tuple[int, ...]]:
    """The groups along ``axes``: ranks sharing every other coordinate, by smallest rank."""
    keep = [i for i, name in enumerate(grid.axes) if name not in axes]
    buckets: dict[tuple[int, ...], list[int]] = {}
    for rank, cell in reference_coords(grid).items():
        buckets.setdefault(tuple(cell[i] for i in keep), []).append(rank)
    return sorted((tuple(group) for group in buckets.values()), key=lambda g: g[0])


def reference_position(grid: Grid, rank: int, axes: set[str]) -> int:
    """The mixed-radix number of the rank's coordinates along ``axes``, innermost fastest."""
    cell = reference_coords(grid)[rank]
    position, scale = 0, 1
    for index in reversed(range(len(grid.axes))):
        if grid.axes[index] in axes:
            position += cell[index] * scale
            scale *= grid.shape[index]
    return position


@st.composite
def grids_with_axes(draw: st.DrawFn, max_world_size: int = 64) -> tuple[Grid, tuple[str, ...]]:
    """A grid and a subset of its axes, in a drawn order: non-empty in about 7 of 8 examples.

    (``st.lists(st.sampled_from(axes), unique=True)`` is empty in about 3 of 4 examples, so the
    laws would mostly check singleton groups.)
    """
    grid = draw(grids(max_world_size=max_world_size))
    shuffled = draw(st.permutations(grid.axes))
    if draw(st.integers(0, 7)) == 0:
        return grid, ()
    count = draw(st.integers(1, len(shuffled)))
    return grid, tuple(shuffled[:count])


@st.composite
def grids_with_rank(draw: st.DrawFn) -> tuple[Grid, int]:
    """A grid and one of its ranks."""
    grid = draw(grids())
    return grid, draw(st.integers(grid.rank_offset, grid.rank_offset + grid.world_size - 1))


# -- laws ---------------------------------------------------------------------------------------


@CHEAP
@given(grids_with_rank())
def test_rank_of_coord_is_identity(case: tuple[Grid, int]) -> None:
    """rank(coord(r)) == r for every rank."""
    grid, rank = case
    assert grid.rank(**grid.coord(rank)) == rank


@CHEAP
@given(grids())
def test_coord_matches_row_major_enumeration(grid: Grid) -> None:
    """coord(r) is the r-th tuple of the row-major enumeration of the shape."""
    for rank, cell in reference_coords(grid).items():
        assert tuple(grid.coord(rank).values()) == cell
        assert tuple(grid.coord(rank)) == grid.axes


@CHEAP
@given(grids())
def test_strides_are_suffix_products(grid: Grid) -> None:
    """stride[i] is the product of the sizes of the axes inside axis i; world is their product."""
    for index, stride in enumerate(grid.strides):
        assert stride == prod(grid.shape[index + 1 :])
    assert grid.world_size == prod(grid.shape)


@CHEAP
@given(grids_with_axes())
def test_groups_match_brute_force(case: tuple[Grid, tuple[str, ...]]) -> None:
    """groups(*axes) equals the brute-force grouping, in the same order."""
    grid, axes = case
    assert list(grid.groups(*axes)) == reference_groups(grid, set(axes))


@CHEAP
@given(grids_with_axes())
def test_groups_partition_the_ranks(case: tuple[Grid, tuple[str, ...]]) -> None:
    """The groups along any axes are disjoint, cover every rank once, and have prod(sizes) ranks."""
    grid, axes = case
    groups = list(grid.groups(*axes))
    size = prod(grid.shape[grid.axes.index(a)] for a in axes)
    assert all(len(group) == size == grid.size(*axes) for group in groups)
    assert len(groups) * size == grid.world_size
    flat = sorted(r for group in groups for r in group)
    assert flat == list(range(grid.rank_offset, grid.rank_offset + grid.world_size))


@CHEAP
@given(grids_with_axes())
def test_groups_are_ascending_and_ordered_by_first_rank(case: tuple[Grid, tuple[str, ...]]) -> None:
    """Every group ascends and the groups come in ascending order of their smallest rank."""
    grid, axes = case
    groups = list(grid.groups(*axes))
    assert all(list(group) == sorted(group) for group in groups)
    firsts = [group[0] for group in groups]
    assert firsts == sorted(firsts)


@CHEAP
@given(grids_with_axes())
def test_indexing_matches_iteration(case: tuple[Grid, tuple[str, ...]]) -> None:
    """groups[i] is the i-th iterated group, negative indices count back, len matches."""
    grid, axes = case
    lazy = grid.groups(*axes)
    listed = list(lazy)
    assert len(lazy) == len(listed)
    assert [lazy[i] for i in range(len(lazy))] == listed
    assert [lazy[-i - 1] for i in range(len(lazy))] == listed[::-1]
    assert lazy[1:3] == listed[1:3]
    assert lazy == listed


@CHEAP
@given(grids_with_axes())
def test_token_order_is_irrelevant(case: tuple[Grid, tuple[str, ...]]) -> None:
    """groups('a-b') == groups('b', 'a'): only the set of axes matters."""
    grid, axes = case
    if axes:
        assert list(grid.groups("-".join(axes))) == list(grid.groups(*reversed(axes)))


@CHEAP
@given(grids_with_axes())
def test_groups_in_axis_order_lists_members_by_given_axes(
    case: tuple[Grid, tuple[str, ...]],
) -> None:
    """groups_in_axis_order(*axes) holds groups(*axes)'s groups in their order, each one's ranks
    sorted by their coordinates on ``axes`` as given (the first slowest, the last fastest)."""
    grid, axes = case
    coords = reference_coords(grid)
    at = [grid.axes.index(a) for a in axes]
    expected = [
        tuple(sorted(group, key=lambda r: tuple(coords[r][i] for i in at)))
        for group in reference_groups(grid, set(axes))
    ]
    assert grid.groups_in_axis_order(*axes) == expected
    if axes:  # one token 'a-b' reads as 'a', 'b'
        assert grid.groups_in_axis_order("-".join(axes)) == expected
    assert grid.groups_in_axis_order(*sorted(axes, key=grid.axes.index)) == list(grid.groups(*axes))


@CHEAP
@given(grids_with_axes(), st.data())
def test_group_of_holds_rank_at_its_coordinate(
    case: tuple[Grid, tuple[str, ...]], data: st.DataObject
) -> None:
    """group_of(r) is a group of groups(), holds r, at the mixed-radix coordinate of r."""
    grid, axes = case
    rank = data.draw(st.integers(grid.rank_offset, grid.rank_offset + grid.world_size - 1))
    group = grid.group_of(rank, *axes)
    assert group in list(grid.groups(*axes))
    assert group in grid.groups(*axes)
    position = reference_position(grid, rank, set(axes))
    assert group[position] == rank
    assert grid.index_in_group(rank, *axes) == position


@CHEAP
@given(grids(max_world_size=32), st.data())
def test_disjoint_axis_sets_meet_in_at_most_one_rank(grid: Grid, data: st.DataObject) -> None:
    """A group along A and a group along B (A, B disjoint) share at most one rank."""
    mask = data.draw(st.lists(st.sampled_from((0, 1, 2)), min_size=len(grid.axes)))
    first = [a for a, m in zip(grid.axes, mask, strict=False) if m == 1]
    second = [a for a, m in zip(grid.axes, mask, strict=False) if m == 2]
    for one in grid.groups(*first):
        for two in grid.groups(*second):
            assert len(set(one) & set(two)) <= 1


@CHEAP
@given(grids())
def test_from_order_is_from_sizes_reversed(grid: Grid) -> None:
    """from_order lists axes innermost first; from_sizes outermost first; both give one grid."""
    sizes = dict(zip(grid.axes, grid.shape, strict=True))
    inner_first = dict(reversed(sizes.items()))
    offset = grid.rank_offset
    assert Grid.from_sizes(rank_offset=offset, **sizes) == grid
    assert Grid.from_order("-".join(inner_first), rank_offset=offset, **inner_first) == grid
    assert grid.order == "-".join(inner_first)


@CHEAP
@given(grids())
def test_grid_is_hashable_value(grid: Grid) -> None:
    """Equal grids hash equal; a different offset makes a different grid."""
    twin = Grid(grid.axes, grid.shape, grid.rank_offset)
    assert twin == grid and hash(twin) == hash(grid)
    assert Grid(grid.axes, grid.shape, grid.rank_offset + 1) != grid


# -- examples -----------------------------------------------------------------------------------


def test_no_axes_gives_singletons() -> None:
    """groups() with no axes makes every rank a group of its own."""
    grid = Grid.from_sizes(dp=2, tp=3, rank_offset=4)
    assert list(grid.groups()) == [(r,) for r in range(4, 10)]


def test_groups_in_axis_order_megatron_example() -> None:
    """Megatron's _gen_rank_enum docstring: shape [2, 2, 2], dims a (fastest), b, c; dims
    ["a", "b"] give [[0, 2, 1, 3], [4, 6, 5, 7]]; an unknown or repeated axis raises."""
    grid = Grid.from_order("a-b-c", a=2, b=2, c=2, rank_offset=8)
    assert grid.groups_in_axis_order("a", "b") == [(8, 10, 9, 11), (12, 14, 13, 15)]
    assert grid.groups_in_axis_order() == [(r,) for r in range(8, 16)]
    with pytest.raises(TopologyError, match="unknown axis 'd'"):
        grid.groups_in_axis_order("a", "d")
    with pytest.raises(TopologyError, match="named twice"):
        grid.groups_in_axis_order("a", "a")


def test_size_one_axes_are_real_axes() -> None:
    """A size-1 axis exists and has singleton groups."""
    grid = Grid.from_order("tp-cp-dp", tp=2, cp=1, dp=2)
    assert grid.size("cp") == 1
    assert list(grid.groups("cp")) == [(0,), (1,), (2,), (3,)]


def test_design_example() -> None:
    """DESIGN 2.1: from_sizes(pp, dp, tp) and from_order('tp-dp-pp') agree (strides 4, 2, 1)."""
    a = Grid.from_sizes(pp=2, dp=2, tp=2)
    b = Grid.from_order("tp-dp-pp", tp=2, dp=2, pp=2)
    assert a == b
    assert dict(zip(a.axes, a.strides, strict=True)) == {"pp": 4, "dp": 2, "tp": 1}
