"""The weights of a decoder, as Megatron holds them (private).

:func:`weights` lists the :class:`Param` of an :class:`Architecture`, or of a preset of the one
model table (``topology._architecture.presets``), in Megatron's module order. QKV is one
column-parallel weight (Megatron groups it by query group, so tp cuts it contiguously);
``linear_fc1`` is gate and up fused (two parts); MLA's down-projections are replicated.
Norms are named as megatron-core's Transformer Engine layer spec (``gpt_layer_specs.py``) holds
them: fused into the linear after them where that linear is a ``TELayerNormColumnParallelLinear``
(the input norm is ``self_attention.linear_qkv.layer_norm_weight``, a dense MLP's norm
``mlp.linear_fc1.layer_norm_weight``, MLA's latent norms ``linear_q_up_proj.layer_norm_weight``
and ``linear_kv_up_proj.layer_norm_weight``), a norm of its own otherwise (an MLA layer's
``input_layernorm.weight``, an MoE layer's ``pre_mlp_layernorm.weight``). Tied embeddings list one
``embedding.word_embeddings.weight`` held by the first and last stages (position ``tied``) and
no ``output_layer.weight``.

>>> ws = weights("llama-70b")
>>> len(ws), round(sum(w.nbytes for w in ws) / 2 / 1e9, 1)
(483, 69.0)
"""

from __future__ import annotations

import functools

from .._architecture.architecture import Architecture
from .._architecture.presets import ARCHITECTURES
from .._args import check_size, format_choices, show
from .._errors import TopologyError
from .params import Param, sibling
from .planner import bulk

__all__ = ["architecture_of", "weights"]


def weights(model: str | Architecture, itemsize: int = 2) -> list[Param]:
    """Every weight of ``model``, embedding first, output last, in Megatron's module order.

    Args:
        model: a preset name (``"llama-7b"``, ``"llama-13b"``, ``"llama-70b"``,
            ``"mixtral-8x7b"``, ``"deepseek-v3"``: the presets of ``topology transfer --model``
            and of ``topology.cost.MODELS``) or an :class:`Architecture`.
        itemsize: bytes per element (2 for bf16).

    Returns:
        One :class:`Param` per weight, sharded as Megatron shards it; pass them to
        :func:`topology.transfer`.

    Raises:
        TopologyError: an unknown preset, or an ``itemsize`` that is not a positive int.

    >>> from topology import Architecture, weights
    >>> tiny = weights(Architecture(1, 8, 16, 32, 2, 2, 4))
    >>> len(tiny), tiny[2].name, tiny[2].shape
    (9, 'decoder.layers.0.self_attention.linear_qkv.weight', (24, 8))
    >>> len(weights("mixtral-8x7b")), len(weights("deepseek-v3"))
    (675, 30486)
    """
    found = architecture_of(model)
    check_size("itemsize", itemsize)
    with bulk():  # tens of thousands of acyclic records: no cyclic collection while made
        return list(_listed(found, itemsize))


@functools.lru_cache(maxsize=8)
def _listed(found: Architecture, itemsize: int) -> tuple[Param, ...]:
    """:func:`weights` of a checked model, made once per (model, itemsize): the model and the
    params are immutable, and DeepSeek-V3's 30,486 take a large part of a one-rank plan."""
    h = found.hidden
    embedding = "tied" if found.tied_embeddings else "first"
    listed = [
        Param(
            "embedding.word_embeddings.weight",
            (found.vocab, h),
            itemsize,
            "vocab",
            None,
            None,
            embedding,
        )
    ]
    for layer in range(found.layers):
        listed += _attention(found, layer, itemsize)
        listed += _mlp(found, layer, itemsize)
    listed.append(Param("decoder.final_layernorm.weight", (h,), itemsize, position="last"))
    if not found.tied_embeddings:
        listed.append(
            Param("output_layer.weight", (found.vocab, h), itemsize, "vocab", position="last")
        )
    return tuple(listed)


def architecture_of(model: object) -> Architecture:
    """``model`` itself when an :class:`Architecture`, else the row of preset ``model``.

    Raises:
        TopologyError: an unknown preset.
    """
    if isinstance(model, Architecture):
        return model
    if not isinstance(model, str) or model not in ARCHITECTURES:
        raise TopologyError(
            f"unknown model preset {show(model)} for a transfer; valid presets: "
            f"{format_choices(ARCHITECTURES)}"
        )
    return ARCHITECTURES[model]


def _attention(model: Architecture, layer: int, itemsize: int) -> list[Param]:
    h, at = model.hidden, f"decoder.layers.{layer}.self_attention"

    def w(name: str, shape: tuple[int, ...], sharding: str = "replicated") -> Param:
        return Param(f"{at}.{name}", shape, itemsize, sharding, layer=layer)

    if model.mla is None:
        found = [w("linear_qkv.layer_norm_weight", (h,))]
        qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
        found.append(w("linear_qkv.weight", (qkv, h), "column"))
        if model.qkv_bias:
            found.append(w("linear_qkv.bias", (qkv,), "column"))
        if model.qk_norm:
            found.append(w("q_layernorm.weight", (model.head_dim,)))
            found.append(w("k_layernorm.weight", (model.head_dim,)))
    else:
        q_rank, kv_rank, nope, rope, v = model.mla
        norm = Param(f"decoder.layers.{layer}.input_layernorm.weight", (h,), itemsize, layer=layer)
        found = [
            norm,
            w("linear_q_down_proj.weight", (q_rank, h)),
            w("linear_q_up_proj.layer_norm_weight", (q_rank,)),
            w("linear_q_up_proj.weight", (model.heads * (nope + rope), q_rank), "column"),
            w("linear_kv_down_proj.weight", (kv_rank + rope, h)),
            w("linear_kv_up_proj.layer_norm_weight", (kv_rank,)),
            w("linear_kv_up_proj.weight", (model.heads * (nope + v), kv_rank), "column"),
        ]
    width = model.heads * (model.mla[4] if model.mla else model.head_dim)
    found.append(w("linear_proj.weight", (h, width), "row"))
    return found


def _mlp(model: Architecture, layer: int, itemsize: int) -> list[Param]:
    h, at = model.hidden, f"decoder.layers.{layer}.mlp"
    if not model.is_moe or layer < model.dense_layers:
        norm = Param(f"{at}.linear_fc1.layer_norm_weight", (h,), itemsize, layer=layer)
        return [norm, *_dense(h, at, model.ffn, layer, itemsize)]
    norm = Param(f"decoder.layers.{layer}.pre_mlp_layernorm.weight", (h,), itemsize, layer=layer)
    found = [norm, Param(f"{at}.router.weight", (model.experts, h), itemsize, layer=layer)]
    if model.router_bias:
        found.append(Param(f"{at}.router.expert_bias", (model.experts,), itemsize, layer=layer))
    fc1 = Param(
        f"{at}.experts.local_experts.0.linear_fc1.weight",
        (2 * model.moe_ffn, h),
        itemsize,
        "expert-column",
        parts=(model.moe_ffn, model.moe_ffn),
        layer=layer,
        expert=0,
        num_experts=model.experts,
    )
    fc2 = Param(
        f"{at}.experts.local_experts.0.linear_fc2.weight",
        (h, model.moe_ffn),
        itemsize,
        "expert-row",
        layer=layer,
        expert=0,
        num_experts=model.experts,
    )
    for e in range(model.experts):  # expert 0 checked, the others its siblings
        found += [
            sibling(fc1, name=f"{at}.experts.local_experts.{e}.linear_fc1.weight", expert=e),
            sibling(fc2, name=f"{at}.experts.local_experts.{e}.linear_fc2.weight", expert=e),
        ]
    if model.shared_ffn:
        found += _dense(h, f"{at}.shared_experts", model.shared_ffn, layer, itemsize)
    return found


def _dense(h: int, at: str, ffn: int, layer: int, itemsize: int) -> list[Param]:
    return [
        Param(f"{at}.linear_fc1.weight", (2 * ffn, h), itemsize, "column", (ffn, ffn), layer),
        Param(f"{at}.linear_fc2.weight", (h, ffn), itemsize, "row", layer=layer),
    ]
