"""Transfers on one spawned gloo world of 4 ranks: placements against our layers, then plans run.

Placements: on ``Topology(4, tp=2)`` (dp 2; stages are the golden tables' business) each rank
builds our layers with the tp group of ``topology_torch.initialize``; the core's shard for the
rank must name it among its holders, and its ranges, cut from the layer's master weight, must
equal the layer's local weight exactly.

Plans: dense tp2 x pp2 -> tp4, experts ep4 (etp 1) -> tp2 x pp2 with vpp 2, tp2 x pp2 (order
tp-pp-dp) -> pp4, all colocated, and tp2 on ranks 0-1 -> dp2 on ranks 2-3. Each rank fills its
source shards from a seeded master per weight, runs :func:`topology_torch.transfer.execute`, and
its destination shards must equal the master's slices the core's placement names, bit for bit.
Relay plans (``relay=True`` on hosts of 2 GPUs: tp2 -> dp2 apart, tp2 x pp2 -> dp4 colocated)
run their relay copies after the network stage, to the same exact shards.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from tests.torch.world import run_world  # noqa: E402
from topology import Allocation, Host, Param, Topology, param_placement, transfer  # noqa: E402

TOPO = Topology(4, tp=2)
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


def _check_placements(rank: int, world: int) -> None:
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
            shards = param_placement(TOPO, param, num_layers=1).shards
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


LAYERS = 4
WEIGHTS = [
    Param("embed", (16, 6), sharding="vocab", position="tied", itemsize=4),
    Param("proj", (40, 8), sharding="row", layer=1, itemsize=4),  # 2-D GTP blocks of 32 + 8 rows
    *(
        w
        for layer in range(LAYERS)
        for w in (
            Param(
                f"fc1.{layer}", (16, 6), sharding="column", parts=(8, 8), layer=layer, itemsize=4
            ),
            Param(f"fc2.{layer}", (6, 8), sharding="row", layer=layer, itemsize=4),
            Param(f"norm.{layer}", (6,), layer=layer, itemsize=4),
            *(
                Param(
                    f"e{e}.{layer}",
                    (8, 6),
                    sharding="expert-column",
                    parts=(4, 4),
                    layer=layer,
                    expert=e,
                    num_experts=4,
                    itemsize=4,
                )
                for e in range(4)
            ),
        )
    ),
]
CASES = [
    (Topology(4, tp=2, pp=2), Topology(4, tp=4)),
    (Topology(4, ep=4, etp=1), Topology(4, tp=2, pp=2, vpp=2)),
    (Topology(4, tp=2, pp=2, order="tp-pp-dp"), Topology(4, pp=4)),
    (Topology(2, tp=2), Topology(2, dp=2, rank_offset=2)),
    (Topology(4, tp=2, gtp=2), Topology(4, tp=4)),  # row-parallel weights as 2-D blocks
    (Topology(4, tp=4), Topology(4, gtp=2, pp=2)),
]


def _master(index: int, param: Param) -> torch.Tensor:
    generator = torch.Generator().manual_seed(index)
    return torch.randn(param.shape, generator=generator)


def _shards(topo: Topology, rank: int) -> dict[str, torch.Tensor]:
    """This rank's shards of every weight it holds in ``topo``, cut from the masters (under GTP,
    of a row-parallel weight, only the shard's rows of dim 0; a holder of padding: none)."""
    found = {}
    for index, param in enumerate(WEIGHTS):
        for shard in param_placement(topo, param, num_layers=LAYERS).shards:
            if rank in shard.ranks and shard.ranges:
                master = _master(index, param)
                if shard.rows is not None:
                    master = master[shard.rows[0] : shard.rows[1]]
                found[param.name] = torch.cat(
                    [master.narrow(param.cut_dim, lo, hi - lo) for lo, hi in shard.ranges],
                    dim=param.cut_dim,
                )
    return found


RELAY_CASES = [
    (Topology(2, tp=2), Topology(2, dp=2, rank_offset=2)),
    (Topology(4, tp=2, pp=2), Topology(4, dp=4)),
]
HOSTS = Allocation([Host("a", 2), Host("b", 2)])


def _check_plans(rank: int, world: int) -> None:
    from topology_torch.transfer import execute

    relayed = [(src, dst, True) for src, dst in RELAY_CASES]
    for src, dst, relay in [(src, dst, False) for src, dst in CASES] + relayed:
        plan = transfer(
            src,
            dst,
            WEIGHTS,
            num_layers=LAYERS,
            allocation=HOSTS if relay else None,
            relay=relay,
        )
        assert plan.stats.get("relay_ops", 1) > 0, (str(src), str(dst))
        want = _shards(dst, rank)
        got = {name: torch.full_like(t, float("nan")) for name, t in want.items()}
        execute(plan, rank, _shards(src, rank), got)
        for name, tensor in want.items():
            assert torch.equal(got[name], tensor), (str(src), str(dst), name)


def _run(rank: int, world: int) -> None:
    _check_placements(rank, world)
    _check_plans(rank, world)


def test_placements_match_our_layers_and_plans_move_every_shard_exactly() -> None:
    """Core slices equal our layers' shards; each plan leaves every destination shard exact."""
    run_world(4, _run)
