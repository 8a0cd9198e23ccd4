"""world_mesh: one DeviceMesh whose slices and flattens are our communicators, checked against
torch's own ``init_device_mesh`` + ``_flatten`` (an independent formulation) on fake worlds."""

from __future__ import annotations

import warnings
from itertools import combinations

import pytest
import torch
import torch.distributed.distributed_c10d as c10d
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from tests.torch.world import fake_world
from topology import Topology, TopologyError
from topology_torch import ProcessGroups, _world_mesh
from topology_torch._world_mesh import sliced, world_mesh

DIMS = ("pp", "dp-replicate", "dp-shard", "cp", "tp")
NAMES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
FLAT = {"batch": "dp", "loss": "dp-cp", "fsdp": "intra-dp-cp", "efsdp": "intra-edp", "ep": "ep"}


def _layout(w: int, pp: int, dr: int, cp: int, tp: int, ep: int) -> Topology:
    return Topology(
        w, tp=tp, cp=cp, pp=pp, ep=ep, etp=1, order="tp-cp-ep-dp-pp", dist_opt_instances=dr
    )


def _pg_count() -> int:
    return len(c10d._world.pg_map)


def _build(topology: Topology) -> tuple[ProcessGroups, DeviceMesh]:
    kinds = tuple(dict.fromkeys((*DIMS, *FLAT.values())))
    groups = ProcessGroups.create(topology, kinds=kinds, gloo=())
    return groups, world_mesh(groups, DIMS, names=NAMES, flatten=FLAT, device_type="cpu")


def _ranks(mesh: DeviceMesh) -> list[int]:
    return [int(r) for r in mesh.mesh.flatten().tolist()]


def _compare_with_torch(w: int, rank: int, pp: int, dr: int, ds: int, cp: int, tp: int) -> None:
    """Every 1-D slice and every flatten of adjacent dims that one of our kinds covers equals
    torch's own mesh and costs no group; a run no kind covers is left to torch."""
    topology = _layout(w, pp, dr, cp, tp, 1)
    with fake_world(w, rank):
        groups = ProcessGroups.create(topology, gloo=())  # every kind
        mesh = world_mesh(groups, DIMS, names=NAMES, flatten=FLAT, device_type="cpu")
        before = _pg_count()
        assert before - 1 == groups.communicators  # the default group, then only ours
        mine = {name: _ranks(mesh[name]) for name in NAMES}
        for name, kind in zip(NAMES, DIMS, strict=True):
            assert mesh[name].get_group() is groups.group(kind)
        ours = {id(groups.group(k)) for k in groups.kinds if groups.has_group(k)}
        runs = [NAMES[lo : lo + n] for n in range(2, 6) for lo in range(6 - n)]
        covered = [run for run in runs if "_".join(run) in mesh._flatten_mapping]
        for run in covered:
            flat = mesh[run]._flatten()  # torch's default name: pre-registered by us
            mine["_".join(run)] = _ranks(flat)
            assert id(flat.get_group()) in ours
        assert _pg_count() == before  # torch made no communicator
        torch_mesh = init_device_mesh("cpu", (pp, dr, ds, cp, tp), mesh_dim_names=NAMES)
        theirs = {name: _ranks(torch_mesh[name]) for name in NAMES}
        for run in runs:
            ranks = _ranks(torch_mesh[run]._flatten())
            if run in covered:
                theirs["_".join(run)] = ranks
            else:  # no kind of ours has these ranks, so nothing could back it
                assert all(
                    topology.group_of(rank, k) != tuple(ranks)
                    for k in topology.kinds
                    if topology.has_group(rank, k)
                ), run
        assert mine == theirs
        assert mesh.mesh.tolist() == torch_mesh.mesh.tolist()


@pytest.mark.parametrize("rank", [0, 5, 14])
def test_slices_and_flattens_equal_torchs_and_make_no_group(rank: int) -> None:
    _compare_with_torch(16, rank, pp=2, dr=2, ds=2, cp=1, tp=2)
    _compare_with_torch(16, rank, pp=1, dr=2, ds=2, cp=2, tp=2)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.tuples(*(st.sampled_from(s) for s in ([1, 2], [2, 4], [1, 2], [1, 2], [1, 2]))),
    data=st.data(),
)
def test_any_torchtitan_layout_matches_torch(sizes: tuple[int, ...], data: st.DataObject) -> None:
    pp, dr, ds, cp, tp = sizes  # dp-replicate exists from two instances on (see the façade)
    w = pp * dr * ds * cp * tp
    rank = data.draw(st.integers(0, w - 1), label="rank")
    _compare_with_torch(w, rank, pp=pp, dr=dr, ds=ds, cp=cp, tp=tp)


@pytest.mark.parametrize(("ep", "rank"), [(2, 3), (4, 9), (8, 14)])
def test_named_flattens_are_our_kinds_and_torchtitans_sparse_mesh(ep: int, rank: int) -> None:
    pp, dr, ds, cp, tp = 1, 2, 2, 2, 2
    with fake_world(16, rank):
        groups, mesh = _build(_layout(16, pp, dr, cp, tp, ep))
        before = _pg_count()
        for name, kind in FLAT.items():
            assert mesh[name].get_group() is groups.group(kind)
            assert tuple(_ranks(mesh[name])) == groups.ranks(kind)
        sparse = sliced(mesh, "pp", "dp_replicate", "efsdp", "ep")
        dense = sliced(mesh, "pp", "batch", "cp", "tp")
        loss = dense["batch", "cp"]._flatten("loss")
        assert loss is mesh._flatten_mapping["loss"]
        assert _pg_count() == before
        # torch's own: torchtitan's sparse mesh is (pp, dp_replicate, efsdp, ep), ep innermost
        ref = init_device_mesh(
            "cpu", (pp, dr, ds * cp * tp // ep, ep), mesh_dim_names=("pp", "dr", "efsdp", "ep")
        )
        assert sparse.mesh.tolist() == ref.mesh.tolist()
        for name in ("efsdp", "ep"):
            assert _ranks(sparse[name]) == _ranks(ref[name])
        ref = init_device_mesh("cpu", (pp, dr * ds, cp, tp), mesh_dim_names=("pp", "b", "c", "t"))
        assert _ranks(loss) == _ranks(ref["b", "c"]._flatten())
        assert _ranks(mesh["batch"]) == _ranks(ref["b"])


def test_flattened_meshes_keep_torchs_layout() -> None:
    """A kind registered under its own name has the layout torch computes for the same run."""
    with fake_world(16, 6):
        _, mesh = _build(_layout(16, 2, 2, 1, 2, 1))
        flats = mesh._flatten_mapping
        assert flats["fsdp"]._layout == flats["dp_shard_cp"]._layout
        assert flats["batch"]._layout == flats["dp_replicate_dp_shard"]._layout
        assert flats["loss"]._layout == flats["dp_replicate_dp_shard_cp"]._layout
        for lo, hi in combinations(range(6), 2):
            if hi - lo >= 2:
                run = NAMES[lo:hi]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    flat = mesh[run]._flatten()
                assert flat is flats["_".join(run)]


def test_bad_arguments_raise_topology_error() -> None:
    with fake_world(8, 1):
        topology = Topology(8, tp=2, pp=2)
        groups = ProcessGroups.create(topology, gloo=())
        with pytest.raises(TopologyError, match=r"distinct dims"):
            world_mesh(groups, ("tp", "tp"))
        with pytest.raises(TopologyError, match=r"distinct dims"):
            world_mesh(groups, ())
        with pytest.raises(TopologyError, match=r"must be 2 distinct names"):
            world_mesh(groups, ("dp", "tp"), names=("a",))
        with pytest.raises(TopologyError, match=r"not independent directions"):
            world_mesh(groups, ("dp", "tp-dp"))
        with pytest.raises(TopologyError, match=r"not a strided sub-layout"):
            world_mesh(groups, ("dp", "tp"), flatten={"stage": "pp"})
        with pytest.raises(TopologyError, match=r"unknown kind 'nope'"):
            world_mesh(groups, ("nope", "tp"))
        mesh = world_mesh(groups, ("pp", "dp", "tp"))  # a flatten of a run found unasked
        assert mesh["dp", "tp"]._flatten().get_group() is groups.group("tp-dp")
        one = world_mesh(groups, ("tp",))
        assert one.get_group() is groups.group("tp")


def test_a_torch_without_the_internals_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch whose DeviceMesh lacks what world_mesh uses gets a TopologyError naming it."""
    monkeypatch.delattr(DeviceMesh, "_create_flatten_mesh")
    with fake_world(4, 0):
        groups = ProcessGroups.create(Topology(4, tp=2), gloo=())
        with pytest.raises(
            TopologyError,
            match=r"lacks one of .*verified with torch 2\.11, 2\.12, 2\.13, 2\.14, 2\.15: install",
        ):
            world_mesh(groups, ("dp", "tp"))


def test_the_verified_torch_versions_include_this_one() -> None:
    """The torch running the tests is one world_mesh was verified with."""
    assert _world_mesh.VERIFIED_TORCH == ("2.11", "2.12", "2.13", "2.14", "2.15")
    assert torch.__version__.startswith(_world_mesh.VERIFIED_TORCH)


def test_this_torchs_layouts_are_read_by_feature() -> None:
    """torch 2.13 and newer have _FlatLayout and slice any flatten; 2.11 and 2.12 one stride."""
    from torch.distributed import _mesh_layout

    layouts = _world_mesh._layouts()
    assert layouts.one_stride is not hasattr(_mesh_layout, "_FlatLayout")
    assert layouts.one_stride is (torch.__version__ < "2.13")


def test_a_flatten_of_several_strides_needs_torch_2_13_where_torch_slices_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a torch that slices only one-stride flattened dims (2.11, 2.12) such a flatten is a
    TopologyError naming torch 2.13; one-stride flattens and adjacent runs still work there."""
    real = _world_mesh._layouts()
    monkeypatch.setattr(_world_mesh, "_layouts", lambda: _world_mesh._Layouts(real.flat, True))
    with fake_world(8, 5):
        groups = ProcessGroups.create(Topology(8, tp=2, pp=2), gloo=())
        with pytest.raises(
            TopologyError,
            match=r"^flatten 'mp': the tp-pp group walks the mesh with sizes \(2, 2\) and strides "
            r"\(4, 1\), not one stride, and torch .* slices only flattened dims of one stride "
            r"from a mesh; install torch 2\.13 or newer, or flatten a kind whose ranks are one "
            r"strided run$",
        ):
            world_mesh(groups, ("pp", "dp", "tp"), flatten={"mp": "tp-pp"})
        mesh = world_mesh(groups, ("pp", "dp", "tp"), flatten={"stage": "pp", "batch": "dp"})
        assert mesh["batch"].get_group() is groups.group("dp")
        assert mesh["dp", "tp"]._flatten().get_group() is groups.group("tp-dp")
