"""compat.torchtitan.ParallelDims: torchtitan's validation, properties and meshes on our groups.

Rank sets are checked against torch's own ``init_device_mesh`` laid out as torchtitan lays its
meshes out (and against torchtitan itself where it is installed); losses of FSDP2 (HSDP) and of
DTensor tensor parallelism on 4 gloo ranks against the same script on torch's own meshes.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from tests.torch.world import fake_world, run_world
from topology import TopologyError
from topology_torch.compat import torchtitan
from topology_torch.compat.torchtitan import MeshNameError, ParallelDims

BACKENDS = ("spmd_types", "partial_dtensor", "full_dtensor")
LAYOUTS = [  # (dp_replicate, dp_shard, cp, tp, pp, ep), 16 ranks
    (2, 2, 2, 2, 1, 2),
    (1, 4, 1, 2, 2, 4),
    (2, -1, 1, 1, 2, 1),
    (1, 2, 2, 2, 2, 8),
]


def _dims(layout: tuple[int, ...], world: int = 16, backend: str = "spmd_types") -> ParallelDims:
    dr, ds, cp, tp, pp, ep = layout
    return ParallelDims(
        dp_replicate=dr, dp_shard=ds, cp=cp, tp=tp, pp=pp, ep=ep, world_size=world,
        spmd_backend=backend,
    )  # fmt: skip


@contextmanager
def _cpu(module: Any = torchtitan) -> Iterator[None]:
    saved = module.device_type
    module.device_type = "cpu"
    try:
        yield
    finally:
        module.device_type = saved


def _ranks(mesh: DeviceMesh) -> list[int]:
    return [int(r) for r in mesh.mesh.flatten().tolist()]


# -- validation and properties (torchtitan's own unit tests state these values) ---------------


def test_validation_errors_are_torchtitans_and_ours() -> None:
    with pytest.raises(AssertionError, match=r"Invalid parallel dims: dp_replicate\(2\)"):
        _dims((2, 2, 1, 2, 1, 1), world=10)
    for bad in [(0, 1, 1, 1, 1, 1), (1, 1, 0, 1, 1, 1), (1, 1, 1, 1, 1, 0)]:
        with pytest.raises(TopologyError, match=r"should be >= 1, except for dp_shard"):
            _dims(bad, world=1)
    with pytest.raises(AssertionError, match=r"dp_shard must -1 or >=1"):
        _dims((1, 0, 1, 1, 1, 1), world=1)
    with pytest.raises(ValueError, match=r"expert_parallel_degree \(3\) must divide"):
        _dims((1, 2, 1, 1, 1, 3), world=2)
    with pytest.raises(TopologyError, match=r"spmd_backend 'dtensor' is not one of"):
        _dims((1, 1, 1, 1, 1, 1), world=1, backend="dtensor")
    with pytest.raises(TopologyError, match=r"leaves no data-parallel rank"):
        _dims((2, -1, 1, 2, 1, 1), world=2)


def test_properties() -> None:
    dims = _dims((2, -1, 1, 2, 1, 1), world=8)
    assert dims.dp_shard == 2
    assert (dims.dp_enabled, dims.dp_replicate_enabled, dims.dp_shard_enabled) == (True,) * 3
    assert (dims.cp_enabled, dims.tp_enabled, dims.pp_enabled, dims.ep_enabled) == (
        False, True, False, False,
    )  # fmt: skip
    assert dims.fsdp_enabled and dims.dp_cp_enabled
    only_cp = _dims((1, 1, 2, 1, 1, 1), world=2)
    assert only_cp.fsdp_enabled and only_cp.dp_cp_enabled and not only_cp.dp_enabled
    big = _dims((1, 1, 2, 3, 4, 1), world=24)
    assert big.non_data_parallel_size == 24
    assert _dims((1, 1, 2, 4, 1, 1), world=8).seq_len_divisor == 16

    class Config:
        data_parallel_replicate_degree = 2
        data_parallel_shard_degree = -1
        context_parallel_degree = 1
        tensor_parallel_degree = 2
        pipeline_parallel_degree = 1
        expert_parallel_degree = 1

    assert ParallelDims.from_config(Config(), world_size=8).dp_shard == 2


# -- meshes: torch's own layout of torchtitan's meshes, and no new group -----------------------


def _reference(dims: ParallelDims) -> dict[str, list[int]]:
    """torchtitan's meshes built by torch itself (``init_device_mesh`` + ``_flatten``)."""
    dr, ds, cp, tp, pp, ep = dims.dp_replicate, dims.dp_shard, dims.cp, dims.tp, dims.pp, dims.ep
    dense = init_device_mesh("cpu", (pp, dr, ds, cp, tp), mesh_dim_names=_NAMES)
    data = init_device_mesh("cpu", (pp, dr * ds, cp, tp), mesh_dim_names=("pp", "b", "c", "t"))
    fsdp = init_device_mesh("cpu", (pp, dr, ds * cp, tp), mesh_dim_names=("p", "r", "f", "t"))
    sparse = init_device_mesh(
        "cpu", (pp, dr, ds * cp * tp // ep, ep), mesh_dim_names=("p", "r", "e", "x")
    )
    out = {name: _ranks(dense[name]) for name in _NAMES}
    out.update(batch=_ranks(data["b"]), dp=_ranks(data["b"]), fsdp=_ranks(fsdp["f"]))
    out.update(loss=_ranks(data["b", "c"]._flatten()), ep=_ranks(sparse["x"]))
    out["efsdp"] = _ranks(sparse["e"])
    return out


_NAMES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


def _every_mesh(dims: ParallelDims) -> dict[str, list[int]]:
    """Touch every mesh ParallelDims exposes (and torchtitan's own flattens); their ranks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dims.build_mesh()
        names = list(dims._single_axis_meshes)
        found = {n: _ranks(dims.get_optional_mesh(n, include_singleton_axes=True)) for n in names}
        dims.get_all_one_dimensional_meshes()
        dims.spmd_meshes()
        for mesh in dims._global_meshes.values():
            for a in range(len(mesh.mesh_dim_names or ())):
                for b in range(a + 1, len(mesh.mesh_dim_names or ())):
                    pair = [mesh.mesh_dim_names[a], mesh.mesh_dim_names[b]]
                    dims.get_optional_mesh(pair, include_singleton_axes=True)
        root = dims.world_mesh
        root["batch"]._flatten("batch")  # torchtitan's names, flattened again: no new group
        torchtitan_loss = root["pp", "batch", "cp", "tp"]["batch", "cp"]._flatten("loss_mesh")
        assert torchtitan_loss is dims.get_optional_mesh("loss")
        root["dp_shard", "cp"]._flatten("fsdp")
        root["dp_shard", "cp"]._flatten()
        root["dp_replicate", "dp_shard"]._flatten()
        root["dp_replicate", "dp_shard", "cp"]._flatten()
        if dims.tp > 1:
            dims.get_dense_tp_mesh()
        dims.resolve_mesh(["dp", "cp", "tp"])
    return found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_mesh_is_torchs_and_only_our_groups_exist(
    backend: str, layout: tuple[int, ...]
) -> None:
    for rank in (0, 7, 13):
        with fake_world(16, rank), _cpu():
            before = len(c10d._world.pg_map)
            dims = _dims(layout, backend=backend)
            found = _every_mesh(dims)
            assert len(c10d._world.pg_map) - before == dims.groups.communicators
            made = {id(g) for g in dims.groups._registry.owned}
            for mesh in dims._single_axis_meshes.values():
                assert id(mesh.get_group()) in made | {id(dist.group.WORLD)}
            reference = _reference(dims)
            assert found == {name: reference[name] for name in found}


def test_one_dimensional_meshes_and_errors() -> None:
    with fake_world(8, 3), _cpu():
        dims = _dims((2, 2, 1, 2, 1, 1), world=8, backend="partial_dtensor")
        one = ["batch", "loss", "dp_replicate", "tp", "fsdp"]  # torchtitan's docstring's set
        assert list(dims.get_all_one_dimensional_meshes()) == one
        assert dims.get_optional_mesh("cp") is None
        assert dims.get_optional_mesh("efsdp") is None  # ep == 1: torchtitan's fake axis
        with pytest.raises(ValueError, match=r"Mesh 'cp' is not available"):
            dims.get_mesh("cp")
        with pytest.raises(MeshNameError, match=r"Invalid mesh dim: 'bogus'"):
            dims.get_mesh("bogus")
        with pytest.raises(TopologyError, match=r"Invalid mesh name combinations"):
            dims.get_mesh(["batch", "dp_replicate"])
        pair = dims.get_mesh(["dp_replicate", "fsdp"])
        assert pair is dims.get_mesh(["dp_replicate", "fsdp"])  # cached: equality is identity
        assert pair.mesh_dim_names == ("dp_replicate", "fsdp")
        with pytest.raises(MeshNameError, match=r"spmd_backend='spmd_types'"):
            dims.spmd_dense_mesh()
    with fake_world(8, 5), _cpu():
        dims = _dims((1, 4, 1, 2, 1, 8), world=8)
        assert dims.get_mesh("efsdp").size() == 1  # kept with ep > 1, as torchtitan does
        assert dims.spmd_sparse_mesh() is not None
        assert dims.spmd_dense_mesh().mesh_dim_names == ("dp", "cp", "tp")
        assert dims.world_mesh.mesh_dim_names == _NAMES


def test_against_torchtitan_itself() -> None:
    """Where torchtitan is installed: every mesh's ranks equal its ParallelDims' (16 fake ranks)."""
    pytest.importorskip("spmd_types")
    peer = pytest.importorskip("torchtitan.distributed.parallel_dims")
    for backend in BACKENDS:
        for layout in LAYOUTS:
            for rank in (0, 11):
                with fake_world(16, rank), _cpu(peer):
                    theirs = _dims(layout, backend=backend).__dict__
                    built = peer.ParallelDims(**{k: theirs[k] for k in _FIELDS})
                    built.build_mesh()
                    expected = {k: _ranks(m) for k, m in built._single_axis_meshes.items()}
                    ones = list(built.get_all_one_dimensional_meshes())
                with fake_world(16, rank), _cpu():
                    dims = _dims(layout, backend=backend)
                    assert _every_mesh(dims) == expected
                    assert sorted(dims.get_all_one_dimensional_meshes()) == sorted(ones)


_FIELDS = ("dp_replicate", "dp_shard", "cp", "tp", "pp", "ep", "world_size", "spmd_backend")


# -- training on 4 gloo ranks: the same losses as on torch's own meshes ------------------------


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def _train(model: torch.nn.Module, data_rank: int, steps: int = 3) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        generator = torch.Generator().manual_seed(100 * step + data_rank)
        x, y = torch.randn(4, 8, generator=generator), torch.randn(4, 4, generator=generator)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def _hsdp(rank: int, world_size: int) -> None:
    from torch.distributed.fsdp import fully_shard

    warnings.simplefilter("ignore")
    reference = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
    model = _model()
    fully_shard(model, mesh=reference)
    theirs = _train(model, rank)  # batch index = dp_replicate * 2 + dp_shard = rank here
    torchtitan.device_type = "cpu"
    dims = ParallelDims(dp_replicate=2, dp_shard=2, cp=1, tp=1, pp=1, ep=1, world_size=4)
    before = len(c10d._world.pg_map)
    mesh = dims.get_mesh(["dp_replicate", "dp_shard"])
    assert len(c10d._world.pg_map) - before == dims.groups.communicators
    model = _model()
    fully_shard(model, mesh=mesh)
    ours = _train(model, dims.get_mesh("batch").get_local_rank())
    assert ours == theirs, (ours, theirs)
    assert len(set(theirs)) == 3  # it trained
    assert len(c10d._world.pg_map) - before == dims.groups.communicators


def _tensor_parallel(rank: int, world_size: int) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        RowwiseParallel,
        parallelize_module,
    )

    warnings.simplefilter("ignore")

    def run(dp_mesh: DeviceMesh, tp_mesh: DeviceMesh) -> list[float]:
        model = _model()
        parallelize_module(model, tp_mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
        fully_shard(model, mesh=dp_mesh)
        return _train(model, dp_mesh.get_local_rank())

    reference = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
    theirs = run(reference["dp_shard"], reference["tp"])
    torchtitan.device_type = "cpu"
    dims = ParallelDims(dp_replicate=1, dp_shard=2, cp=1, tp=2, pp=1, ep=1, world_size=4)
    before = len(c10d._world.pg_map)
    ours = run(dims.get_mesh("dp_shard"), dims.get_mesh("tp"))
    assert ours == theirs, (ours, theirs)
    assert len(set(theirs)) == 3
    assert len(c10d._world.pg_map) - before == dims.groups.communicators


def _hsdp_then_tensor_parallel(rank: int, world_size: int) -> None:
    _hsdp(rank, world_size)
    _tensor_parallel(rank, world_size)


def test_hsdp_and_tensor_parallel_on_gloo_match_torchs_meshes() -> None:
    """FSDP2 with HSDP (2 x 2), then DTensor tp 2 with FSDP2 over dp_shard 2, in one 4-rank
    world (one spawn for both: it is the slow part): the same losses as on torch's meshes."""
    run_world(4, _hsdp_then_tensor_parallel)
