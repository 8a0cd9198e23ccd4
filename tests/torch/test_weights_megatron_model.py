"""``topology.weights`` against megatron-core 0.16.1's own ``GPTModel``, built on the CPU.

On one gloo rank, megatron-core builds a ``GPTModel`` (its local spec, which imports on the CPU)
with what the Hugging Face families add: q/k/v biases (Qwen2), q/k layernorms (Qwen3), a dense
first layer, routed experts with the router's ``expert_bias`` (DeepSeek-V3's
``e_score_correction_bias``), a shared expert, tied and untied embeddings. Its parameters (and the
``expert_bias`` buffer) must be our weight list, names and shapes, once the local spec's norms are
named as the Transformer Engine spec fuses them (``gpt_layer_specs.py`` of 0.16.1: the local
spec's own ``sharded_state_dict_keys_map`` maps ``input_layernorm.`` to
``self_attention.linear_qkv.layer_norm_`` and ``pre_mlp_layernorm.`` to
``mlp.linear_fc1.layer_norm_``; the TE spec keeps ``pre_mlp_layernorm`` a norm of its own in an
MoE layer: ``pre_mlp_layernorm=backend.layer_norm() if num_experts else IdentityOp``).

Multi-latent attention does not build here (0.16.1's local ``DotProductAttention`` refuses
MLA's ``k_channels``); its names are transcribed from the TE spec's MLA branch (``input_layernorm``
a norm of its own, ``linear_q_up_proj`` / ``linear_kv_up_proj`` fused with their norms).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import attrs
import pytest

pytest.importorskip("torch.distributed")

from tests.required import missing
from tests.torch.world import as_cpu_host, run_world
from topology import Architecture, weights

MODEL = Architecture(
    3, 16, 32, 32, 4, 2, 4, experts=4, moe_ffn=8, dense_layers=1, shared_ffn=8, top_k=2,
    qkv_bias=True, qk_norm=True, router_bias=True, family="qwen3_moe",
)  # fmt: skip
"""Layer 0 dense, layers 1-2 MoE; every feature a Hugging Face family adds to GQA."""


def _megatron() -> None:
    """Skip without megatron-core installed, except under ``CI``, where it must be."""
    if importlib.util.find_spec("megatron.core") is not None:
        return
    reason = "megatron-core is not installed in .venv; scripts/setup.sh installs it"
    missing("the megatron-core GPTModel test", reason)


def _rank_main(rank: int, world_size: int, folder: str) -> None:
    """Build GPTModel at MODEL, tied and untied, and write each one's names and shapes."""
    import warnings

    import torch

    warnings.simplefilter("ignore")
    as_cpu_host()
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    ps.initialize_model_parallel()
    config = TransformerConfig(
        num_layers=MODEL.layers,
        hidden_size=MODEL.hidden,
        num_attention_heads=MODEL.heads,
        num_query_groups=MODEL.kv_heads,
        kv_channels=MODEL.head_dim,
        ffn_hidden_size=MODEL.ffn,
        gated_linear_unit=True,
        add_bias_linear=False,
        add_qkv_bias=MODEL.qkv_bias,
        qk_layernorm=MODEL.qk_norm,
        normalization="RMSNorm",
        num_moe_experts=MODEL.experts,
        moe_ffn_hidden_size=MODEL.moe_ffn,
        moe_shared_expert_intermediate_size=MODEL.shared_ffn,
        moe_layer_freq=[0] * MODEL.dense_layers + [1] * (MODEL.layers - MODEL.dense_layers),
        moe_router_topk=MODEL.top_k,
        moe_router_enable_expert_bias=MODEL.router_bias,
        moe_router_score_function="sigmoid",
        use_cpu_initialization=True,
        params_dtype=torch.float32,
    )
    spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False, normalization="RMSNorm")
    found = {}
    for tied in (False, True):
        model = GPTModel(
            config,
            spec,
            vocab_size=MODEL.vocab,
            max_sequence_length=8,
            position_embedding_type="rope",
            share_embeddings_and_output_weights=tied,
        )
        tensors = [*model.named_parameters(), *model.named_buffers()]
        found[str(tied)] = {
            name: list(t.shape) for name, t in tensors if "local_tokens_per_expert" not in name
        }
    ps.destroy_model_parallel()
    Path(folder, "names.json").write_text(json.dumps(found))


TE_NAMES = {
    "input_layernorm.weight": "self_attention.linear_qkv.layer_norm_weight",
    "pre_mlp_layernorm.weight": "mlp.linear_fc1.layer_norm_weight",
}
"""The local spec's norms under the TE spec's names (``pre_mlp_layernorm`` in a dense layer)."""


def _te_name(name: str) -> str:
    """Megatron's name for ``name`` under the Transformer Engine spec."""
    parts = name.split(".")
    if name.startswith("decoder.layers.") and ".".join(parts[3:]) in TE_NAMES:
        layer = int(parts[2])
        rest = ".".join(parts[3:])
        if rest == "input_layernorm.weight" or layer < MODEL.dense_layers:
            return f"decoder.layers.{layer}.{TE_NAMES[rest]}"
    return name


def test_our_weights_are_megatrons_gptmodel(tmp_path: Path) -> None:
    """GPTModel's parameters and expert_bias are weights(MODEL), names and shapes, tied or not."""
    _megatron()
    run_world(1, _rank_main, str(tmp_path), timeout=300)
    found = json.loads((tmp_path / "names.json").read_text())
    for tied in (False, True):
        ours = attrs.evolve(MODEL, tied_embeddings=tied)
        megatron = {_te_name(name): shape for name, shape in found[str(tied)].items()}
        assert megatron == {p.name: list(p.shape) for p in weights(ours, 4)}
