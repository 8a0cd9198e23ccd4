"""device_mesh: a torch DeviceMesh over our own groups agrees with the core, on 8 gloo ranks;
the same world runs ``test_mesh_identity.check_identity`` (meshes identical on every rank, a DCP
checkpoint across torchtitan's meshes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from tests.torch.test_mesh_identity import check_identity
from tests.torch.world import run_world
from topology import Topology, TopologyError
from topology_torch import ProcessGroups


def _line_through(mesh: torch.Tensor, coordinate: Sequence[int], dim: int) -> tuple[int, ...]:
    index: list[int | slice] = list(coordinate)
    index[dim] = slice(None)
    return tuple(int(r) for r in mesh[tuple(index)].tolist())


def _meshes(rank: int, world_size: int) -> None:
    # Megatron order: rank = tp + 2 * dp + 4 * pp, i.e. arange(8).view(pp, dp, tp)
    groups = ProcessGroups.create(Topology(world_size, tp=2, pp=2))
    before = len(c10d._world.pg_map)
    mesh = groups.device_mesh("pp", "dp", "tp")
    assert mesh.mesh.tolist() == torch.arange(8).view(2, 2, 2).tolist()
    assert list(mesh.get_coordinate() or ()) == [rank // 4, rank // 2 % 2, rank % 2]
    for name in ("pp", "dp", "tp"):
        assert mesh.get_group(name) is groups.group(name)
        assert tuple(mesh[name].mesh.tolist()) == groups.ranks(name)
    sub = mesh["dp", "tp"]
    assert sub.mesh.tolist() == torch.arange(8).view(2, 2, 2)[rank // 4].tolist()
    assert sub.get_group("tp") is groups.group("tp") and sub.get_group("dp") is groups.group("dp")
    value = torch.tensor([float(rank)])
    dist.all_reduce(value, group=mesh.get_group("dp"))
    assert value.item() == sum(groups.ranks("dp"))
    folded = groups.device_mesh("tp-pp")  # one dimension over two axes
    assert folded.get_group() is groups.group("tp-pp")
    assert folded.get_local_rank() == groups.rank("tp-pp")
    assert len(c10d._world.pg_map) == before  # no new communicator
    with pytest.raises(TopologyError, match=r"repeat an axis"):
        groups.device_mesh("tp", "tp-pp")
    with pytest.raises(TopologyError, match=r"mix the dense grid"):
        groups.device_mesh("dp", "ep")
    with pytest.raises(TopologyError, match=r"mesh dimension 'embedding' is not an axis kind"):
        groups.device_mesh("embedding")
    with pytest.raises(TopologyError, match=r"mesh dimension 'hcp-0' is not an axis kind"):
        groups.device_mesh("hcp-0")  # no kind of this topology
    groups.destroy()

    # ml-starter order tp-pp-dp: rank = tp + 2 * pp + 4 * dp; a mesh without pp is a sub-grid
    groups = ProcessGroups.create(Topology.ml_starter(world_size, 2, 2))
    mesh = groups.device_mesh("dp", "tp")
    stage = rank // 2 % 2
    assert mesh.mesh.tolist() == torch.arange(8).view(2, 2, 2)[:, stage, :].tolist()
    groups.destroy()

    # expert grid with a singleton axis; every line through this rank is its group
    topo = Topology(world_size, tp=2, ep=2, etp=1, pp=2)
    groups = ProcessGroups.create(topo)
    dims = ("pp", "edp", "ep", "etp")
    mesh = groups.device_mesh(*dims)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None
    for dim, kind in enumerate(dims):
        assert _line_through(mesh.mesh, coordinate, dim) == topo.group_of(rank, kind)
        assert coordinate[dim] == topo.local_rank(rank, kind)
        assert mesh.get_group(kind) is groups.group(kind)
    groups.destroy()

    # no expert grid (ezpz's tp-cp-pp-dp with cp > 1): expert kinds are lines of the dense grid,
    # as Topology.kind says (edp = dp-cp, etp = tp, ep a single rank)
    topo = Topology.ezpz(world_size, tp=2, pp=2, cp=2)
    assert topo.expert is None
    groups = ProcessGroups.create(topo)
    flat_dims = ("edp", "ep", "etp")
    mesh = groups.device_mesh(*flat_dims)
    coordinate = mesh.get_coordinate()
    assert coordinate is not None and mesh.mesh.shape == (2, 1, 2)
    for dim, kind in enumerate(flat_dims):
        assert _line_through(mesh.mesh, coordinate, dim) == topo.group_of(rank, kind)
        assert coordinate[dim] == topo.local_rank(rank, kind)
    groups.destroy()


def _meshes_and_identity(rank: int, world_size: int, folder: str) -> None:
    _meshes(rank, world_size)
    check_identity(rank, world_size, folder)


def test_device_mesh_uses_our_groups_and_agrees_with_the_core(tmp_path: Path) -> None:
    """Mesh ranks, coordinates, dimension groups and slices match the core; no new groups; and
    every mesh is the same on every rank, a checkpoint crosses to torchtitan's meshes
    (test_mesh_identity.check_identity)."""
    run_world(8, _meshes_and_identity, str(tmp_path))
