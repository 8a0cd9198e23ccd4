"""Meshes identical on every rank: every ``device_mesh`` / ``world_mesh`` (dense kinds, the expert
ep x etp x edp grid, GTP, torchtitan's world mesh, MIMO modules) is the same on every rank that
holds it (mesh tensor, dim names, each dim's communicator by name), equals what the core's public
API says, and is built from our groups without one new group; and a DCP checkpoint saved under
our world mesh loads under torchtitan's meshes and back. :func:`check_identity` runs in the 8-rank
gloo world of ``test_device_mesh.py`` (one world for both files).

torchtitan is not installed here (nor added: no new dependency), so its meshes are built as its
``ParallelDims.build_mesh`` builds them, with torch's own ``DeviceMesh`` API: see
:func:`_titan_meshes`."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.device_mesh as device_mesh_module
import torch.distributed.distributed_c10d as c10d
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import Placement, Replicate, Shard, distribute_tensor

from topology import Topology
from topology_torch import ProcessGroups
from topology_torch._world_mesh import sliced
from topology_torch.compat import torchtitan
from topology_torch.compat.megatron import mimo
from topology_torch.compat.megatron.mimo import ModuleGridSpec, create_topology
from topology_torch.compat.torchtitan import ParallelDims

Description = dict[str, Any]
DIMS = ("pp", "dp-replicate", "dp-shard", "cp", "tp")
NAMES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
FLAT = {"batch": "dp", "loss": "dp-cp", "fsdp": "intra-dp-cp", "efsdp": "intra-edp", "ep": "ep"}


@contextmanager
def _no_new_group() -> Iterator[None]:
    """Fail if torch makes a process group inside (``new_group``, ``split_group``, or any
    communicator registered in torch's table)."""
    calls: list[str] = []
    saved = {
        (c10d, "_new_group_with_tag"): c10d._new_group_with_tag,
        (c10d, "split_group"): c10d.split_group,
        (device_mesh_module, "new_group"): device_mesh_module.new_group,
        (device_mesh_module, "split_group"): device_mesh_module.split_group,
    }

    def counted(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return real(*args, **kwargs)

        return call

    for (module, name), real in saved.items():
        setattr(module, name, counted(name, real))
    before = len(c10d._world.pg_map)
    try:
        yield
    finally:
        for (module, name), real in saved.items():
            setattr(module, name, real)
    assert calls == [] and len(c10d._world.pg_map) == before, calls


def _make_singletons(groups: ProcessGroups) -> None:
    """Ask for every group once: a one-rank group is made on first use, by its rank alone (no
    collective), so from here on every group exists and a mesh must make none."""
    made = len(c10d._world.pg_map)
    for kind in groups.kinds:
        if groups.has_group(kind):
            groups.group(kind)
    fresh = list(c10d._world.pg_map)[made:]
    assert all(dist.get_world_size(group) == 1 for group in fresh)


def _describe(mesh: DeviceMesh) -> Description:
    """What must be equal on every rank of ``mesh``: ranks, dim names, communicators by name."""
    return {
        "mesh": mesh.mesh.tolist(),
        "names": tuple(mesh.mesh_dim_names or ()),
        "groups": [mesh.get_group(i).group_name for i in range(mesh.ndim)],
    }


def _nest(cells: dict[tuple[int, ...], int], shape: Sequence[int]) -> Any:
    """The nested list of a tensor of ``shape`` whose every cell is given in ``cells``."""
    assert len(cells) == math.prod(shape), (len(cells), shape)
    table = torch.full(tuple(shape), -1, dtype=torch.int)
    for index, rank in cells.items():
        table[index] = rank
    return table.tolist()


def _core_mesh(topology: Topology, rank: int, dims: Sequence[str]) -> Any:
    """The core's answer: the ranks of the dims' grid that share every other axis coordinate
    with ``rank``, each at its position in its group of each dim (``Topology.local_rank``)."""
    kinds = [topology.kind(d) for d in dims]
    spanned = {axis for kind in kinds for axis in kind.axes}
    grid = next(k.grid for k in kinds if k.grid is not None and spanned <= set(k.grid.axes))
    mine = grid.coord(rank)
    fixed = [axis for axis in grid.axes if axis not in spanned]
    start = topology.rank_offset
    cells = {
        tuple(topology.local_rank(s, d) for d in dims): s
        for s in range(start, start + topology.world_size)
        if all(grid.coord(s)[axis] == mine[axis] for axis in fixed)
    }
    return _nest(cells, [topology.size(d) for d in dims])


def _lines(table: Any, rank: int) -> list[tuple[int, ...]]:
    """The ranks of each dim's line through ``rank`` in the nested list ``table``."""
    tensor = torch.tensor(table)
    where = (tensor == rank).nonzero()[0].tolist()
    lines = []
    for dim in range(tensor.dim()):
        index = [slice(None) if k == dim else where[k] for k in range(tensor.dim())]
        lines.append(tuple(int(r) for r in tensor[tuple(index)].flatten().tolist()))
    return lines


def _same_everywhere(key: str, everyone: Sequence[dict[str, Description | None]]) -> None:
    """Every rank of a mesh describes it alike; each dim's group has one name on its members;
    the meshes of all ranks holding ``key`` tile them."""
    holders = [r for r, seen in enumerate(everyone) if seen.get(key) is not None]
    covered: set[int] = set()
    for rank in holders:
        mine = everyone[rank][key]
        assert mine is not None
        members = set(torch.tensor(mine["mesh"]).flatten().tolist())
        assert rank in members, (key, rank)
        assert members <= set(holders) and (members == covered & members or not covered & members)
        covered |= members
        for other in members:
            theirs = everyone[other][key]
            assert theirs is not None
            assert (theirs["mesh"], theirs["names"]) == (mine["mesh"], mine["names"]), (key, rank)
        for dim, line in enumerate(_lines(mine["mesh"], rank)):
            for other in line:
                theirs = everyone[other][key]
                assert theirs is not None and theirs["groups"][dim] == mine["groups"][dim], (
                    key,
                    rank,
                    other,
                    dim,
                )
    assert covered == set(holders), key


def _check_mesh(
    mesh: DeviceMesh, topology: Topology, rank: int, dims: Sequence[str], groups: Any
) -> Description:
    """``mesh`` against the core, and its dim groups are ``groups``' own; its description."""
    assert mesh.mesh.tolist() == _core_mesh(topology, rank, dims), dims
    for i, kind in enumerate(dims):
        assert mesh.get_group(i) is groups.group(kind), (dims, kind)
        ranks = tuple(dist.get_process_group_ranks(mesh.get_group(i)))
        assert ranks == topology.group_of(rank, kind), (dims, kind)
    return _describe(mesh)


def _axis_kinds(topology: Topology) -> list[str]:
    return [k for k in topology.kinds if topology.kind(k).grid is not None]


def _grid_dims(topology: Topology, expert: bool) -> tuple[str, ...]:
    """One mesh over every axis of a grid, outermost first (each axis is a kind of its name)."""
    grid = topology.expert if expert else topology.dense
    assert grid is not None
    return tuple(grid.axes)


def _layout_meshes(
    rank: int, topology: Topology, extra: Sequence[tuple[str, ...]]
) -> dict[str, Description | None]:
    """Every axis kind's 1-D mesh, each grid's full mesh and ``extra`` meshes of ``topology``."""
    seen: dict[str, Description | None] = {}
    groups = ProcessGroups.create(topology, gloo=())
    _make_singletons(groups)
    wanted = [(k,) for k in _axis_kinds(topology)] + [_grid_dims(topology, False), *extra]
    if topology.expert is not None:
        wanted.append(_grid_dims(topology, True))
    for dims in wanted:
        with _no_new_group():
            mesh = groups.device_mesh(*dims, device_type="cpu")
        seen[f"{topology} {dims}"] = _check_mesh(mesh, topology, rank, dims, groups)
    groups.destroy()
    return seen


def _world_meshes(rank: int) -> dict[str, Description | None]:
    """torchtitan's world mesh: the root, every dim slice, every flatten, the sparse slice."""
    topology = Topology(8, tp=2, ep=2, etp=1, order="tp-cp-ep-dp-pp", dist_opt_instances=2)
    kinds = tuple(dict.fromkeys((*DIMS, *FLAT.values())))
    groups = ProcessGroups.create(topology, kinds=kinds, gloo=())
    _make_singletons(groups)
    seen: dict[str, Description | None] = {}
    with _no_new_group():
        root = groups.world_mesh(*DIMS, names=NAMES, flatten=FLAT, device_type="cpu")
        views = {name: root[name] for name in NAMES}
        views |= {name: root[name] for name in FLAT}
        views["sparse"] = sliced(root, "pp", "dp_replicate", "efsdp", "ep")
        views["loss-flattened"] = sliced(root, "batch", "cp")._flatten("loss")
    whole = {tuple(topology.local_rank(s, d) for d in DIMS): s for s in range(8)}
    assert root.mesh.tolist() == _nest(whole, [topology.size(d) for d in DIMS])
    seen["world root"] = _describe(root)
    for name, kind in [*zip(NAMES, DIMS, strict=True), *FLAT.items(), ("loss-flattened", "dp-cp")]:
        mesh = views[name]
        assert tuple(mesh.mesh.tolist()) == topology.group_of(rank, kind), name
        assert mesh.get_group() is groups.group(kind), name
        seen[f"world {name}"] = _describe(mesh)
    sparse = views["sparse"]
    for i, kind in enumerate(("pp", "dp-replicate", "intra-edp", "ep")):
        assert sparse.get_group(i) is groups.group(kind)
    seen["world sparse"] = _describe(sparse)
    groups.destroy()
    return seen


TITAN_KINDS = {
    "pp": "pp",
    "batch": "dp",
    "loss": "dp-cp",
    "dp_replicate": "dp-replicate",
    "dp_shard": "dp-shard",
    "fsdp": "intra-dp-cp",
    "dp": "dp",
    "cp": "cp",
    "tp": "tp",
    "ep": "ep",
    "efsdp": "intra-edp",
}
"""The core's kind of each of torchtitan's 1-D mesh names (compat.torchtitan's module docstring)."""


def _titan_facade_meshes(rank: int) -> dict[str, Description | None]:
    """compat.torchtitan.ParallelDims: every 1-D mesh and every SPMD mesh, two backends (the
    façade keeps its groups: torchtitan has no teardown; the world's end releases them)."""
    seen: dict[str, Description | None] = {}
    saved = torchtitan.device_type
    torchtitan.device_type = "cpu"
    try:
        for backend in ("spmd_types", "partial_dtensor"):
            dims = ParallelDims(
                dp_replicate=2, dp_shard=2, cp=1, tp=2, pp=1, ep=2, world_size=8,
                spmd_backend=backend,
            )  # fmt: skip
            dims.build_mesh()
            topology = dims.topology()
            with _no_new_group():
                ones = dims.get_all_one_dimensional_meshes()
                spmd = dims.spmd_meshes()
            for name, mesh in ones.items():
                assert tuple(mesh.mesh.tolist()) == topology.group_of(rank, TITAN_KINDS[name])
                seen[f"torchtitan {backend} {name}"] = _describe(mesh)
            for i, mesh in enumerate(spmd):
                seen[f"torchtitan {backend} spmd {i}"] = _describe(mesh)
    finally:
        torchtitan.device_type = saved
    return seen


def _mimo_meshes(rank: int) -> dict[str, Description | None]:
    """Each MIMO module's meshes on the ranks that serve it (None elsewhere): two disjoint
    modules (one with GTP), then two colocated ones."""
    # the stand-in collections: no megatron-core import (seconds) in each of the 8 processes
    mimo._collection_classes = lambda: (mimo.ModuleProcessGroups, mimo.MultiModuleProcessGroups)
    layouts = {
        "disjoint": [
            ModuleGridSpec("vision", 4, tp=2, gtp_remat=2),
            ModuleGridSpec("language", 4, tp=2, ep=2, rank_offset=4),
        ],
        "colocated": [
            ModuleGridSpec("language", 8, tp=2, pp=2, ep=2, expt_tp=2),
            ModuleGridSpec("vision", 8, pp=2, ep=4),
        ],
    }
    seen: dict[str, Description | None] = {}
    for label, specs in layouts.items():
        hetero = create_topology(specs)
        for module in hetero.modules.modules:
            layout = module.layout
            assert isinstance(layout, Topology)
            wanted = [(k,) for k in _axis_kinds(layout) if k != "gtp-dp"]  # MIMO has no gtp-dp
            wanted += [_grid_dims(layout, False), ("pp", "edp", "ep", "etp")]
            for dims in wanted:
                key = f"mimo {label} {module.name} {dims}"
                if rank not in module.span:
                    seen[key] = None
                    continue
                with _no_new_group():
                    mesh = hetero.device_mesh(module.name, *dims, device_type="cpu")
                assert mesh.mesh.tolist() == _core_mesh(layout, rank, dims), (module.name, dims)
                for i, kind in enumerate(dims):
                    ranks = tuple(dist.get_process_group_ranks(mesh.get_group(i)))
                    assert ranks == layout.group_of(rank, kind), (module.name, kind)
                seen[key] = _describe(mesh)
        hetero.destroy()
    return seen


def _dtensor(
    mesh: DeviceMesh, placements: Sequence[Placement], value: torch.Tensor
) -> torch.distributed.tensor.DTensor:
    return distribute_tensor(value, mesh, list(placements))


def _titan_meshes(pp: int, dr: int, ds: int, cp: int, tp: int, ep: int) -> dict[str, DeviceMesh]:
    """torchtitan's ``ParallelDims.build_mesh`` dense and sparse meshes on torch's own API: a
    1-D ``("world",)`` mesh from ``init_device_mesh``, then ``_unflatten(0, ...)`` into
    ``(pp, dp_replicate, fsdp, tp)`` and ``(pp, dp_replicate, efsdp, ep)`` (torchtitan main,
    ``torchtitan/distributed/parallel_dims.py``; v0.2.2 adds a trailing ``etp`` of size 1)."""
    world = init_device_mesh("cpu", (pp * dr * ds * cp * tp,), mesh_dim_names=("world",))
    dense = world._unflatten(0, (pp, dr, ds * cp, tp), ("pp", "dp_replicate", "fsdp", "tp"))
    efsdp = ds * cp * tp // ep
    sparse = world._unflatten(0, (pp, dr, efsdp, ep), ("pp", "dp_replicate", "efsdp", "ep"))
    return {
        "dense": dense["dp_replicate", "fsdp", "tp"],
        "sparse": sparse["dp_replicate", "efsdp", "ep"],
    }


def _round_trip(rank: int, folder: str) -> None:
    """A checkpoint saved under our world mesh loads under torchtitan's meshes, and back."""
    topology = Topology(8, tp=2, ep=2, etp=1, order="tp-cp-ep-dp-pp", dist_opt_instances=2)
    kinds = tuple(dict.fromkeys((*DIMS, *FLAT.values())))
    groups = ProcessGroups.create(topology, kinds=kinds, gloo=())
    root = groups.world_mesh(*DIMS, names=NAMES, flatten=FLAT, device_type="cpu")
    ours = {
        "dense": sliced(root, "dp_replicate", "dp_shard", "tp"),
        "sparse": sliced(root, "dp_replicate", "efsdp", "ep"),
    }
    theirs = _titan_meshes(pp=1, dr=2, ds=2, cp=1, tp=2, ep=2)
    for name in ours:
        assert ours[name].mesh.tolist() == theirs[name].mesh.tolist(), name
    full = {
        "dense": torch.arange(48, dtype=torch.float32).view(8, 6),
        "sparse": torch.arange(24, dtype=torch.float32).view(4, 6) - 7,
    }
    placed: dict[str, tuple[Placement, ...]] = {
        "ours": (Replicate(), Shard(0), Shard(1)),
        "theirs": (Replicate(), Shard(1), Shard(0)),  # another sharding: the load reshards
    }
    for saver, loader, scale in (("ours", "theirs", 1.0), ("theirs", "ours", -2.0)):
        meshes = {"ours": ours, "theirs": theirs}
        state = {
            name: _dtensor(meshes[saver][name], placed[saver], full[name] * scale) for name in full
        }
        where = os.path.join(folder, saver)
        dcp.save(state, checkpoint_id=where)
        loaded = {
            name: _dtensor(meshes[loader][name], placed[loader], torch.zeros_like(full[name]))
            for name in full
        }
        dcp.load(loaded, checkpoint_id=where)
        for name in full:
            assert torch.equal(loaded[name].full_tensor(), full[name] * scale), (saver, name)
    groups.destroy()


def check_identity(rank: int, world_size: int, folder: str) -> None:
    """Every mesh of several layouts agrees on every rank and with the core and makes no group;
    a DCP checkpoint crosses between our world mesh and torchtitan's meshes (``folder`` is
    shared by the ranks). Run in ``test_device_mesh.py``'s world: a gloo world of 8 costs
    seconds to start."""
    mine: dict[str, Description | None] = {}
    dense = [("pp", "dp", "tp"), ("dp", "tp"), ("pp", "tp-dp"), ("tp-pp", "dp")]
    mine |= _layout_meshes(rank, Topology(world_size, tp=2, pp=2), dense)
    expert = [("edp", "ep"), ("pp", "edp", "etp-ep"), ("edp", "etp-ep-pp")]
    mine |= _layout_meshes(rank, Topology(world_size, tp=2, pp=2, ep=2, etp=1), expert)
    mine |= _layout_meshes(rank, Topology(world_size, tp=2, ep=2, etp=2), [("edp", "etp-ep")])
    gtp = [("gtp-dp", "tp"), ("dp", "gtp", "tp"), ("egtp-edp", "ep")]
    mine |= _layout_meshes(rank, Topology(world_size, tp=2, gtp=2, ep=2, etp=1, egtp=2), gtp)
    mine |= _world_meshes(rank)
    mine |= _titan_facade_meshes(rank)
    mine |= _mimo_meshes(rank)
    everyone: list[dict[str, Description | None]] = [{} for _ in range(world_size)]
    dist.all_gather_object(everyone, mine)
    keys = set().union(*everyone)
    for key in sorted(keys):
        _same_everywhere(key, [{key: seen.get(key)} for seen in everyone])
    _round_trip(rank, folder)
