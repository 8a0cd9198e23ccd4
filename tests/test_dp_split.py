"""dp-replicate and dp-shard: data parallelism as replicate x shard (torchtitan's HSDP axes).

The reference is written from grid coordinates, independently of the kind table: with ``r``
distributed-optimizer instances and ``w = dp / r``, a rank's dp coordinate ``d`` splits into the
instance ``d // w`` and the shard position ``d % w``; dp-replicate varies the instance with all
else fixed, dp-shard the shard position.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Topology
from topology._megatron.shapes import shape_of


@st.composite
def hsdp_layouts(draw: st.DrawFn) -> Topology:
    tp, cp, pp = (draw(st.sampled_from([1, 2, 3])) for _ in range(3))
    replicate = draw(st.sampled_from([2, 3, 4]))
    shard = draw(st.sampled_from([1, 2, 3]))
    order = draw(st.sampled_from(["tp-cp-ep-dp-pp", "tp-cp-dp-pp", "cp-tp-dp-pp", "tp-cp-pp-dp"]))
    offset = draw(st.sampled_from([0, 5]))
    world = tp * cp * pp * replicate * shard
    return Topology(
        world, tp=tp, cp=cp, pp=pp, dist_opt_instances=replicate, order=order, rank_offset=offset
    )


def _reference(topo: Topology, vary: Callable[[int, int], tuple[int, int]]) -> set[tuple[int, ...]]:
    """Groups of ranks equal in every dense coordinate but the one ``vary`` keys on."""
    grid = topo.dense
    width = topo.dp // topo.dist_opt_instances
    found: dict[tuple[object, ...], list[int]] = {}
    for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
        coord = dict(grid.coord(rank))
        keep, _ = vary(coord["dp"] // width, coord["dp"] % width)
        key = (*sorted((a, v) for a, v in coord.items() if a != "dp"), keep)
        found.setdefault(key, []).append(rank)
    return {tuple(sorted(g)) for g in found.values()}


@settings(max_examples=80, deadline=None)
@given(hsdp_layouts())
def test_replicate_and_shard_equal_the_coordinate_reference(topo: Topology) -> None:
    assert {"dp-shard", "dp-replicate"} <= set(topo.kinds)
    shards = _reference(topo, lambda instance, position: (instance, position))
    replicas = _reference(topo, lambda instance, position: (position, instance))
    assert {tuple(g) for g in topo.groups("dp-shard")} == shards
    assert {tuple(g) for g in topo.groups("dp-replicate")} == replicas
    assert topo.size("dp-shard") * topo.size("dp-replicate") == topo.dp


@settings(max_examples=80, deadline=None)
@given(hsdp_layouts())
def test_shard_times_cp_is_megatrons_instance_share(topo: Topology) -> None:
    """dp-shard x cp is intra-dp-cp (Megatron's distributed-optimizer share), and dp-replicate x
    intra-dp-cp rebuilds dp-cp: the split is consistent with megatron-core's instance groups."""
    for rank in range(topo.rank_offset, topo.rank_offset + topo.world_size):
        shard_cp = {s for c in topo.group_of(rank, "cp") for s in topo.group_of(c, "dp-shard")}
        assert tuple(sorted(shard_cp)) == topo.group_of(rank, "intra-dp-cp")
        share = topo.group_of(rank, "intra-dp-cp")
        dp_cp = {r for s in share for r in topo.group_of(s, "dp-replicate")}
        assert tuple(sorted(dp_cp)) == topo.group_of(rank, "dp-cp")
        assert (
            len(set(topo.group_of(rank, "dp-shard")) & set(topo.group_of(rank, "dp-replicate")))
            == 1
        )


@settings(max_examples=60, deadline=None)
@given(hsdp_layouts())
def test_lookups_and_shapes_agree_with_the_groups(topo: Topology) -> None:
    for kind in ("dp-shard", "dp-replicate"):
        groups = topo.groups(kind)
        for index, group in enumerate(groups):
            for local, rank in enumerate(group):
                assert topo.locate(rank, kind) == (index, local)
                assert topo.group_of(rank, kind) == group
        shape = shape_of(topo, kind)
        if shape is not None:  # the groups are translates of the shape's first group
            assert {tuple(g) for g in groups} == {
                tuple(shape.group(base)) for base in {g[0] - _first(shape) for g in groups}
            }


def _first(shape: object) -> int:
    return int(shape.group(0)[0])  # type: ignore[attr-defined]


def test_the_kinds_exist_only_where_the_instances_cut_dp() -> None:
    assert "dp-shard" not in Topology(16, tp=2).kinds
    # instances cut cp, not dp: dp = 2, cp = 4, 4 instances.
    assert "dp-shard" not in Topology(16, tp=2, cp=4, dist_opt_instances=4).kinds
    # cp varies slower than dp: an instance's share is a block of cp coordinates.
    assert (
        "dp-shard" not in Topology(16, tp=2, cp=2, dist_opt_instances=2, order="tp-dp-cp-pp").kinds
    )
    topo = Topology(16, tp=2, cp=2, dist_opt_instances=2)
    assert topo.kind("dp_shard").name == "dp-shard"
    assert topo.kind("dp_replicate").name == "dp-replicate"
    assert topo.kind("dp_shard_cp").name == "intra-dp-cp"


def test_torchtitan_hsdp_example() -> None:
    """torchtitan's mesh (pp, dp_replicate, dp_shard, cp, tp) = (1, 2, 2, 2, 2): tp fastest, so
    dp_shard strides tp*cp = 4 and dp_replicate strides 8 (torch.arange(16).view(2, 2, 2, 2))."""
    topo = Topology(16, tp=2, cp=2, dist_opt_instances=2)
    assert topo.group_of(0, "dp-shard") == (0, 4)
    assert topo.group_of(0, "dp-replicate") == (0, 8)
    assert topo.group_of(5, "intra-dp-cp") == (1, 3, 5, 7)
