"""AxisGroups: any Grid's groups under kind names (sets of axes joined by ``-``).

Laws against a brute force over every rank (coordinates by repeated ``divmod``, not by the
grid's strides), then golden values for DeepSpeed's pipe/data/model layout, then the errors.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import AxisGroups, Grid, TopologyError
from topology.strategies import grids


def coordinates(grid: Grid, rank: int) -> dict[str, int]:
    """The rank's coordinate: its offset written in the mixed radix of the shape, last fastest."""
    rest = rank - grid.rank_offset
    coord: dict[str, int] = {}
    for name, size in reversed(list(zip(grid.axes, grid.shape, strict=True))):
        rest, coord[name] = divmod(rest, size)
    return coord


def brute_group(grid: Grid, axes: set[str], rank: int) -> tuple[int, ...]:
    """Every rank that agrees with ``rank`` on the axes outside ``axes``, ascending."""
    mine = coordinates(grid, rank)
    every = range(grid.rank_offset, grid.rank_offset + grid.world_size)
    return tuple(
        r
        for r in every
        if all(coordinates(grid, r)[a] == mine[a] for a in grid.axes if a not in axes)
    )


@st.composite
def layouts(draw: st.DrawFn) -> tuple[AxisGroups, list[list[str]]]:
    """A grid, some non-empty sets of its axes (each in a drawn order), and their AxisGroups."""
    grid = draw(grids(max_world_size=48))
    subsets = st.sets(st.sampled_from(grid.axes), min_size=1).flatmap(
        lambda chosen: st.permutations(sorted(chosen))
    )
    spelled = draw(st.lists(subsets, min_size=1, max_size=4, unique_by=frozenset))
    return AxisGroups(grid, kinds=tuple("-".join(s) for s in spelled)), spelled


@given(layouts())
def test_kinds_are_the_axis_sets_in_grid_order(case: tuple[AxisGroups, list[list[str]]]) -> None:
    """Each kind is its axes in the grid's order (outermost first), whatever order was given."""
    layout, spelled = case
    expected = tuple("-".join(a for a in layout.grid.axes if a in s) for s in spelled)
    assert layout.kinds == expected
    for given_order, kind in zip(spelled, layout.kinds, strict=True):
        assert layout.kind("-".join(reversed(given_order))).name == kind
        assert set(layout.kind(kind).axes) == set(given_order)
        assert layout.kind(kind).grid == layout.grid


@given(layouts())
def test_groups_equal_brute_force(case: tuple[AxisGroups, list[list[str]]]) -> None:
    """group_of, size, local_rank and locate agree with the brute force for every rank."""
    layout, spelled = case
    grid = layout.grid
    for axes, kind in zip(spelled, layout.kinds, strict=True):
        everything = list(layout.groups(kind))
        for rank in range(grid.rank_offset, grid.rank_offset + grid.world_size):
            group = brute_group(grid, set(axes), rank)
            assert layout.group_of(rank, kind) == group
            assert layout.size(kind) == len(group)
            assert layout.local_rank(rank, kind) == group.index(rank)
            assert layout.has_group(rank, kind)
            index, local = layout.locate(rank, kind)
            assert everything[index] == group and local == group.index(rank)
            assert layout.group_index(rank, kind) == index


@given(layouts())
def test_groups_partition_the_grid_in_order(case: tuple[AxisGroups, list[list[str]]]) -> None:
    """Each kind's groups cover every rank once and come in ascending order of first rank."""
    layout, _ = case
    grid = layout.grid
    for kind in layout.kinds:
        groups = list(layout.groups(kind))
        flat = sorted(r for g in groups for r in g)
        assert flat == list(range(grid.rank_offset, grid.rank_offset + grid.world_size))
        assert [g[0] for g in groups] == sorted(g[0] for g in groups)


@given(grids(max_world_size=48))
def test_default_kinds_are_the_single_axes(grid: Grid) -> None:
    """Without kinds, each axis alone is a kind, outermost first."""
    layout = AxisGroups(grid)
    assert layout.kinds == grid.axes
    assert (layout.world_size, layout.rank_offset) == (grid.world_size, grid.rank_offset)
    assert AxisGroups(grid, kinds=list(grid.axes)) == layout


def test_deepspeed_pipe_data_model_golden() -> None:
    """DeepSpeed's PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2): axes
    pipe, data, model (model fastest). Worked by hand: rank = 4 * pipe + 2 * data + model."""
    layout = AxisGroups(
        Grid.from_sizes(pipe=2, data=2, model=2), kinds=("data", "pipe", "model", "model-pipe")
    )
    assert layout.kinds == ("data", "pipe", "model", "pipe-model")
    assert list(layout.groups("data")) == [(0, 2), (1, 3), (4, 6), (5, 7)]
    assert list(layout.groups("pipe")) == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert list(layout.groups("model")) == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert list(layout.groups("pipe-model")) == [(0, 1, 4, 5), (2, 3, 6, 7)]
    assert layout.locate(6, "pipe-model") == (1, 2)
    assert str(layout) == (
        "model2·data2·pipe2 (model fastest) with kinds data, pipe, model, pipe-model"
    )
    assert repr(layout) == (
        "AxisGroups(Grid.from_sizes(pipe=2, data=2, model=2), "
        "kinds=('data', 'pipe', 'model', 'pipe-model'))"
    )


def test_offset_grid_golden() -> None:
    """A grid from rank 10: the groups are shifted, ranks below 10 are outside."""
    layout = AxisGroups(Grid.from_sizes(a=2, b=3, rank_offset=10), kinds=("a",))
    assert list(layout.groups("a")) == [(10, 13), (11, 14), (12, 15)]
    assert layout.locate(14, "a") == (1, 1)
    with pytest.raises(TopologyError, match=r"rank 9 is outside this grid; valid ranks: 10 to 15"):
        layout.locate(9, "a")
    with pytest.raises(TopologyError, match=r"rank 16 is outside"):
        layout.has_group(16, "a")


GRID = Grid.from_sizes(pipe=2, data=2, model=2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"grid": 5}, r"grid must be a topology\.Grid, got 5 \(int\)"),
        ({"grid": GRID, "kinds": ()}, r"kinds must be a non-empty sequence"),
        ({"grid": GRID, "kinds": 7}, r"kinds must be a non-empty sequence .* got 7"),
        ({"grid": GRID, "kinds": ("data", "data")}, r"kind 'data' is listed twice"),
        ({"grid": GRID, "kinds": ("data-model", "model-data")}, r"twice .* \(as 'data-model'\)"),
        ({"grid": GRID, "kinds": ("tp",)}, r"unknown axis 'tp'; this grid has axes"),
        ({"grid": GRID, "kinds": ("data-data",)}, r"axis 'data' is named twice"),
        ({"grid": GRID, "kinds": ("",)}, r"a kind must be axis names joined by '-'"),
        ({"grid": GRID, "kinds": (3,)}, r"a kind must be axis names joined by '-'.* got 3"),
    ],
)
def test_bad_arguments_name_the_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        AxisGroups(**kwargs)


def test_a_string_is_one_kind() -> None:
    """kinds="data-model" is one kind, not a sequence of one-letter kinds."""
    assert AxisGroups(GRID, kinds="model-data").kinds == ("data-model",)


@pytest.mark.parametrize("query", ["pipe", "pipe-data", "", None, 3, "x"])
def test_unknown_kinds_list_the_offered_ones(query: object) -> None:
    layout = AxisGroups(GRID, kinds=("data", "model-pipe"))
    for ask in (layout.size, layout.groups, layout.kind):
        with pytest.raises(TopologyError, match=r"this layout offers data, pipe-model"):
            ask(query)  # type: ignore[operator]
    with pytest.raises(TopologyError, match=r"unknown kind"):
        layout.group_of(0, query)  # type: ignore[arg-type]
