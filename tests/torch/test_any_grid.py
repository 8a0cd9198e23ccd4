"""ProcessGroups, device_mesh and world_mesh from any Grid (DeepSpeed's axis names), 8 gloo ranks.

The core's AxisGroups says which ranks form each kind; here torch's groups, meshes and an
all-reduce over each group must agree with it, and no mesh may make a communicator of its own.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tests.torch.world import run_world
from topology import AxisGroups, Grid, TopologyError
from topology_torch import ProcessGroups, _world_mesh


def _sum_over(group: object) -> float:
    value = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(value, group=group)
    return value.item()


def _deepspeed_axes(rank: int, world_size: int) -> None:
    grid = Grid.from_sizes(pipe=2, data=2, model=2)  # DeepSpeed's pipe, data, model (model fastest)

    # a bare Grid: one kind per axis, no gloo companions
    groups = ProcessGroups.create(grid)
    assert groups.kinds == ("pipe", "data", "model")
    for kind in groups.kinds:
        ranks = AxisGroups(grid).group_of(rank, kind)
        assert tuple(dist.get_process_group_ranks(groups.group(kind))) == ranks
        assert groups.ranks(kind) == ranks and groups.rank(kind) == ranks.index(rank)
        assert _sum_over(groups.group(kind)) == sum(ranks)
    with pytest.raises(TopologyError, match=r"has no gloo companion"):
        groups.gloo_group("data")
    groups.destroy()

    # chosen axis sets, a gloo companion, meshes over our groups
    layout = AxisGroups(grid, kinds=("data", "pipe", "model", "model-pipe"))
    groups = ProcessGroups.create(layout, gloo=("data",))
    assert groups.topology == layout
    expected = tuple(r for r in range(8) if r // 2 % 2 == rank // 2 % 2)  # same data coordinate
    assert tuple(dist.get_process_group_ranks(groups.group("model-pipe"))) == expected
    assert _sum_over(groups.group("pipe-model")) == sum(expected)
    assert _sum_over(groups.gloo_group("data")) == sum(layout.group_of(rank, "data"))
    before = len(c10d._world.pg_map)
    mesh = groups.device_mesh("pipe", "data", "model")
    assert mesh.mesh.tolist() == torch.arange(8).view(2, 2, 2).tolist()
    for name in ("pipe", "data", "model"):
        assert mesh.get_group(name) is groups.group(name)
    folded = groups.device_mesh("pipe-model", "data")
    assert folded.get_group("pipe_model") is groups.group("pipe-model")
    if _world_mesh._layouts().one_stride:  # torch 2.11, 2.12: pipe-model has two strides
        with pytest.raises(TopologyError, match=r"install torch 2\.13 or newer"):
            groups.world_mesh("pipe", "data", "model", flatten={"mp": "pipe-model"})
        world = groups.world_mesh("pipe", "data", "model")
    else:
        world = groups.world_mesh("pipe", "data", "model", flatten={"mp": "pipe-model"})
        assert world["mp"].get_group() is groups.group("pipe-model")
    assert world["data", "model"]["model"].get_group() is groups.group("model")
    assert len(c10d._world.pg_map) == before  # every mesh dimension is one of our groups
    with pytest.raises(
        TopologyError,
        match=r"mesh dimension 'pipe-data' is not an axis kind; "
        r"use one of data, pipe, model, pipe-model",
    ):
        groups.device_mesh("pipe-data")
    groups.destroy()

    # a grid over ranks 4..7 only: the other ranks hold no group of it
    part = Grid.from_sizes(x=2, y=2, rank_offset=4)
    groups = ProcessGroups.create(part)
    if rank >= 4:
        assert groups.has_group("y") and groups.ranks("y") == part.group_of(rank, "y")
        assert _sum_over(groups.group("x")) == sum(part.group_of(rank, "x"))
    else:
        assert not groups.has_group("x")
        with pytest.raises(TopologyError, match=r"outside"):
            groups.group("x")
    groups.destroy()


def test_any_grid_makes_process_groups_and_meshes() -> None:
    """Groups, meshes and all-reduces of DeepSpeed-named axes agree with AxisGroups."""
    run_world(8, _deepspeed_axes)
