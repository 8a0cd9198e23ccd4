"""Round trip into an engine (issue 32's acceptance): a tiny model's random Hugging Face weights ->
Megatron's shards under a training layout -> ``topology.refit``'s plan, applied in memory (one
dict of tensors per rank, no processes) -> each engine rank's local tensors, bitwise equal to the
slices the engine's rules (``holding``) say of the original Hugging Face tensors, padding
untouched. Dense (Llama-like, vocabulary padded), MoE (Mixtral-like) and MLA (DeepSeek-V3-like:
dense first layer, shared experts, router bias) models; vLLM with tp above the KV heads and with
expert parallelism, SGLang (ep inside tp, dp attention) and whole tensors (``engine=hf``);
colocated and apart."""

from __future__ import annotations

import pytest
import torch

from topology import Architecture, Param, Refit, Topology, hf_weights, param_placement, refit
from topology._engine.rules import holding
from topology._refit.target import engine_name

PAD = float("inf")
"""What every element of an engine tensor starts as: one that receives nothing keeps it."""

LLAMA = Architecture(4, 16, 100, 32, 8, 2, 4)
MIXTRAL = Architecture(2, 8, 64, 16, 4, 2, 2, experts=8, top_k=2, moe_ffn=16, family="mixtral")
DEEPSEEK = Architecture(
    3,
    16,
    128,
    32,
    4,
    4,
    4,
    experts=8,
    top_k=2,
    moe_ffn=8,
    dense_layers=1,
    shared_ffn=8,
    mla=(8, 6, 4, 2, 4),
    router_bias=True,
    family="deepseek_v3",
)

CASES = [
    (LLAMA, Topology(4, tp=2, pp=2), "engine=vllm,tp=4"),  # tp 4 > 2 KV heads, vocab padded
    (LLAMA, Topology(4, tp=2, gtp=2), "engine=vllm,tp=8"),
    (LLAMA, Topology(4, pp=2, vpp=2), "engine=sglang,tp=4,dp=2,dp_attention=true"),
    (LLAMA, Topology(4, tp=2, pp=2), "engine=hf,dp=2"),
    (MIXTRAL, Topology(4, tp=2, ep=2), "engine=vllm,tp=2,dp=2,ep=4"),
    (MIXTRAL, Topology(8, tp=2, pp=2, ep=2), "engine=vllm,tp=4,ep=4,placement=round_robin"),
    (MIXTRAL, Topology(4, tp=2, ep=2, etp=1), "engine=vllm,tp=2,dp=2"),  # experts cut over all
    (MIXTRAL, Topology(4, tp=2, ep=2), "engine=sglang,tp=4,ep=2"),
    (DEEPSEEK, Topology(4, tp=2, pp=2), "engine=vllm,tp=4,ep=4"),
    (DEEPSEEK, Topology(8, tp=2, pp=2, ep=2, etp=1), "engine=sglang,tp=4,dp=2,ep=2"),
    (DEEPSEEK, Topology(4, tp=2, ep=2), "engine=hf"),
]


def _hf(model: Architecture) -> dict[str, torch.Tensor]:
    """Random Hugging Face tensors of the checkpoint's names and shapes."""
    generator = torch.Generator().manual_seed(32)
    return {
        h.name: torch.randn(h.shape, generator=generator, dtype=torch.float32)
        for h in hf_weights(model)
    }


def _megatron(model: Architecture, hf: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Each Megatron weight, built from its Hugging Face tensors by ``hf_weights``' blocks."""
    found: dict[str, torch.Tensor] = {}
    for h in hf_weights(model):
        whole = found.setdefault(h.param.name, torch.full(h.param.shape, PAD))
        for hf_row, row, rows in h.blocks:
            whole[row : row + rows] = hf[h.name][hf_row : hf_row + rows]
    assert not any(torch.isinf(t).any() for t in found.values())
    return found


def _shard(whole: torch.Tensor, param: Param, ranges: tuple[tuple[int, int], ...],
           rows: tuple[int, int] | None) -> torch.Tensor:  # fmt: skip
    """A holder's local tensor: its ranges of the cut dim laid one after another (its rows)."""
    cut = param.cut_dim
    local = torch.cat([whole.narrow(cut, lo, hi - lo) for lo, hi in ranges], cut)
    return local if rows is None else local[rows[0] : rows[1]]


def _sources(plan: Refit, megatron: dict[str, torch.Tensor]) -> Tensors:
    """Each training rank's shards under the source layout."""
    found: dict[int, dict[str, torch.Tensor]] = {}
    for param in plan.plan.params:
        placement = param_placement(plan.plan.src, param, num_layers=plan.model.layers)
        for shard in placement.shards:
            if not shard.ranges:
                continue
            local = _shard(megatron[param.name], param, shard.ranges, shard.rows)
            for rank in shard.ranks:
                found.setdefault(rank, {}).setdefault(param.name, local)
    return found


Tensors = dict[int, dict[str, torch.Tensor]]
"""Each rank's local tensors by name."""


def _apply(plan: Refit, sources: Tensors) -> Tensors:
    """Every engine rank's local tensors after the plan's operations (and, colocated, what each
    rank copies from itself)."""
    engine = plan.engine
    ranks = range(plan.rank_offset, plan.rank_offset + engine.world_size)
    found = {r: {n: torch.full(s, PAD) for n, s in plan.tensors(r).items()} for r in ranks}
    ops = [*plan.plan.ops, *(op for r in ranks for op in plan.held(r))]
    for op in ops:
        piece = sources[op.src][op.param.name][op.src_slice]
        cut, offset = op.param.cut_dim, 0
        for name, box in plan.boxes(op):
            extents = [stop - start for start, stop in box]
            inner = extents[len(extents) - piece.dim() :]
            part = piece.narrow(cut, offset, inner[cut])
            offset += inner[cut]
            target = found[op.dst][name][tuple(slice(a, z) for a, z in box)]
            assert torch.isinf(target).all(), f"{name}{box} received twice"
            target.copy_(part.reshape(extents))
        assert offset == piece.shape[cut]
    return found


def _expected(plan: Refit, hf: dict[str, torch.Tensor], rank: int) -> dict[str, torch.Tensor]:
    """What the engine's rules put in engine rank ``rank``'s local tensors."""
    world = rank + plan.rank_offset
    found = {n: torch.full(s, PAD) for n, s in plan.tensors(world).items()}
    for h in hf_weights(plan.model):
        held = holding(plan.engine, h.role, h.shape, plan.model, rank, h.expert)
        for piece in held.pieces:
            name = engine_name(h.name, held.param)
            source = tuple(slice(a, z) for a, z in piece.source)
            target = tuple(slice(a, z) for a, z in piece.target)
            found[name][target] = hf[h.name][source].reshape(found[name][target].shape)
    return found


@pytest.mark.parametrize("apart", [False, True], ids=["colocated", "apart"])
@pytest.mark.parametrize(
    ("model", "src", "engine"), CASES, ids=[f"{c[1].tp}-{c[2]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_engine_rank_holds_its_slices_bitwise(
    model: Architecture, src: Topology, engine: str, apart: bool
) -> None:
    hf = _hf(model)
    plan = refit(src, engine, model, rank_offset=src.world_size if apart else 0)
    got = _apply(plan, _sources(plan, _megatron(model, hf)))
    for rank in range(plan.engine.world_size):
        want = _expected(plan, hf, rank)
        mine = got[rank + plan.rank_offset]
        assert mine.keys() == want.keys()
        for name, tensor in want.items():
            assert torch.equal(mine[name], tensor), (rank, name)
