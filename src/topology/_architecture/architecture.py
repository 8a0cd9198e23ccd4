"""Architecture: the facts of a decoder that the cost model and the weight lists read (private).

One row of the model table (:data:`topology._architecture.presets.ARCHITECTURES`): the shapes
that list its weights (``topology.weights``) and the sizes that cost a step
(``topology.cost.MODELS``). Shapes are counts of a config (Megatron's or a Hugging Face
``config.json``'s); ``parameters`` and ``expert_parameters`` are the counts a model's authors
publish, kept as given: they differ slightly from the sum of the shapes (Llama 2 7B is published
as 6.74e9 weights; its shapes hold 6,738,415,616).

>>> llama = Architecture(32, 4096, 32000, 11008, 32, 32, 128)
>>> llama.is_moe, llama.experts, llama.parameters
(False, 1, None)
>>> Architecture(32, 4096, 32000, 11008, 32, 32, 128, top_k=2)
Traceback (most recent call last):
topology._errors.TopologyError: top_k (2) cannot exceed experts (1); use top_k <= experts
"""

from __future__ import annotations

from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._fields import LIMIT, flag, whole
from .families import FAMILY_NAMES

__all__ = ["MLA_FIELDS", "Architecture"]

MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
"""The five sizes of multi-head latent attention, in the order of :attr:`Architecture.mla`."""


def _mla(instance: Any, attribute: Any, value: Any) -> None:
    """None, or one int from 1 to 2**64 per :data:`MLA_FIELDS`."""
    if value is None or (
        isinstance(value, tuple)
        and len(value) == len(MLA_FIELDS)
        and all(type(v) is int and 1 <= v <= LIMIT for v in value)
    ):
        return
    raise TopologyError(
        f"Architecture.mla must be None or a tuple of {len(MLA_FIELDS)} ints >= 1 "
        f"({', '.join(MLA_FIELDS)}), got {show(value)} ({type(value).__name__})"
    )


def _family(instance: Any, attribute: Any, value: Any) -> None:
    """One of :data:`FAMILY_NAMES`."""
    if value not in FAMILY_NAMES:
        raise TopologyError(
            f"Architecture.family must be one of {', '.join(FAMILY_NAMES)}, got {show(value)}"
        )


@attrs.frozen
class Architecture:
    """A decoder: its shapes and its published sizes, enough to list its weights and cost a step.

    Args:
        layers: transformer layers.
        hidden: the hidden size.
        vocab: the vocabulary (rows of the embedding and of the output layer).
        ffn: the MLP width of a dense layer (each of gate and up).
        heads: attention heads (query heads).
        kv_heads: key/value heads (query groups; ``heads`` for multi-head attention).
        head_dim: the size of one head.
        experts: routed experts per MoE layer (1: a dense model).
        moe_ffn: one routed expert's MLP width (0 for a dense model).
        dense_layers: the first layers of an MoE model that have a dense MLP instead.
        shared_ffn: the MLP width of the shared experts of an MoE layer (0: none).
        mla: multi-head latent attention's sizes (see :data:`MLA_FIELDS`), None for
            grouped-query attention.
        top_k: experts each token visits (keyword-only, as are the two counts below).
        parameters: the published total weight count, experts included (None: not published).
        expert_parameters: how many of ``parameters`` sit in routed experts (published).
        tied_embeddings: the output layer reuses the embedding (Hugging Face's
            ``tie_word_embeddings``; no ``lm_head`` / ``output_layer`` tensor of its own).
        qkv_bias: q, k and v projections have biases (Qwen2).
        qk_norm: a norm over each query and key head (Qwen3's ``q_norm`` / ``k_norm``).
        router_bias: the router has a per-expert score bias (DeepSeek-V3's
            ``e_score_correction_bias``; Megatron's ``router.expert_bias``).
        family: the Hugging Face family (a key of ``topology._architecture.families.FAMILIES``)
            whose tensor names ``topology.hf_weights`` uses; only MoE names differ between them.

    Raises:
        TopologyError: a field of the wrong type or range, or fields that contradict each other.

    >>> Architecture(2, 8, 16, 32, 2, 2, 4, experts=4, top_k=2, moe_ffn=16).is_moe
    True
    """

    layers: int = attrs.field(validator=whole(1))
    hidden: int = attrs.field(validator=whole(1))
    vocab: int = attrs.field(validator=whole(1))
    ffn: int = attrs.field(validator=whole(1))
    heads: int = attrs.field(validator=whole(1))
    kv_heads: int = attrs.field(validator=whole(1))
    head_dim: int = attrs.field(validator=whole(1))
    experts: int = attrs.field(default=1, validator=whole(1))
    moe_ffn: int = attrs.field(default=0, validator=whole(0))
    dense_layers: int = attrs.field(default=0, validator=whole(0))
    shared_ffn: int = attrs.field(default=0, validator=whole(0))
    mla: tuple[int, int, int, int, int] | None = attrs.field(default=None, validator=_mla)
    top_k: int = attrs.field(default=1, validator=whole(1), kw_only=True)
    parameters: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(whole(1)), kw_only=True
    )
    expert_parameters: int = attrs.field(default=0, validator=whole(0), kw_only=True)
    tied_embeddings: bool = attrs.field(default=False, validator=flag, kw_only=True)
    qkv_bias: bool = attrs.field(default=False, validator=flag, kw_only=True)
    qk_norm: bool = attrs.field(default=False, validator=flag, kw_only=True)
    router_bias: bool = attrs.field(default=False, validator=flag, kw_only=True)
    family: str = attrs.field(default="llama", validator=_family, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.heads % self.kv_heads:
            raise TopologyError(
                f"kv_heads ({self.kv_heads}) must divide heads ({self.heads}); "
                "give the number of query groups"
            )
        if self.top_k > self.experts:
            raise TopologyError(
                f"top_k ({self.top_k}) cannot exceed experts ({self.experts}); use top_k <= experts"
            )
        if self.is_moe and not self.moe_ffn:
            raise TopologyError(
                f"moe_ffn must be >= 1 when experts ({self.experts}) > 1, got 0; "
                "give one expert's MLP width"
            )
        if self.dense_layers > self.layers:
            raise TopologyError(
                f"dense_layers ({self.dense_layers}) cannot exceed layers ({self.layers}); "
                "count the first layers with a dense MLP"
            )
        if self.router_bias and not self.is_moe:
            raise TopologyError(
                f"router_bias needs experts > 1, got experts ({self.experts}); "
                "drop router_bias for a dense model"
            )
        if self.mla is not None and (self.qkv_bias or self.qk_norm):
            raise TopologyError(
                "qkv_bias and qk_norm need grouped-query attention, got mla "
                f"{self.mla}; drop them for multi-head latent attention"
            )
        if self.expert_parameters > (self.parameters or 0):
            raise TopologyError(
                f"expert_parameters ({self.expert_parameters}) cannot exceed parameters "
                f"({self.parameters}); give the experts' share of the published total"
            )

    @property
    def is_moe(self) -> bool:
        """True when the model has more than one expert per MoE layer."""
        return self.experts > 1
