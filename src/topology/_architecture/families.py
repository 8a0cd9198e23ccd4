"""The Hugging Face model families a ``config.json`` is read for: one row each (private).

Every fact about a family lives in its row of :data:`FAMILIES`: the class its config names
(``architectures[0]``), how its config keys become :class:`~topology.Architecture` fields, the
values a key must hold for the weight list to be right, and the family's own tensor names (only
the MoE block differs: Mixtral's ``block_sparse_moe.experts.{e}.w1/w3/w2`` against
``mlp.experts.{e}.gate_proj/up_proj/down_proj``). :mod:`.config` reads a config by its row.

>>> [row.hf_class for row in FAMILIES.values()][:3]
['LlamaForCausalLM', 'Qwen2ForCausalLM', 'Qwen3ForCausalLM']
>>> FAMILIES["mixtral"].expert_names
('w1', 'w3', 'w2')
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["ALIASES", "FAMILIES", "FAMILY_NAMES", "Family", "Read"]


@attrs.frozen
class Read:
    """How one :class:`~topology.Architecture` field is read from a config.

    ``parse`` names a row of the reader's parser table (``count``: a positive int; ``experts``: an
    int >= 2; ``index``: a
    non-negative int, 0 when absent or null; ``flag``: a bool; ``fixed``: ``default``, no key;
    ``product``: the product of the keys' non-negative ints; ``head_dim``: ``head_dim`` or
    ``hidden_size / num_attention_heads``; ``counts``: a tuple of positive ints; ``prefix``: a
    list ``[0, 1, ..., k - 1]`` read as ``k``); ``default`` stands in for an absent key (``None``:
    the key is required).
    """

    field: str
    keys: tuple[str, ...]
    parse: str = "count"
    default: Any = None


@attrs.frozen
class Family:
    """One Hugging Face family: its class, its config keys, its fixed values and its names."""

    name: str
    hf_class: str
    reads: tuple[Read, ...]
    requires: tuple[tuple[str, Any], ...] = ()
    moe_block: str = "mlp"
    expert_names: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")


_COMMON = (
    Read("layers", ("num_hidden_layers",)),
    Read("hidden", ("hidden_size",)),
    Read("vocab", ("vocab_size",)),
    Read("heads", ("num_attention_heads",)),
    Read("kv_heads", ("num_key_value_heads",)),
    Read("tied_embeddings", ("tie_word_embeddings",), "flag", False),
)
_DENSE = (*_COMMON, Read("ffn", ("intermediate_size",)), Read("head_dim", (), "head_dim"))
_NO_BIAS = (("attention_bias", False), ("mlp_bias", False))

FAMILIES = {
    row.name: row
    for row in (
        Family("llama", "LlamaForCausalLM", _DENSE, _NO_BIAS),
        Family("qwen2", "Qwen2ForCausalLM", (*_DENSE, Read("qkv_bias", (), "fixed", True))),
        Family(
            "qwen3", "Qwen3ForCausalLM", (*_DENSE, Read("qk_norm", (), "fixed", True)), _NO_BIAS
        ),
        Family(
            "qwen3_moe",
            "Qwen3MoeForCausalLM",
            (
                *_DENSE,
                Read("qk_norm", (), "fixed", True),
                Read("experts", ("num_experts",), "experts"),
                Read("top_k", ("num_experts_per_tok",)),
                Read("moe_ffn", ("moe_intermediate_size",)),
                Read("dense_layers", ("mlp_only_layers",), "prefix", []),
            ),
            (*_NO_BIAS, ("decoder_sparse_step", 1)),
        ),
        Family(
            "mixtral",
            "MixtralForCausalLM",
            (
                *_DENSE,
                Read("experts", ("num_local_experts",), "experts"),
                Read("top_k", ("num_experts_per_tok",)),
                Read("moe_ffn", ("intermediate_size",)),
            ),
            moe_block="block_sparse_moe",
            expert_names=("w1", "w3", "w2"),
        ),
        Family(
            "deepseek_v3",
            "DeepseekV3ForCausalLM",
            (
                *_COMMON,
                Read("ffn", ("intermediate_size",)),
                Read("head_dim", ("v_head_dim",)),
                Read("experts", ("n_routed_experts",), "experts"),
                Read("top_k", ("num_experts_per_tok",)),
                Read("moe_ffn", ("moe_intermediate_size",)),
                Read("dense_layers", ("first_k_dense_replace",), "index", 0),
                Read("shared_ffn", ("n_shared_experts", "moe_intermediate_size"), "product", 0),
                Read(
                    "mla",
                    (
                        "q_lora_rank",
                        "kv_lora_rank",
                        "qk_nope_head_dim",
                        "qk_rope_head_dim",
                        "v_head_dim",
                    ),
                    "counts",
                ),
                Read("router_bias", (), "fixed", True),
            ),
            (("attention_bias", False), ("moe_layer_freq", 1)),
        ),
    )
}
"""The families, by the name :attr:`Architecture.family` holds: Llama, Qwen2 (q/k/v biases, often
tied embeddings), Qwen3 (per-head q/k norms), Qwen3-MoE (``mlp_only_layers`` must be the first
layers), Mixtral and DeepSeek-V3 (MLA, shared experts, ``first_k_dense_replace`` dense first
layers, the router's ``e_score_correction_bias``; Kimi-K2's config is a DeepSeek-V3 config, with
``q_lora_rank`` required). ``requires`` pins keys the weight list cannot follow otherwise (an
``o_proj`` bias, MoE every other layer); an absent key holds its requirement."""

FAMILY_NAMES = tuple(FAMILIES)
"""The values :attr:`Architecture.family` takes."""

ALIASES = {"num_experts": ("num_local_experts",)}
"""Other spellings of a config key (transformers 5 writes Qwen3-MoE's ``num_experts`` as
``num_local_experts``)."""
