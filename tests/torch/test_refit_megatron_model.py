"""Refit from megatron-core's own ``GPTModel`` into vLLM's layout, over gloo (issue 32 item 4).

One gloo world of 4 ranks runs every case: each rank builds megatron-core 0.16.1's ``GPTModel``
(local spec, CPU) at the training layout (its own stage's layers, numbered from 0 per virtual
chunk, and its own ep coordinate's experts, numbered from 0), fills it with random Hugging Face
tensors through ``hf_weights``' blocks, then runs ``topology.refit``'s plan with
``megatron_shards`` (the model's parameters by Megatron's local names) and ``execute_refit``
(allocated engine tensors, or the caller's filled in place). Every engine tensor must be
``torch.equal`` to what vLLM's rules put there (``holding``), padding untouched. A relay plan
(``relay=True`` on two hosts of 2 ranks) must hold relay copies (stage 2), which send on from the
engine tensors their relay landed in stage 1, to the same exact tensors.

The oracle does not share the executor's renaming: a local parameter's global layer is Megatron's
own ``TransformerLayer.layer_number`` and its global expert the MoE layer's
``local_expert_indices``; its tensor-parallel slice is :func:`topology.param_placement`'s.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import attrs
import pytest

pytest.importorskip("torch.distributed")

from tests.required import missing
from tests.torch.test_refit_round_trip import DEEPSEEK as ROUND_TRIP_DEEPSEEK
from tests.torch.test_refit_round_trip import LLAMA, MIXTRAL
from tests.torch.world import as_cpu_host, run_world
from topology import Allocation, Architecture, Host, Topology

# The round trip's models: LLAMA has 2 KV heads (vLLM tp 4 replicates each on 2 ranks) and a
# vocabulary of 100 (vLLM pads it to 128); MIXTRAL 8 experts.
TIED = attrs.evolve(LLAMA, tied_embeddings=True)
"""pp 2 holds the word embeddings on both stages: the last as its ``output_layer.weight``."""
QWEN3_MOE = Architecture(
    2, 16, 64, 32, 4, 2, 4, experts=4, top_k=2, moe_ffn=8, qk_norm=True, family="qwen3_moe"
)
"""Per-head q and k norms (``q_layernorm``/``k_layernorm``, whole on every rank) and experts."""
DEEPSEEK = attrs.evolve(ROUND_TRIP_DEEPSEEK, layers=2, vocab=64, experts=4)
"""MLA (q and kv LoRA with their norms), a dense first layer, shared experts, the router's
``expert_bias`` (a buffer of Megatron's router, not a parameter)."""

CASES: list[tuple[Architecture, Topology, str, int, bool]] = [
    # model, training layout, engine, the engine's first rank, fill the caller's tensors in place
    (LLAMA, Topology(4, tp=2, pp=2), "engine=vllm,tp=4", 0, False),
    (LLAMA, Topology(4, tp=2, pp=2), "engine=vllm,tp=2", 2, True),
    (LLAMA, Topology(4, pp=2, vpp=2), "engine=vllm,tp=2,dp=2", 0, True),
    (TIED, Topology(4, tp=2, pp=2), "engine=vllm,tp=2", 1, False),
    (MIXTRAL, Topology(4, pp=2, ep=2), "engine=vllm,tp=2,dp=2,ep=4", 0, False),
    (MIXTRAL, Topology(4, tp=2, ep=2), "engine=vllm,tp=4,ep=4,placement=round_robin", 0, True),
    (QWEN3_MOE, Topology(4, pp=2, ep=2), "engine=vllm,tp=2,dp=2,ep=4", 0, False),
    (DEEPSEEK, Topology(4, pp=2, ep=2), "engine=vllm,tp=4,ep=4", 0, True),
    (DEEPSEEK, Topology(4, ep=4), "engine=vllm,tp=2,dp=2,ep=4", 0, False),
]
LOCAL_MLA = (DEEPSEEK, Topology(4, tp=2, ep=2), "engine=vllm,tp=4,ep=4")
"""The local spec's MLA cuts ``linear_q_down_proj`` and ``linear_kv_down_proj`` over tp
(``column_parallel_linear``, gathered after; ``gpt_layer_specs.py``'s local MLA layer), where
the Transformer Engine spec, whose names and shards the plan follows, keeps them whole on every
tp rank (``backend.linear()``: ``TELinear`` duplicated): at tp 2 ``megatron_shards`` refuses such
a model by the shape it finds."""
RELAY_CASES: list[tuple[Architecture, Topology, str, int, bool]] = [
    # stage 0's weights enter host b once; rank 2 or 3 copies each on to the other (stage 2)
    (LLAMA, Topology(4, tp=2, pp=2), "engine=vllm,tp=1,dp=2", 2, True),
]
HOSTS = Allocation([Host("a", 2), Host("b", 2)])
SENTINEL = -7.0
"""What the caller's engine tensors hold before an in-place refit: padding must keep it."""


def _megatron_installed() -> None:
    """Skip without megatron-core installed, except under ``CI``, where it must be."""
    if importlib.util.find_spec("megatron.core") is not None:
        return
    reason = "megatron-core is not installed in .venv; scripts/setup.sh installs it"
    missing("the megatron-core refit test", reason)


def _build(model: Architecture, src: Topology) -> list[Any]:
    """This rank's GPTModel chunks at ``src`` (megatron-core's parallel state set to it)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    ps.initialize_model_parallel(
        tensor_model_parallel_size=src.tp,
        pipeline_model_parallel_size=src.pp,
        virtual_pipeline_model_parallel_size=src.vpp,
        expert_model_parallel_size=src.ep,
    )
    moe = model.experts > 1
    sizes: dict[str, Any] = {}
    if moe:
        sizes.update(
            num_moe_experts=model.experts,
            moe_ffn_hidden_size=model.moe_ffn,
            moe_router_topk=model.top_k,
            moe_layer_freq=[0] * model.dense_layers + [1] * (model.layers - model.dense_layers),
            moe_shared_expert_intermediate_size=model.shared_ffn or None,
        )
    if model.router_bias:
        sizes.update(moe_router_enable_expert_bias=True, moe_router_score_function="sigmoid")
    if model.mla is not None:
        q_lora, kv_lora, nope, rope, v_head = model.mla
        sizes.update(
            multi_latent_attention=True,
            q_lora_rank=q_lora,
            kv_lora_rank=kv_lora,
            qk_head_dim=nope,
            qk_pos_emb_head_dim=rope,
            v_head_dim=v_head,
            rope_type="rope",
        )
    config = (MLATransformerConfig if model.mla is not None else TransformerConfig)(
        num_layers=model.layers,
        hidden_size=model.hidden,
        num_attention_heads=model.heads,
        num_query_groups=model.kv_heads,
        kv_channels=model.head_dim,
        ffn_hidden_size=model.ffn,
        gated_linear_unit=True,
        add_bias_linear=False,
        normalization="RMSNorm",
        qk_layernorm=model.qk_norm or model.mla is not None,  # MLA: its local spec's LoRA norms
        tensor_model_parallel_size=src.tp,
        pipeline_model_parallel_size=src.pp,
        virtual_pipeline_model_parallel_size=src.vpp,
        expert_model_parallel_size=src.ep,
        pipeline_dtype=torch.float32,
        use_cpu_initialization=True,
        params_dtype=torch.float32,
        **sizes,
    )
    chunks = []
    for vp in range(src.vpp or 1):
        stage = None if src.vpp is None else vp
        spec = get_gpt_decoder_block_spec(
            config, use_transformer_engine=False, normalization="RMSNorm", vp_stage=stage
        )
        if model.mla is not None:
            _without_te_attention(spec)
        chunks.append(
            GPTModel(
                config,
                spec,
                vocab_size=model.vocab,
                max_sequence_length=8,
                position_embedding_type="rope",
                share_embeddings_and_output_weights=model.tied_embeddings,
                pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=stage),
                post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=stage),
                vp_stage=stage,
            )
        )
    return chunks


def _without_te_attention(spec: Any) -> None:
    """Let megatron-core 0.16.1's local MLA spec build on CPU without Transformer Engine: its
    ``MLASelfAttention`` passes ``k_channels`` to the local ``DotProductAttention`` (which does
    not take it) and tests ``isinstance(..., TELinear)``. The core attention holds no weights, so
    a stand-in for it, and a class for the absent ``TELinear``, change no parameter."""
    import megatron.core.transformer.multi_latent_attention as mla
    import torch

    class CoreAttention(torch.nn.Module):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__()

    for name in ("TELinear", "TEColumnParallelLinear"):
        if not isinstance(getattr(mla, name, None), type):
            setattr(mla, name, type(name, (), {}))
    for layer in spec.layer_specs:
        layer.submodules.self_attention.submodules.core_attention = CoreAttention


TE_NAMES = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}
"""The local spec's norms under the TE spec's names (``pre_mlp_layernorm`` in a dense layer;
``input_layernorm`` where it feeds ``linear_qkv``: not under MLA)."""
MLA_TE_NAMES = {
    "self_attention.q_layernorm.weight": "self_attention.linear_q_up_proj.layer_norm_weight",
    "self_attention.kv_layernorm.weight": "self_attention.linear_kv_up_proj.layer_norm_weight",
}
"""MLA's LoRA norms: a module of the local spec, fused into the up-projection under TE's."""


def _global_name(chunk: Any, name: str, model: Architecture) -> str:
    """The whole model's name of a chunk's parameter, from Megatron's own module attributes."""
    parts = name.split(".")
    if name == "output_layer.weight" and chunk.share_embeddings_and_output_weights:
        return "embedding.word_embeddings.weight"  # the last stage's copy of tied embeddings
    if parts[:2] != ["decoder", "layers"]:
        return name
    layer = chunk.decoder.layers[int(parts[2])]
    parts[2] = str(layer.layer_number - 1)
    if "local_experts" in parts:
        at = parts.index("local_experts") + 1
        parts[at] = str(layer.mlp.local_expert_indices[int(parts[at])])
    rest = ".".join(parts[3:])
    fused = {"pre_mlp_layernorm.weight"} if not hasattr(layer.mlp, "router") else set()
    if model.mla is None:
        fused.add("input_layernorm.weight")  # it feeds linear_qkv
    renames = {**{k: TE_NAMES[k] for k in fused}, **(MLA_TE_NAMES if model.mla else {})}
    rest = renames.get(rest, rest)
    return ".".join([*parts[:3], rest])


def _fill(chunks: list[Any], plan: Any, megatron: dict[str, Any], rank: int) -> int:
    """Copy into each chunk's parameters its slice of the whole Megatron weights; the count."""
    import torch

    from topology import param_placement

    from .test_refit_round_trip import _shard

    params = {p.name: p for p in plan.plan.params}
    filled = 0
    for chunk in chunks:
        biases = [(n, b) for n, b in chunk.named_buffers() if n.endswith(".router.expert_bias")]
        for name, tensor in [*chunk.named_parameters(), *biases]:
            param = params[_global_name(chunk, name, plan.model)]
            placement = param_placement(plan.plan.src, param, num_layers=plan.model.layers)
            shard = next(s for s in placement.shards if rank in s.ranks)
            local = _shard(megatron[param.name], param, shard.ranges, shard.rows)
            assert tensor.shape == local.shape, (name, tensor.shape, local.shape)
            with torch.no_grad():
                tensor.copy_(local)
            filled += 1
    return filled


def _rank_main(rank: int, world_size: int) -> None:
    """Every case on this rank: build, fill, refit, compare."""
    import warnings

    import torch
    from megatron.core import parallel_state as ps

    from topology import TopologyError, refit
    from topology_torch.transfer import execute_refit, megatron_shards

    from .test_refit_round_trip import _expected, _hf, _megatron

    warnings.simplefilter("ignore")
    as_cpu_host()
    cases = [(case, False) for case in CASES] + [(case, True) for case in RELAY_CASES]
    for (model, src, engine, offset, in_place), relay in cases:
        hf = _hf(model)
        hosts = HOSTS if relay else None
        plan = refit(src, engine, model, rank_offset=offset, allocation=hosts, relay=relay)
        copies = [op for r in range(world_size) for op in plan.sends(r) if op.stage == 2]
        assert bool(copies) == relay, (engine, relay, len(copies))
        chunks = _build(model, src)
        assert _fill(chunks, plan, _megatron(model, hf), rank) > 0
        sources = megatron_shards(plan, rank, chunks if src.vpp else chunks[0])
        mine = rank - offset
        engine_rank = 0 <= mine < plan.engine.world_size
        into = None
        if in_place and engine_rank:
            shapes = plan.tensors(rank)
            into = {n: torch.full(s, SENTINEL) for n, s in shapes.items()}
        got = execute_refit(plan, rank, sources, into, dtype=torch.float32)
        ps.destroy_model_parallel()
        if not engine_rank:
            assert got == {}, (engine, rank)
            continue
        if into is not None:
            assert got is into
        want = _expected(plan, hf, mine)
        assert list(got) == list(want), (engine, rank)
        for name, tensor in want.items():
            pad = torch.isinf(tensor)
            expected = tensor.masked_fill(pad, SENTINEL if in_place else 0.0)
            assert torch.equal(got[name], expected), (engine, rank, name)
    model, src, engine = LOCAL_MLA
    plan = refit(src, engine, model)
    chunks = _build(model, src)
    with pytest.raises(TopologyError, match=r"linear_q_down_proj\.weight' has shape"):
        megatron_shards(plan, rank, chunks[0])
    ps.destroy_model_parallel()


def test_gptmodel_refits_into_vllm_over_gloo() -> None:
    """Every case's engine tensors equal vLLM's slices of the Hugging Face weights, bitwise."""
    _megatron_installed()
    run_world(4, _rank_main, timeout=300)
