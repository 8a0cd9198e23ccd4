"""The core's weight placements equal what our parallel layers hold on a spawned gloo world.

One world of 4 ranks, ``Topology(4, tp=2)`` (dp 2; stages are the golden tables' business):
each rank builds the layers with the tp group of ``topology_torch.initialize``; the core's
shard for the rank must name it among its holders, and its ranges, cut from the layer's master
weight, must equal the layer's local weight exactly.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.torch.world import run_world  # noqa: E402
from topology import Param, Topology, param_placement  # noqa: E402

TOPO = Topology(4, tp=2)
LAYERS = 1
H, F, VOCAB = 8, 12, 16


def _weights(layer: int) -> list[tuple[Param, str]]:
    """The weights, each with the layer class that holds it."""
    return [
        (Param("fc1", (2 * F, H), sharding="column", parts=(F, F), layer=layer), "column2"),
        (Param("qkv", (3 * H, H), sharding="column", layer=layer), "column"),
        (Param("fc2", (H, F), sharding="row", layer=layer), "row"),
        (Param("embed", (VOCAB, H), sharding="vocab"), "vocab"),
        (Param("pos", (VOCAB, H), sharding="row"), "embedding"),
        (Param("out", (VOCAB, H), sharding="vocab", position="last"), "column"),
    ]


def _build(kind: str, param: Param, group: Any) -> Any:
    from topology_torch.layers import (
        ColumnParallelLinear,
        ParallelEmbedding,
        RowParallelLinear,
        VocabParallelEmbedding,
    )

    out, inp = param.shape
    if kind == "column2":
        return ColumnParallelLinear(inp, out, bias=False, stride=2, group=group)
    if kind == "column":
        return ColumnParallelLinear(inp, out, bias=False, group=group)
    if kind == "row":
        return RowParallelLinear(inp, out, bias=False, group=group)
    if kind == "vocab":
        return VocabParallelEmbedding(out, inp, group=group)
    return ParallelEmbedding(out, inp, group=group)


def _check(rank: int, world: int) -> None:
    import torch.distributed as dist

    import topology_torch
    from topology_torch.ops import group_rank

    groups = topology_torch.initialize(TOPO)
    try:
        tp = groups.group("tp")
        stage = TOPO.stage(rank)
        holders: dict[str, set[int]] = {}
        for param, kind in _weights(0):
            torch.manual_seed(1)
            layer = _build(kind, param, tp)
            master = layer.master_weight.detach()
            shards = param_placement(TOPO, param, num_layers=LAYERS).shards
            mine = [s for s in shards if rank in s.ranks]
            assert len(mine) == 1 and mine[0].index == group_rank(tp), (param.name, mine)
            local = torch.cat(
                [master.narrow(param.cut_dim, lo, hi - lo) for lo, hi in mine[0].ranges],
                dim=param.cut_dim,
            )
            assert torch.equal(layer.weight.detach(), local), param.name
            holders[param.name] = set(mine[0].ranks)
        seen: list[Any] = [None] * world
        dist.all_gather_object(seen, (rank, stage, group_rank(tp), holders))
        for other, other_stage, other_tp, other_holders in seen:
            for name, ranks in holders.items():
                same = other_stage == stage and other_tp == group_rank(tp)
                assert (other in ranks) == same, (name, other)
                if same:
                    assert other_holders[name] == ranks
    finally:
        topology_torch.destroy()


def test_core_slices_equal_our_layers_shards() -> None:
    """Column (plain and fused), row, vocab and embedding-dim shards match the core's slices."""
    run_world(4, _check)
