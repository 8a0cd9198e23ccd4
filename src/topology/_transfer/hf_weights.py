"""The weights of a decoder in Hugging Face's names, mapped onto Megatron's (private).

:func:`hf_weights` lists every tensor a Hugging Face checkpoint of the model holds (the names and
shapes ``save_pretrained`` writes), each with its role (``topology._architecture.roles.ROLES``),
the Megatron :class:`Param` it lives in (``topology.weights``), and where: ``blocks``, runs of
dim-0 rows ``(hf_row, param_row, rows)``; every other dim is whole. Every rule lives in its row of
:data:`RULES`, keyed by the Megatron name (``{layer}``/``{e}`` stand for the layer and expert):

- ``whole``: the Hugging Face tensor is the Megatron one (norms, ``o_proj``, ``down_proj``,
  the router, MLA's projections, embedding and ``lm_head``);
- ``concat``: the Megatron tensor stacks the pieces along dim 0 in order (``linear_fc1`` =
  ``[gate; up]``, for dense MLPs, routed and shared experts);
- ``qkv``: Megatron's ``linear_qkv`` interleaves q, k and v per query group: for each group ``g``
  of ``kv_heads``, the ``heads / kv_heads`` query heads of ``g``, then k head ``g``, then v head
  ``g`` (each ``head_dim`` rows); the bias likewise.

Tied embeddings have no ``lm_head.weight`` (``save_pretrained`` drops it).

>>> from topology import Architecture, hf_weights
>>> listed = hf_weights(Architecture(1, 8, 16, 32, 4, 2, 2))
>>> for w in listed[2:5]:
...     print(w.name, w.shape, w.blocks)
model.layers.0.self_attn.q_proj.weight (8, 8) ((0, 0, 4), (4, 8, 4))
model.layers.0.self_attn.k_proj.weight (4, 8) ((0, 4, 2), (2, 12, 2))
model.layers.0.self_attn.v_proj.weight (4, 8) ((0, 6, 2), (2, 14, 2))
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from .._architecture.architecture import Architecture
from .._architecture.families import FAMILIES
from .._architecture.roles import ROLES
from .._args import check_size, show
from .._errors import TopologyError
from .._fields import text, whole
from .params import Param, sibling
from .planner import bulk
from .weights import architecture_of, weights

__all__ = ["RULES", "HFWeight", "Kind", "Rule", "hf_kind", "hf_tensors", "hf_weights"]

Block = tuple[int, int, int]


def _role(instance: Any, attribute: Any, value: Any) -> None:
    if value not in ROLES:
        raise TopologyError(f"HFWeight.role must be one of {', '.join(ROLES)}, got {show(value)}")


@attrs.frozen
class HFWeight:
    """One tensor of a Hugging Face checkpoint and where it lives in Megatron's weights.

    Args:
        name: the tensor's name in the checkpoint (``model.layers.0.self_attn.q_proj.weight``).
        shape: its shape, as ``save_pretrained`` writes it.
        itemsize: bytes per element.
        role: one of ``topology._architecture.roles.ROLES``.
        param: the Megatron :class:`Param` that holds it (``topology.weights``).
        blocks: ``(hf_row, param_row, rows)`` runs: rows ``hf_row ..`` of this tensor are rows
            ``param_row ..`` of ``param`` (dim 0; the other dims whole). They cover this tensor
            once; over all tensors of one ``param`` they cover it once.
    """

    name: str = attrs.field(validator=text)
    shape: tuple[int, ...]
    itemsize: int = attrs.field(validator=whole(1))
    role: str = attrs.field(validator=_role)
    param: Param
    blocks: tuple[Block, ...]

    @property
    def layer(self) -> int | None:
        """The transformer layer (None outside the layers)."""
        return self.param.layer

    @property
    def expert(self) -> int | None:
        """The routed expert (None for a dense weight)."""
        return self.param.expert

    @property
    def nbytes(self) -> int:
        """Bytes of the whole tensor."""
        size = self.itemsize
        for n in self.shape:
            size *= n
        return size


@attrs.frozen
class Rule:
    """How one Megatron weight is made of Hugging Face tensors: ``how`` and the pieces in order.

    ``pieces`` are (name template, role); templates take ``layer``, ``e`` (the expert),
    ``moe`` (the family's MoE block) and ``gate``/``up``/``down`` (its expert names).
    """

    how: str
    pieces: tuple[tuple[str, str], ...]


_AT = "model.layers.{layer}."


def _one(name: str, role: str) -> Rule:
    return Rule("whole", ((name, role),))


def _qkv(suffix: str) -> Rule:
    attn = _AT + "self_attn."
    return Rule("qkv", tuple((f"{attn}{x}_proj.{suffix}", x) for x in "qkv"))


def _fc1(at: str, names: tuple[str, str], roles: tuple[str, str]) -> Rule:
    return Rule("concat", tuple((f"{at}{n}.weight", r) for n, r in zip(names, roles, strict=True)))


_SELF = _AT + "self_attn."
_EXPERT = _AT + "{moe}.experts.{e}."
RULES = {
    "embedding.word_embeddings.weight": _one("model.embed_tokens.weight", "embedding"),
    "decoder.final_layernorm.weight": _one("model.norm.weight", "norm"),
    "output_layer.weight": _one("lm_head.weight", "lm_head"),
    "self_attention.linear_qkv.layer_norm_weight": _one(_AT + "input_layernorm.weight", "norm"),
    "input_layernorm.weight": _one(_AT + "input_layernorm.weight", "norm"),
    "self_attention.linear_qkv.weight": _qkv("weight"),
    "self_attention.linear_qkv.bias": _qkv("bias"),
    "self_attention.q_layernorm.weight": _one(_SELF + "q_norm.weight", "norm"),
    "self_attention.k_layernorm.weight": _one(_SELF + "k_norm.weight", "norm"),
    "self_attention.linear_q_down_proj.weight": _one(_SELF + "q_a_proj.weight", "q_a"),
    "self_attention.linear_q_up_proj.layer_norm_weight": _one(
        _SELF + "q_a_layernorm.weight", "norm"
    ),
    "self_attention.linear_q_up_proj.weight": _one(_SELF + "q_b_proj.weight", "q_b"),
    "self_attention.linear_kv_down_proj.weight": _one(_SELF + "kv_a_proj_with_mqa.weight", "kv_a"),
    "self_attention.linear_kv_up_proj.layer_norm_weight": _one(
        _SELF + "kv_a_layernorm.weight", "norm"
    ),
    "self_attention.linear_kv_up_proj.weight": _one(_SELF + "kv_b_proj.weight", "kv_b"),
    "self_attention.linear_proj.weight": _one(_SELF + "o_proj.weight", "o"),
    "mlp.linear_fc1.layer_norm_weight": _one(_AT + "post_attention_layernorm.weight", "norm"),
    "pre_mlp_layernorm.weight": _one(_AT + "post_attention_layernorm.weight", "norm"),
    "mlp.linear_fc1.weight": _fc1(_AT + "mlp.", ("gate_proj", "up_proj"), ("gate", "up")),
    "mlp.linear_fc2.weight": _one(_AT + "mlp.down_proj.weight", "down"),
    "mlp.router.weight": _one(_AT + "{moe}.gate.weight", "router"),
    "mlp.router.expert_bias": _one(_AT + "{moe}.gate.e_score_correction_bias", "router_bias"),
    "mlp.experts.local_experts.{e}.linear_fc1.weight": _fc1(
        _EXPERT, ("{gate}", "{up}"), ("expert_gate", "expert_up")
    ),
    "mlp.experts.local_experts.{e}.linear_fc2.weight": _one(
        _EXPERT + "{down}.weight", "expert_down"
    ),
    "mlp.shared_experts.linear_fc1.weight": _fc1(
        _AT + "mlp.shared_experts.", ("gate_proj", "up_proj"), ("shared_gate", "shared_up")
    ),
    "mlp.shared_experts.linear_fc2.weight": _one(
        _AT + "mlp.shared_experts.down_proj.weight", "shared_down"
    ),
}
"""Each Megatron weight (its name past ``decoder.layers.{layer}.``, the expert as ``{e}``) and
the Hugging Face tensors it is made of. Layernorms follow megatron-core's Transformer Engine
spec (see ``topology.weights``): ``input_layernorm`` is ``linear_qkv.layer_norm_weight`` (MLA:
``input_layernorm.weight``), ``post_attention_layernorm`` is ``mlp.linear_fc1.layer_norm_weight``
in a dense layer and ``pre_mlp_layernorm.weight`` in an MoE layer, MLA's ``q_a_layernorm`` and
``kv_a_layernorm`` the ``layer_norm_weight`` of the up-projections. The router's bias is
Megatron's ``router.expert_bias`` (Megatron-Bridge's mapping)."""


def _key(param: Param) -> str:
    """``param``'s row of :data:`RULES`: its name without its layer, its expert as ``{e}``."""
    key = param.name
    if param.layer is not None:
        key = key.removeprefix(f"decoder.layers.{param.layer}.")
    if param.expert is not None:
        key = key.replace(f".local_experts.{param.expert}.", ".local_experts.{e}.")
    return key


def _concat(model: Architecture, param: Param, count: int) -> list[tuple[int, tuple[Block, ...]]]:
    """Each piece's rows and blocks when ``param`` stacks ``count`` pieces (its parts)."""
    sizes = param.part_sizes if count > 1 else (param.shape[0],)
    starts = [sum(sizes[:i]) for i in range(count)]
    return [(size, ((0, start, size),)) for size, start in zip(sizes, starts, strict=True)]


def _interleave(
    model: Architecture, param: Param, count: int
) -> list[tuple[int, tuple[Block, ...]]]:
    """q, k and v's rows and blocks in Megatron's per-query-group interleave."""
    d, groups = model.head_dim, model.kv_heads
    q = model.heads // groups * d
    stride = q + 2 * d
    return [
        (groups * q, tuple((g * q, g * stride, q) for g in range(groups))),
        (groups * d, tuple((g * d, g * stride + q, d) for g in range(groups))),
        (groups * d, tuple((g * d, g * stride + q + d, d) for g in range(groups))),
    ]


_HOW = {"whole": _concat, "concat": _concat, "qkv": _interleave}
"""Each :attr:`Rule.how`: the rows and blocks of every piece of a Megatron weight."""


def hf_weights(model: str | Architecture, itemsize: int = 2) -> list[HFWeight]:
    """Every tensor of ``model``'s Hugging Face checkpoint, in Megatron's module order.

    Args:
        model: a preset name or an :class:`Architecture` (``topology.read_model_config``
            reads one from a ``config.json``).
        itemsize: bytes per element (2 for bf16).

    Returns:
        One :class:`HFWeight` per checkpoint tensor: its name and shape as ``save_pretrained``
        writes them, its role, and the rows of its Megatron :class:`Param` it fills.

    Raises:
        TopologyError: an unknown preset.

    >>> from topology import hf_weights
    >>> ws = hf_weights("llama-7b")
    >>> len(ws), ws[2].name, ws[2].shape, ws[2].role
    (291, 'model.layers.0.self_attn.q_proj.weight', (4096, 4096), 'q')
    >>> ws[2].param.name, ws[2].blocks[:2]
    ('decoder.layers.0.self_attention.linear_qkv.weight', ((0, 0, 128), (128, 384, 128)))
    """
    found = architecture_of(model)
    check_size("itemsize", itemsize)
    with bulk():  # tens of thousands of acyclic records: no cyclic collection while made
        return list(_listed(found, itemsize))


@functools.lru_cache(maxsize=8)
def _listed(found: Architecture, itemsize: int) -> tuple[HFWeight, ...]:
    """:func:`hf_weights` of a checked model, made once per (model, itemsize)."""
    kinds = _kinds(found)
    listed: list[HFWeight] = []
    for param in weights(found, itemsize):
        listed += _made(found, param, kinds)
    return tuple(listed)


def hf_tensors(model: Architecture, param: Param) -> list[HFWeight]:
    """The Hugging Face tensors one Megatron weight of a checked ``model`` is made of
    (``param``: one of ``topology.weights(model)``): :func:`hf_weights`'s tensors of it, made
    without the others.

    >>> from topology import Architecture, weights
    >>> llama = Architecture(1, 8, 16, 32, 4, 2, 2)
    >>> [w.name for w in hf_tensors(llama, weights(llama)[2])]
    ['model.layers.0.self_attn.q_proj.weight', 'model.layers.0.self_attn.k_proj.weight', \
'model.layers.0.self_attn.v_proj.weight']
    """
    return _made(model, param, _kinds(model))


Kind = tuple[tuple[str, tuple[int, ...], tuple[Block, ...]], ...]
"""The role, shape and blocks of each tensor a Megatron weight is made of."""


def hf_kind(model: Architecture, param: Param) -> Kind:
    """The role, shape and blocks of each tensor of :func:`hf_tensors` (equal for every weight
    of one kind: its row of :data:`RULES`, shape and parts), without making the tensors.

    >>> from topology import Architecture, weights
    >>> llama = Architecture(1, 8, 16, 32, 4, 2, 2)
    >>> hf_kind(llama, weights(llama)[2])[1]
    ('k', (4, 8), ((0, 4, 2), (2, 12, 2)))
    """
    key = (_key(param), param.shape, param.parts, param.itemsize)
    rows = _kind_rows(model)
    found = rows.get(key)
    if found is None:
        made = _made(model, param, _kinds(model))
        found = rows[key] = tuple([(h.role, h.shape, h.blocks) for h in made])
    return found


@functools.lru_cache(maxsize=8)
def _kind_rows(found: Architecture) -> dict[tuple[Any, ...], Kind]:
    """:func:`hf_kind` per kind of weight of a model (see :func:`_kinds`)."""
    return {}


@functools.lru_cache(maxsize=8)
def _kinds(found: Architecture) -> dict[tuple[Any, ...], list[HFWeight]]:
    """Per kind of weight of a model (its row of :data:`RULES`, shape, parts and itemsize):
    the tensors of the first weight of it made."""
    return {}


def _made(
    found: Architecture, param: Param, kinds: dict[tuple[Any, ...], list[HFWeight]]
) -> list[HFWeight]:
    """The tensors of ``param``: those of a kind after the first made are the first's siblings
    with their own names and weight (the same roles, shapes and blocks)."""
    family = FAMILIES[found.family]
    gate, up, down = family.expert_names
    key = _key(param)
    rule = RULES[key]
    names = [
        template.format(
            layer=param.layer, e=param.expert, moe=family.moe_block, gate=gate, up=up, down=down
        )
        for template, _ in rule.pieces
    ]
    kind = (key, param.shape, param.parts, param.itemsize)
    first = kinds.get(kind)
    if first is not None:
        return [sibling(h, name=n, param=param) for h, n in zip(first, names, strict=True)]
    shapes = _HOW[rule.how](found, param, len(rule.pieces))
    made = [
        HFWeight(name, (rows, *param.shape[1:]), param.itemsize, role, param, blocks)
        for name, (_, role), (rows, blocks) in zip(names, rule.pieces, shapes, strict=True)
    ]
    kinds[kind] = made
    return made
