"""Partial coordinates and shard names of a Grid: ``matching`` and ``rank_name``.

Laws first (a brute-force filter over every rank by ``grid.coord``), then golden values taken
from DeepSpeed's own unit tests (``tests/unit/runtime/pipe/test_topology.py``, whose
``ProcessTopology(axes, dims)`` lists axes outermost first like ``Grid(axes, shape)``), then the
errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Grid, TopologyError
from topology.strategies import grids, ranks

CHEAP = settings(max_examples=2 * settings().max_examples)


def brute_force(grid: Grid, partial: Mapping[str, int]) -> tuple[int, ...]:
    """Every rank of the grid, in rank order, whose coordinate agrees with ``partial``."""
    every = range(grid.rank_offset, grid.rank_offset + grid.world_size)
    return tuple(r for r in every if all(grid.coord(r)[name] == v for name, v in partial.items()))


@st.composite
def partial_coords(draw: st.DrawFn) -> tuple[Grid, dict[str, int]]:
    """A grid and a coordinate on a drawn subset of its axes (any size, from none to all)."""
    grid = draw(grids(max_world_size=64))
    count = draw(st.integers(0, len(grid.axes)))
    chosen = draw(st.permutations(grid.axes))[:count]
    partial = {name: draw(st.integers(0, grid.shape[grid.axes.index(name)] - 1)) for name in chosen}
    return grid, partial


# -- laws --------------------------------------------------------------------------------------


@CHEAP
@given(partial_coords())
def test_matching_equals_brute_force_filter(case: tuple[Grid, dict[str, int]]) -> None:
    """matching(**partial) is exactly the ranks whose coord agrees, in ascending rank order."""
    grid, partial = case
    assert grid.matching(**partial) == brute_force(grid, partial)


@CHEAP
@given(partial_coords())
def test_matching_counts_the_free_axes(case: tuple[Grid, dict[str, int]]) -> None:
    """There are as many matches as the free axes have coordinates, all of them ascending."""
    grid, partial = case
    found = grid.matching(**partial)
    free = [size for name, size in zip(grid.axes, grid.shape, strict=True) if name not in partial]
    assert len(found) == prod(free)
    assert list(found) == sorted(set(found))


@given(grids(max_world_size=64).flatmap(lambda g: st.tuples(st.just(g), ranks(g))))
def test_matching_a_full_coordinate_is_that_rank(case: tuple[Grid, int]) -> None:
    """Given every axis, matching returns just the rank at that coordinate."""
    grid, rank = case
    assert grid.matching(**grid.coord(rank)) == (rank,)


@given(grids(max_world_size=64))
def test_matching_nothing_is_the_whole_grid(grid: Grid) -> None:
    """With no axis given every rank matches."""
    assert grid.matching() == tuple(range(grid.rank_offset, grid.rank_offset + grid.world_size))


@CHEAP
@given(grids(max_world_size=64), st.data())
def test_rank_name_is_injective_without_omitted_axes(grid: Grid, data: st.DataObject) -> None:
    """Naming every axis gives distinct ranks distinct names, whatever the separators."""
    inner, outer = data.draw(st.text(max_size=3)), data.draw(st.text(max_size=3))
    every = range(grid.rank_offset, grid.rank_offset + grid.world_size)
    names = {grid.rank_name(r, inner_sep=inner, outer_sep=outer) for r in every}
    assert len(names) == grid.world_size


@CHEAP
@given(grids(max_world_size=64), st.data())
def test_rank_names_agree_exactly_when_kept_coordinates_agree(
    grid: Grid, data: st.DataObject
) -> None:
    """Two ranks share a name iff their coordinates agree on every axis not omitted."""
    omit = tuple(data.draw(st.lists(st.sampled_from(grid.axes), unique=True)))
    first, second = data.draw(ranks(grid)), data.draw(ranks(grid))
    kept = [name for name in grid.axes if name not in omit]
    same = all(grid.coord(first)[a] == grid.coord(second)[a] for a in kept)
    assert (grid.rank_name(first, omit=omit) == grid.rank_name(second, omit=omit)) == same


@given(grids(max_world_size=64).flatmap(lambda g: st.tuples(st.just(g), ranks(g))))
def test_rank_name_lists_axes_outermost_first(case: tuple[Grid, int]) -> None:
    """The default name is axis_cc pieces joined by '-', in axes order (a separate formulation)."""
    grid, rank = case
    pieces = [f"{name}_{value:02d}" for name, value in grid.coord(rank).items()]
    assert grid.rank_name(rank) == "-".join(pieces)


# -- golden values from DeepSpeed's unit tests -------------------------------------------------


def test_matching_golden_from_deepspeed() -> None:
    """DeepSpeed's test_topology_match and test_topology_3d filter_match answers."""
    assert Grid(("pipe", "data", "model"), (2, 2, 2)).matching(pipe=0, data=1) == (2, 3)
    grid = Grid(("a", "b", "c"), (2, 2, 2))
    assert grid.matching(a=0) == (0, 1, 2, 3)
    assert grid.matching(b=1, c=1) == (3, 7)
    assert grid.matching(a=1, b=1, c=1) == (7,)


def test_matching_one_axis_golden_from_deepspeed() -> None:
    """DeepSpeed's get_axis_list answers (one fixed axis) for axes ['row', 'col'], dims [2, 2]."""
    grid = Grid(("row", "col"), (2, 2))
    assert [grid.matching(row=i) for i in (0, 1)] == [(0, 1), (2, 3)]
    assert [grid.matching(col=i) for i in (0, 1)] == [(0, 2), (1, 3)]


def test_rank_name_golden_from_deepspeed() -> None:
    """DeepSpeed's test_topology_rank_repr answers, with its omit_axes spelled as omit."""
    grid = Grid(("a", "b"), (2, 2))
    assert [grid.rank_name(r) for r in range(4)] == [
        "a_00-b_00",
        "a_00-b_01",
        "a_01-b_00",
        "a_01-b_01",
    ]
    assert grid.rank_name(3, inner_sep="+") == "a+01-b+01"
    assert grid.rank_name(3, inner_sep="🤗", outer_sep="_JEFF_") == "a🤗01_JEFF_b🤗01"
    grid = Grid(("pipe", "data"), (2, 2))
    assert [grid.rank_name(r, omit=("pipe", "data")) for r in range(4)] == [""] * 4
    assert [grid.rank_name(r, omit=("pipe",)) for r in range(4)] == [
        "data_00",
        "data_01",
        "data_00",
        "data_01",
    ]
    assert grid.rank_name(2) == "pipe_01-data_00"
    grid = Grid(("pipe", "data", "model"), (2, 2, 2))
    names = [grid.rank_name(r, omit=("data", "pipe")) for r in range(8)]
    assert names == ["model_00", "model_01"] * 4


def test_matching_on_a_huge_grid_touches_only_the_matches() -> None:
    """On 2**40 ranks, fixing the inner axis gives the 4 ranks b + a * 2**38 (stride arithmetic)."""
    grid = Grid.from_sizes(a=4, b=2**38)
    assert grid.matching(b=3) == tuple(3 + a * 2**38 for a in range(4))
    assert grid.rank_name(2**40 - 1) == f"a_03-b_{2**38 - 1}"


def test_rank_offset_shifts_matches() -> None:
    """A grid from rank 8 matches the ranks of the same grid from 0, plus 8."""
    grid = Grid.from_sizes(pp=2, tp=2, rank_offset=8)
    assert grid.matching(tp=1) == (9, 11)
    assert grid.rank_name(11) == "pp_01-tp_01"


# -- errors ------------------------------------------------------------------------------------


def test_matching_unknown_axis_names_the_valid_ones() -> None:
    """An axis the grid lacks is a TopologyError listing the grid's axes."""
    with pytest.raises(
        TopologyError, match=r"^unknown axis 'xp'; this grid has axes \('pp', 'tp'\)"
    ):
        Grid.from_sizes(pp=2, tp=2).matching(xp=0)


@pytest.mark.parametrize("value", [-1, 2, True, 1.0, "0", None])
def test_matching_bad_coordinate_names_the_range(value: object) -> None:
    """A coordinate outside 0 .. size - 1 (or not an int) is a TopologyError with the range."""
    with pytest.raises(TopologyError, match=r"^coordinate tp=.* is out of range; valid: 0 to 1$"):
        Grid.from_sizes(pp=3, tp=2).matching(pp=0, tp=value)  # type: ignore[arg-type]


@given(grids(max_world_size=64), st.data())
def test_matching_errors_are_topology_errors(grid: Grid, data: st.DataObject) -> None:
    """Any out-of-range coordinate on a real axis raises TopologyError (a ValueError)."""
    name = data.draw(st.sampled_from(grid.axes))
    size = grid.shape[grid.axes.index(name)]
    value = data.draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=size)))
    with pytest.raises(TopologyError, match=rf"valid: 0 to {size - 1}$"):
        grid.matching(**{name: value})


@pytest.mark.parametrize("rank", [-1, 4, True, "1"])
def test_rank_name_bad_rank(rank: object) -> None:
    """A rank outside the grid, or not an int, is a TopologyError."""
    with pytest.raises(TopologyError, match=r"^rank (.* is outside this grid|must be an int)"):
        Grid.from_sizes(pp=2, tp=2).rank_name(rank)  # type: ignore[arg-type]


def test_rank_name_unknown_omitted_axis() -> None:
    """Omitting an axis the grid lacks is a TopologyError listing the grid's axes."""
    with pytest.raises(TopologyError, match=r"^unknown axis 'data'; this grid has axes"):
        Grid.from_sizes(pp=2, tp=2).rank_name(0, omit=("data",))


def test_rank_name_omit_must_be_a_tuple() -> None:
    """omit is a tuple of names; a bare string is refused rather than read letter by letter."""
    with pytest.raises(TopologyError, match=r"^omit must be a tuple of axis names"):
        Grid.from_sizes(pp=2, tp=2).rank_name(0, omit="pp")  # type: ignore[arg-type]


@pytest.mark.parametrize("keyword", ["inner_sep", "outer_sep"])
def test_rank_name_separators_must_be_strings(keyword: str) -> None:
    """A separator that is not a string is a TopologyError naming it."""
    with pytest.raises(
        TopologyError, match=rf"^{keyword} must be a string like '_', got 1 \(int\)"
    ):
        Grid.from_sizes(pp=2, tp=2).rank_name(0, **{keyword: 1})  # type: ignore[arg-type]


ANYTHING = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=4),
    st.lists(st.integers(0, 3), max_size=2),
    st.tuples(st.text(max_size=3)),
)


@given(grids(max_world_size=16), st.dictionaries(st.text(max_size=3), ANYTHING, max_size=3))
def test_matching_refuses_anything_else_with_topology_errors(
    grid: Grid, coord: dict[str, object]
) -> None:
    """Whatever the keywords and values, matching answers or raises TopologyError, nothing else."""
    try:
        found = grid.matching(**coord)  # type: ignore[arg-type]
    except TopologyError:
        return
    assert found == brute_force(grid, coord)  # type: ignore[arg-type]


@given(grids(max_world_size=16), ANYTHING, ANYTHING, ANYTHING, ANYTHING)
def test_rank_name_refuses_anything_else_with_topology_errors(
    grid: Grid, rank: object, omit: object, inner: object, outer: object
) -> None:
    """Whatever the rank, omit and separators, rank_name names a rank or raises TopologyError."""
    try:
        name = grid.rank_name(rank, omit=omit, inner_sep=inner, outer_sep=outer)  # type: ignore[arg-type]
    except TopologyError:
        return
    assert isinstance(name, str)


def test_an_axis_may_be_called_self() -> None:
    """matching takes any axis name as a keyword, even 'self'."""
    assert Grid(("self", "tp"), (2, 2)).matching(self=1) == (2, 3)
