"""DeepSpeed's pipe topology façade: laws, DeepSpeed's own expected values, errors, real groups.

Golden values come from DeepSpeed's unit tests (``tests/unit/runtime/pipe/test_topology.py``,
v0.19.8). The differential tests compare with ``deepspeed.runtime.pipe.topology`` itself and skip
where DeepSpeed is not importable; everything else runs without it.
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.torch.world import fake_world, run_world
from topology import Grid, TopologyError
from topology_torch.compat._errors import FacadeAssertionError
from topology_torch.compat.deepspeed import (
    PipeDataParallelTopology,
    PipelineParallelGrid,
    PipeModelDataParallelTopology,
    ProcessTopology,
    _prime_factors,
)

AXES = ("pipe", "data", "model", "x", "y")


@st.composite
def layouts(draw: st.DrawFn) -> tuple[list[str], list[int]]:
    """DeepSpeed-style ``(axes, dims)``: 1 to 4 distinct names, at most 48 ranks."""
    names = draw(st.permutations(AXES))[: draw(st.integers(1, 4))]
    dims: list[int] = []
    budget = 48
    for _ in names:
        size = draw(st.integers(1, min(4, budget)))
        dims.append(size)
        budget //= size
    return list(names), dims


def every_coord(axes: list[str], dims: list[int]) -> list[dict[str, int]]:
    """Row-major enumeration (last axis fastest): the n-th coordinate belongs to rank n."""
    cells = itertools.product(*(range(d) for d in dims))
    return [dict(zip(axes, cell, strict=True)) for cell in cells]


# -- laws (no DeepSpeed needed) ----------------------------------------------------------------


@given(layouts())
def test_rank_and_coord_follow_row_major_enumeration(layout: tuple[list[str], list[int]]) -> None:
    """Rank n has the n-th row-major coordinate, both ways."""
    topo = ProcessTopology(*layout)
    for rank, coord in enumerate(every_coord(*layout)):
        assert topo.get_rank(**coord) == rank
        assert topo.get_coord(rank)._asdict() == coord


@given(layouts(), st.data())
def test_filter_match_is_a_filter_over_coordinates(
    layout: tuple[list[str], list[int]], data: st.DataObject
) -> None:
    """filter_match keeps, in rank order, exactly the ranks whose coordinates agree."""
    topo = ProcessTopology(*layout)
    axes, dims = layout
    chosen = data.draw(st.permutations(axes))[: data.draw(st.integers(0, len(axes)))]
    partial = {a: data.draw(st.integers(0, dims[axes.index(a)] - 1)) for a in chosen}
    coords = every_coord(*layout)
    expected = [r for r, c in enumerate(coords) if all(c[a] == v for a, v in partial.items())]
    assert topo.filter_match(**partial) == expected


@given(layouts())
def test_comm_lists_group_ranks_sharing_the_other_axes(layout: tuple[list[str], list[int]]) -> None:
    """get_axis_comm_lists(a): ranks sharing every other coordinate, by first rank, a ascending."""
    topo = ProcessTopology(*layout)
    coords = every_coord(*layout)
    for axis in layout[0]:
        buckets: dict[tuple[int, ...], list[int]] = {}
        for rank, coord in enumerate(coords):
            key = tuple(v for a, v in coord.items() if a != axis)
            buckets.setdefault(key, []).append(rank)
        assert topo.get_axis_comm_lists(axis) == sorted(buckets.values())


# -- DeepSpeed's own expected values -----------------------------------------------------------


def test_deepspeed_topology_2d() -> None:
    """DeepSpeed's test_topology_2d."""
    topo = ProcessTopology(axes=["row", "col"], dims=[2, 2])
    assert topo.world_size() == 4
    ranks = [topo.get_rank(row=r, col=c) for r in (0, 1) for c in (0, 1)]
    assert ranks == [0, 1, 2, 3]
    assert [topo.get_axis_list(axis="row", idx=i) for i in (0, 1)] == [[0, 1], [2, 3]]
    assert [topo.get_axis_list(axis="col", idx=i) for i in (0, 1)] == [[0, 2], [1, 3]]


def test_deepspeed_topology_dims_and_match() -> None:
    """DeepSpeed's test_topology_dims and test_topology_match."""
    topo = ProcessTopology(axes=["a", "b", "c"], dims=[2, 3, 4])
    assert topo.world_size() == 24
    assert [topo.get_dim(a) for a in "abc"] == [2, 3, 4]
    topo = ProcessTopology(axes=["pipe", "data", "model"], dims=[2, 2, 2])
    assert topo.filter_match(pipe=0, data=1) == [2, 3]


def test_deepspeed_topology_rank_repr() -> None:
    """DeepSpeed's test_topology_rank_repr (default omit_axes is ['data', 'pipe'])."""
    topo = ProcessTopology(axes=["a", "b"], dims=[2, 2])
    assert [topo.get_rank_repr(rank=r) for r in range(4)] == [
        "a_00-b_00",
        "a_00-b_01",
        "a_01-b_00",
        "a_01-b_01",
    ]
    assert topo.get_rank_repr(rank=3, inner_sep="+") == "a+01-b+01"
    assert topo.get_rank_repr(rank=3, inner_sep="🤗", outer_sep="_JEFF_") == "a🤗01_JEFF_b🤗01"
    topo = ProcessTopology(axes=["pipe", "data"], dims=[2, 2])
    assert [topo.get_rank_repr(rank=r) for r in range(4)] == [""] * 4
    data_only = [topo.get_rank_repr(rank=r, omit_axes=["pipe"]) for r in range(4)]
    assert data_only == ["data_00", "data_01", "data_00", "data_01"]
    assert [topo.get_rank_repr(rank=r, omit_axes=[]) for r in range(4)] == [
        "pipe_00-data_00",
        "pipe_00-data_01",
        "pipe_01-data_00",
        "pipe_01-data_01",
    ]
    topo = ProcessTopology(axes=["pipe", "data", "model"], dims=[2, 2, 2])
    assert [topo.get_rank_repr(rank=r) for r in range(8)] == ["model_00", "model_01"] * 4


def test_deepspeed_topology_3d() -> None:
    """DeepSpeed's test_topology_3d: ranks, axis lists, ProcessCoord equality, filter_match."""
    topo = ProcessTopology(axes=["a", "b", "c"], dims=[2, 2, 2])
    cells = [(a, b, c) for a in (0, 1) for b in (0, 1) for c in (0, 1)]
    assert [topo.get_rank(a=a, b=b, c=c) for a, b, c in cells] == list(range(8))
    assert topo.get_axis_list("a", 0) == [0, 1, 2, 3]
    assert topo.get_axis_list("a", 1) == [4, 5, 6, 7]
    assert topo.get_axis_list("b", 0) == [0, 1, 4, 5]
    assert topo.get_axis_list("b", 1) == [2, 3, 6, 7]
    assert topo.get_axis_list("c", 0) == [0, 2, 4, 6]
    assert topo.get_axis_list("c", 1) == [1, 3, 5, 7]
    assert [topo.get_coord(r) for r in range(8)] == [topo.ProcessCoord(*c) for c in cells]
    assert topo.filter_match(a=0) == [0, 1, 2, 3]
    assert topo.filter_match(b=1, c=1) == [3, 7]
    assert topo.filter_match(a=1, b=1, c=1) == [7]
    assert topo.get_coord(0).a == 0


def test_deepspeed_topology_comm_list() -> None:
    """DeepSpeed's test_topology_comm_list, including [] for a nonsense axis."""
    topo = PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2)
    assert topo.get_rank(pipe=1, data=0, model=1) == 5
    assert topo.get_axis_comm_lists("pipe") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert topo.get_axis_comm_lists("data") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert topo.get_axis_comm_lists("model") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert topo.get_axis_comm_lists("jeff") == []


def test_deepspeed_primes() -> None:
    """DeepSpeed's test_primes: factors multiply back, primes factor to themselves, 0 raises."""
    with pytest.raises(ValueError):
        _prime_factors(0)
    for n in range(1, 30):
        primes = _prime_factors(n)
        assert prod(primes) == n
        assert all(_prime_factors(p) == [p] for p in primes)


# -- behaviour DeepSpeed documents in its docstrings -------------------------------------------


def test_docstring_examples_of_deepspeed() -> None:
    """The values DeepSpeed's ProcessTopology docstrings show (x, y axes of 2 and 3)."""
    topo = ProcessTopology(axes=["x", "y"], dims=[2, 3])
    assert topo.get_rank(x=0, y=1) == 1
    assert topo.get_dim("y") == 3
    assert (topo.get_coord(rank=1).x, topo.get_coord(rank=1).y) == (0, 1)
    assert topo.get_axis_list(axis="x", idx=0) == [0, 1, 2]
    assert topo.get_axis_list(axis="y", idx=0) == [0, 3]


def test_subclasses_name_their_axes() -> None:
    """PipeDataParallel is ['pipe', 'data']; PipeModelDataParallel is ['pipe', 'data', 'model']."""
    assert PipeDataParallelTopology(num_pp=2, num_dp=3).get_axis_names() == ["pipe", "data"]
    topo = PipeModelDataParallelTopology(num_pp=2, num_mp=4, num_dp=3)
    assert (topo.get_axis_names(), topo.dims) == (["pipe", "data", "model"], [2, 3, 4])


def test_answers_match_the_core_grid() -> None:
    """The façade's grid is the Grid over the same axes and sizes."""
    topo = PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=3)
    assert topo.grid == Grid(("pipe", "data", "model"), (2, 3, 2))
    assert ProcessTopology.from_grid(topo.grid).get_axis_comm_lists("data") == (
        topo.get_axis_comm_lists("data")
    )


def test_str_lists_coordinates_like_deepspeed_and_stays_short() -> None:
    """Small worlds print DeepSpeed's mapping; large ones print its ends only."""
    assert str(ProcessTopology(["a"], [2])) == "{ProcessCoord(a=0): 0, ProcessCoord(a=1): 1}"
    text = str(ProcessTopology(["pipe", "data"], [1024, 1024]))
    assert text.endswith("..., ProcessCoord(pipe=1023, data=1023): 1048575}")
    assert len(text) < 200


# -- errors and DeepSpeed's forgiving answers --------------------------------------------------


def test_unknown_axes_give_deepspeeds_empty_answers() -> None:
    """get_dim is 0, get_axis_comm_lists is [] and an out-of-range filter matches nothing."""
    topo = ProcessTopology(["pipe", "data"], [2, 2])
    assert topo.get_dim("model") == 0
    assert topo.get_axis_comm_lists("model") == []
    assert topo.filter_match(pipe=2) == []
    assert topo.get_axis_list("data", 5) == []


def test_get_rank_of_a_slice_is_a_value_error() -> None:
    """A partial coordinate raises a TopologyError (DeepSpeed: ValueError) pointing to filter."""
    topo = ProcessTopology(["pipe", "data"], [2, 2])
    with pytest.raises(TopologyError, match=r"missing 'data'; use filter_match\(\) for a slice$"):
        topo.get_rank(pipe=0)
    assert issubclass(TopologyError, ValueError)


def test_get_rank_out_of_range_is_an_assertion() -> None:
    """A coordinate outside its axis asserts, as DeepSpeed does, and is a TopologyError."""
    topo = ProcessTopology(["pipe", "data"], [2, 2])
    with pytest.raises(FacadeAssertionError, match=r"coordinate data=2 is out of range; valid"):
        topo.get_rank(pipe=0, data=2)
    assert issubclass(FacadeAssertionError, AssertionError)


def test_unknown_axes_raise_naming_the_valid_ones() -> None:
    """get_rank, filter_match and get_axis_list name the topology's axes."""
    topo = ProcessTopology(["pipe", "data"], [2, 2])
    valid = r"unknown axis 'model'; this topology has axes \('pipe', 'data'\)"
    with pytest.raises(TopologyError, match=valid):
        topo.get_rank(pipe=0, model=0)
    with pytest.raises(TopologyError, match=valid):
        topo.filter_match(model=0)
    with pytest.raises(TopologyError, match=valid):
        topo.get_axis_list("model", 0)


def test_get_coord_of_a_missing_rank_is_a_value_error() -> None:
    """DeepSpeed raises ValueError for a rank outside the topology; so does the façade."""
    with pytest.raises(ValueError, match=r"rank 4 is outside this grid; valid ranks: 0 to 3"):
        ProcessTopology(["pipe", "data"], [2, 2]).get_coord(4)


@pytest.mark.parametrize(
    ("axes", "dims", "message"),
    [
        (["pipe", "pipe"], [2, 2], r"axis 'pipe' appears twice"),
        (["pipe", "data"], [2], r"shape \(2,\) has 1 sizes"),
        (["pipe"], [0], r"pipe must be a positive int, got 0"),
        (["class"], [2], r"axis name 'class' must be an identifier"),
        ("pipe", [2], r"axes must be a list of names"),
    ],
)
def test_bad_layouts_are_topology_errors(axes: Any, dims: Any, message: str) -> None:
    """Duplicate names, a size per axis, sizes >= 1 and identifiers are checked up front."""
    with pytest.raises(TopologyError, match=message):
        ProcessTopology(axes, dims)


# -- differential against DeepSpeed itself -----------------------------------------------------


@settings(max_examples=2 * settings().max_examples)
@given(layouts(), st.data())
def test_same_answers_as_deepspeed(
    layout: tuple[list[str], list[int]], data: st.DataObject
) -> None:
    """Every query on a random layout answers exactly as DeepSpeed's ProcessTopology."""
    theirs_module = pytest.importorskip("deepspeed.runtime.pipe.topology")
    axes, dims = layout
    ours, theirs = ProcessTopology(axes, dims), theirs_module.ProcessTopology(axes, dims)
    assert ours.world_size() == theirs.world_size()
    assert ours.get_axis_names() == theirs.get_axis_names()
    assert str(ours) == str(theirs)
    for name in [*axes, "jeff"]:
        assert ours.get_dim(name) == theirs.get_dim(name)
        assert ours.get_axis_comm_lists(name) == theirs.get_axis_comm_lists(name)
    for rank in range(ours.world_size()):
        mine, other = ours.get_coord(rank), theirs.get_coord(rank)
        assert (tuple(mine), mine._fields) == (tuple(other), other._fields)
        assert ours.get_rank(**other._asdict()) == rank
    omit = data.draw(st.lists(st.sampled_from([*axes, "jeff"])))
    inner, outer = data.draw(st.sampled_from(["_", "", "+"])), data.draw(st.text(max_size=2))
    rank = data.draw(st.integers(0, ours.world_size() - 1))
    assert ours.get_rank_repr(rank, omit, inner, outer) == theirs.get_rank_repr(
        rank, omit, inner, outer
    )
    chosen = data.draw(st.permutations(axes))[: data.draw(st.integers(0, len(axes)))]
    partial = {a: data.draw(st.integers(0, dims[axes.index(a)])) for a in chosen}
    assert ours.filter_match(**partial) == theirs.filter_match(**partial)
    axis = data.draw(st.sampled_from(axes))
    index = data.draw(st.integers(0, dims[axes.index(axis)]))
    assert ours.get_axis_list(axis, index) == theirs.get_axis_list(axis, index)


# -- PipelineParallelGrid ----------------------------------------------------------------------


def _pipe_data_world(rank: int, world_size: int) -> None:
    topo = ProcessTopology(axes=["pipe", "data"], dims=[2, 2])
    grid = PipelineParallelGrid(topology=topo)
    assert grid._is_grid_valid()
    assert grid.is_first_stage == (grid.get_stage_id() == 0)
    assert grid.is_last_stage == (grid.get_stage_id() == grid.get_pipe_parallel_world_size() - 1)
    for group, members in (
        (grid.get_pipe_parallel_group(), grid.pp_group),
        (grid.get_data_parallel_group(), grid.dp_group),
        (grid.get_model_parallel_group(), [r for r in range(4) if r % 2 == rank % 2]),
    ):
        value = torch.tensor([rank], dtype=torch.long)
        dist.all_reduce(value, group=group)
        assert value.item() == sum(members)
    assert [grid.stage_to_global(stage_id=s, data=d) for s in (0, 1) for d in (0, 1)] == [
        0,
        1,
        2,
        3,
    ]
    assert [grid.stage_to_global(stage_id=s) for s in (0, 1)] == [rank % 2, rank % 2 + 2]
    assert (grid.get_slice_parallel_rank(), grid.get_slice_parallel_world_size()) == (0, 1)
    assert grid.slice_group == [rank]


def test_pipeline_grid_on_four_gloo_ranks() -> None:
    """DeepSpeed's TestDistributedTopology on 4 gloo ranks: groups reduce, stage_to_global maps."""
    run_world(4, _pipe_data_world)


def test_pipeline_grid_groups_on_a_fake_world() -> None:
    """pipe2·data2·model2 rank 5: DeepSpeed's comm lists give its pipe, data and slice groups."""
    topo = PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2)
    with fake_world(8, 5):
        grid = PipelineParallelGrid(topo)
        assert (grid.get_stage_id(), grid.get_data_parallel_id()) == (1, 0)
        assert (grid.pp_group, grid.dp_group, grid.slice_group) == ([1, 5], [5, 7], [4, 5])
        assert grid.get_data_parallel_group_ranks() == [5, 7]
        assert grid.get_pipe_parallel_rank() == grid.get_pipeline_model_parallel_rank() == 1
        assert grid.get_slice_parallel_rank() == grid.get_tensor_model_parallel_rank() == 1
        assert grid.get_tensor_model_parallel_world_size() == 2
        assert (grid.get_model_parallel_rank(), grid.get_model_parallel_world_size()) == (3, 4)
        assert (grid.is_first_stage, grid.is_last_stage) == (False, True)
        assert dist.get_world_size(grid.get_slice_parallel_group()) == 2
        assert grid.topology() is topo


def test_p2p_groups_pair_each_rank_with_its_next_stage() -> None:
    """p2p_groups[r] is [r, the rank one stage later in r's pipeline], wrapping at the end."""
    topo = PipeDataParallelTopology(num_pp=3, num_dp=2)
    with fake_world(6, 0):
        pairs = PipelineParallelGrid(topo).p2p_groups
    for rank, (first, buddy) in enumerate(pairs):
        me, them = topo.get_coord(rank), topo.get_coord(buddy)
        assert first == rank
        assert (them.pipe, them.data) == ((me.pipe + 1) % 3, me.data)


def test_default_topology_alternates_prime_factors() -> None:
    """Without a topology, 12 = 2·2·3 splits as pipe 2·3 = 6 and data 2 (DeepSpeed's rule)."""
    with fake_world(12, 0):
        grid = PipelineParallelGrid()
        assert grid.topology().dims == [6, 2]


def test_pipeline_grid_rejects_a_topology_of_another_size() -> None:
    """A topology that does not cover the world asserts on every rank, with the arithmetic."""
    with fake_world(4, 0):
        expected = r"^Invalid Grid: pipe\(2\) \* data\(3\) = 6 ranks but the world has 4"
        with pytest.raises(FacadeAssertionError, match=expected):
            PipelineParallelGrid(PipeDataParallelTopology(num_pp=2, num_dp=3))
        with pytest.raises(TopologyError, match=r"needs a 'data' axis; this topology has axes"):
            PipelineParallelGrid(ProcessTopology(["pipe", "model"], [2, 2]))


def test_pipeline_grid_needs_torch_distributed() -> None:
    """Before init_process_group it says to initialise torch.distributed first."""
    with pytest.raises(TopologyError, match=r"torch.distributed is not initialized"):
        PipelineParallelGrid(PipeDataParallelTopology(num_pp=2, num_dp=2))
