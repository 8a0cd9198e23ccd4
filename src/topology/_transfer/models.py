"""The weights of the cost model's presets, as Megatron holds them (private).

Each preset of ``topology.cost.MODELS`` gets the shapes it lacks (vocabulary, MLP width, heads,
attention kind) here; :func:`weights` lists its :class:`Param` in Megatron's module order. QKV is
one column-parallel weight (Megatron groups it by query group, so tp cuts it contiguously);
``linear_fc1`` is gate and up fused (two parts); MLA's down-projections are replicated.

>>> ws = weights("llama-70b")
>>> len(ws), round(sum(w.nbytes for w in ws) / 2 / 1e9, 1)
(483, 69.0)
"""

from __future__ import annotations

import attrs

from .._args import format_choices, show
from .._errors import TopologyError
from .params import Param

__all__ = ["ARCHITECTURES", "Architecture", "weights"]


@attrs.frozen
class Architecture:
    """The shapes of a decoder: enough to list its weights."""

    layers: int
    hidden: int
    vocab: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int
    experts: int = 0
    moe_ffn: int = 0
    dense_layers: int = 0
    shared_ffn: int = 0
    mla: tuple[int, int, int, int, int] | None = None
    """(q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)."""

    def weights(self, itemsize: int = 2) -> list[Param]:
        """Every weight, embedding first, output last."""
        h = self.hidden
        found = [Param("embedding.word_embeddings.weight", (self.vocab, h), itemsize, "vocab")]
        for layer in range(self.layers):
            found += self._attention(layer, itemsize)
            found += self._mlp(layer, itemsize)
        found.append(Param("decoder.final_layernorm.weight", (h,), itemsize, position="last"))
        found.append(
            Param("output_layer.weight", (self.vocab, h), itemsize, "vocab", position="last")
        )
        return found

    def _attention(self, layer: int, itemsize: int) -> list[Param]:
        h, at = self.hidden, f"decoder.layers.{layer}.self_attention"

        def w(name: str, shape: tuple[int, ...], sharding: str = "replicated") -> Param:
            return Param(f"{at}.{name}", shape, itemsize, sharding, layer=layer)

        found = [w("linear_qkv.layer_norm_weight", (h,))]
        if self.mla is None:
            qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
            found.append(w("linear_qkv.weight", (qkv, h), "column"))
        else:
            q_rank, kv_rank, nope, rope, v = self.mla
            found += [
                w("linear_q_down_proj.weight", (q_rank, h)),
                w("linear_q_up_proj.layer_norm_weight", (q_rank,)),
                w("linear_q_up_proj.weight", (self.heads * (nope + rope), q_rank), "column"),
                w("linear_kv_down_proj.weight", (kv_rank + rope, h)),
                w("linear_kv_up_proj.layer_norm_weight", (kv_rank,)),
                w("linear_kv_up_proj.weight", (self.heads * (nope + v), kv_rank), "column"),
            ]
        width = self.heads * (self.mla[4] if self.mla else self.head_dim)
        found.append(w("linear_proj.weight", (h, width), "row"))
        return found

    def _mlp(self, layer: int, itemsize: int) -> list[Param]:
        h, at = self.hidden, f"decoder.layers.{layer}.mlp"
        norm = Param(f"{at}.pre_mlp_layernorm.weight", (h,), itemsize, layer=layer)
        if not self.experts or layer < self.dense_layers:
            return [norm, *self._dense(f"{at}", self.ffn, layer, itemsize)]
        found = [norm, Param(f"{at}.router.weight", (self.experts, h), itemsize, layer=layer)]
        for e in range(self.experts):
            found += [
                Param(
                    f"{at}.experts.local_experts.{e}.linear_fc1.weight",
                    (2 * self.moe_ffn, h),
                    itemsize,
                    "expert-column",
                    parts=(self.moe_ffn, self.moe_ffn),
                    layer=layer,
                    expert=e,
                    num_experts=self.experts,
                ),
                Param(
                    f"{at}.experts.local_experts.{e}.linear_fc2.weight",
                    (h, self.moe_ffn),
                    itemsize,
                    "expert-row",
                    layer=layer,
                    expert=e,
                    num_experts=self.experts,
                ),
            ]
        if self.shared_ffn:
            found += self._dense(f"{at}.shared_experts", self.shared_ffn, layer, itemsize)
        return found

    def _dense(self, at: str, ffn: int, layer: int, itemsize: int) -> list[Param]:
        h = self.hidden
        return [
            Param(f"{at}.linear_fc1.weight", (2 * ffn, h), itemsize, "column", (ffn, ffn), layer),
            Param(f"{at}.linear_fc2.weight", (h, ffn), itemsize, "row", layer=layer),
        ]


ARCHITECTURES = {
    "llama-7b": Architecture(32, 4096, 32000, 11008, 32, 32, 128),
    "llama-13b": Architecture(40, 5120, 32000, 13824, 40, 40, 128),
    "llama-70b": Architecture(80, 8192, 32000, 28672, 64, 8, 128),
    "mixtral-8x7b": Architecture(32, 4096, 32000, 14336, 32, 8, 128, experts=8, moe_ffn=14336),
    "deepseek-v3": Architecture(
        61,
        7168,
        129280,
        18432,
        128,
        128,
        128,
        experts=256,
        moe_ffn=2048,
        dense_layers=3,
        shared_ffn=2048,
        mla=(1536, 512, 128, 64, 128),
    ),
}
"""The shapes of ``topology.cost.MODELS``' presets (Llama 2, Mixtral 8x7B, DeepSeek-V3's public
configs; DeepSeek-V3 without its multi-token-prediction module). DeepSeek-V3's 61 layers split
unevenly: at pp 16 NeMo-RL's recipe gives ``PipelineSplit(first_stage_layers=3,
last_stage_layers=2)``, pass it to :func:`topology.transfer` (``--first-stage-layers 3
--last-stage-layers 2``)."""


def weights(model: str, itemsize: int = 2) -> list[Param]:
    """The weights of preset ``model`` (a key of :data:`ARCHITECTURES`).

    Raises:
        TopologyError: an unknown preset.
    """
    if model not in ARCHITECTURES:
        raise TopologyError(
            f"unknown model preset {show(model)} for a transfer; valid presets: "
            f"{format_choices(ARCHITECTURES)}"
        )
    return ARCHITECTURES[model].weights(itemsize)
