"""``megatron_shards`` and ``execute_refit``'s arguments, in one process (no gloo world).

A law: over training layouts with pp, vpp, ep and tp, and models dense and MoE, every weight a
rank holds is read from the tensor Megatron's own numbering names: a chunk's first layer is
``decoder.layers.0`` (megatron-core's ``get_transformer_layer_offset`` for an even split: chunk
``v`` of stage ``p`` starts at ``v * L / vpp + p * L / (pp * vpp)``), an ep coordinate's experts
are ``local_experts.0 ..`` in the order of their global numbers; norms under either spec's names,
a wrapper's ``module.`` prefix dropped. Then each wrong argument is one ``TopologyError``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import (
    Architecture,
    Param,
    Topology,
    TopologyError,
    param_placement,
    refit,
    transfer,
    weights,
)
from topology_torch.transfer import execute_refit, megatron_shards

LLAMA = Architecture(4, 16, 64, 32, 4, 2, 4)
MIXTRAL = Architecture(4, 8, 64, 16, 4, 2, 2, experts=8, top_k=2, moe_ffn=16, family="mixtral")
LOCAL_SPEC = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
}


@st.composite
def layouts(draw: st.DrawFn) -> tuple[Architecture, Topology]:
    """A model and a training layout of tp, pp (vpp) and ep over ``tp * pp * ep`` ranks."""
    model = draw(st.sampled_from((LLAMA, MIXTRAL)))
    tp, pp = draw(st.sampled_from((1, 2))), draw(st.sampled_from((1, 2, 4)))
    vpp = draw(st.sampled_from((None, 2))) if pp == 2 else None
    ep = draw(st.sampled_from((1, 2, 4))) if model.experts > 1 else 1
    offset = draw(st.sampled_from((0, 3)))
    return model, Topology(tp * pp * ep, tp=tp, pp=pp, vpp=vpp, ep=ep, rank_offset=offset)


def _local(src: Topology, param: Param, rank: int, num_layers: int) -> tuple[int, str]:
    """``(chunk, Megatron's local name)`` of ``param`` on ``rank``, by Megatron's own numbers."""
    placement = param_placement(src, param, num_layers=num_layers)
    shard = next(s for s in placement.shards if rank in s.ranks)
    parts = param.name.split(".")
    if param.layer is not None:
        chunks = src.pp * (src.vpp or 1)
        start = shard.chunk * num_layers // (src.vpp or 1) + shard.stage * num_layers // chunks
        parts[2] = str(param.layer - start)
    if param.expert is not None:
        held = [
            e
            for e in range(param.num_experts or 0)
            if any(rank in s.ranks for s in param_placement(
                src, Param("x", (8, 8), sharding="expert-column", layer=param.layer, expert=e,
                           num_experts=param.num_experts), num_layers=num_layers).shards)
        ]  # fmt: skip
        at = parts.index("local_experts") + 1
        parts[at] = str(held.index(param.expert))
    return shard.chunk, ".".join(parts)


def _shape(src: Topology, param: Param, rank: int, num_layers: int) -> tuple[int, ...]:
    shard = next(
        s for s in param_placement(src, param, num_layers=num_layers).shards if rank in s.ranks
    )
    width = sum(hi - lo for lo, hi in shard.ranges)
    return tuple(width if d == param.cut_dim else n for d, n in enumerate(param.shape))


@settings(max_examples=25, deadline=None)
@given(layouts(), st.booleans(), st.sampled_from(("", "module.", "module.module.")))
def test_each_weight_is_read_from_megatrons_local_name(
    layout: tuple[Architecture, Topology], local_spec: bool, prefix: str
) -> None:
    model, src = layout
    params = weights(model, 4)
    plan = transfer(src, Topology(1, rank_offset=src.rank_offset), params, num_layers=model.layers)
    for rank in range(src.rank_offset, src.rank_offset + src.world_size):
        chunks: list[dict[str, torch.Tensor]] = [{} for _ in range(src.vpp or 1)]
        want = {}
        for param in params:
            if not any(rank in s.ranks for s in param_placement(
                    src, param, num_layers=model.layers).shards):  # fmt: skip
                continue
            chunk, name = _local(src, param, rank, model.layers)
            parts = name.split(".", 3)
            if local_spec and len(parts) == 4 and parts[3] in LOCAL_SPEC:
                name = ".".join([*parts[:3], LOCAL_SPEC[parts[3]]])
            tensor = torch.empty(_shape(src, param, rank, model.layers))
            assert name not in chunks[chunk], name
            chunks[chunk][prefix + name] = tensor
            want[param.name] = tensor.data_ptr()
        got = megatron_shards(plan, rank, chunks if src.vpp else chunks[0])
        assert {n: t.data_ptr() for n, t in got.items()} == want
    assert megatron_shards(plan, src.rank_offset + src.world_size, None) == {}


PLAN = refit(Topology(4, tp=2, pp=2), "engine=vllm,tp=4", LLAMA)
RANK0 = {
    name: tensor
    for name, tensor in (
        (p.name, torch.zeros(_shape(PLAN.plan.src, p, 0, LLAMA.layers)))
        for p in PLAN.plan.params
        if any(0 in s.ranks for s in param_placement(PLAN.plan.src, p, num_layers=4).shards)
    )
}
"""Rank 0's shards of ``PLAN`` under Megatron's local names (stage 0 holds layers 0 and 1)."""

BAD_SHARDS: list[tuple[Any, int, Any, str]] = [
    ("plan", 0, {}, "plan must be a topology.Transfer or topology.Refit, got str"),
    (PLAN, 0, 5, "model chunk 0 is a int; give a torch.nn.Module or a mapping"),
    (PLAN, 0, [RANK0, RANK0], "rank 0 passed 2 model chunks but .* holds 1 per rank"),
    (
        PLAN,
        0,
        {},
        "rank 0's model chunk 0 has no 'embedding.word_embeddings.weight' or "
        r"'output_layer.weight' \(the plan's 'embedding.word_embeddings.weight'\)",
    ),
    (  # stage 1's first layer is layer 2, local 0
        PLAN,
        3,
        {},
        "rank 3's model chunk 0 has no 'decoder.layers.0.self_attention.linear_qkv.layer_norm_"
        r"weight' or 'decoder.layers.0.input_layernorm.weight' \(the plan's 'decoder.layers.2.",
    ),
    (
        PLAN,
        0,
        {**RANK0, "embedding.word_embeddings.weight": torch.zeros(64, 16)},
        r"'embedding.word_embeddings.weight' has shape \(64, 16\) but .* gives it \(32, 16\)",
    ),
]


@pytest.mark.parametrize(("plan", "rank", "model", "match"), BAD_SHARDS)
def test_bad_megatron_shards_arguments(plan: Any, rank: int, model: Any, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        megatron_shards(plan, rank, model)


def test_megatron_shards_reads_rank_zero() -> None:
    assert megatron_shards(PLAN, 0, RANK0).keys() == RANK0.keys()


SHAPES = PLAN.tensors(0)
BAD_REFIT: list[tuple[Any, Any, str]] = [
    (PLAN.plan, None, "plan must be a topology.Refit, got Transfer"),
    (PLAN, (), "into must be a mapping of engine tensor name to tensor, got tuple"),
    (PLAN, {}, "rank 0's engine tensors lack 'model.embed_tokens.weight'"),
    (
        PLAN,
        {n: torch.zeros(s) for n, s in SHAPES.items()} | {"model.norm.weight": torch.zeros(3)},
        r"'model.norm.weight' has shape \(3,\) but .* gives it \(16,\)",
    ),
]


@pytest.mark.parametrize(("plan", "into", "match"), BAD_REFIT)
def test_bad_execute_refit_arguments(plan: Any, into: Any, match: str) -> None:
    with pytest.raises(TopologyError, match=match):
        execute_refit(plan, 0, RANK0, into)
