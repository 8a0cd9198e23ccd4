"""The engines' sharding rules: which slices of a Hugging Face tensor each rank holds (private).

One row of :data:`RULES` per (engine, attention kind, role) says how the engine loads a Hugging
Face tensor of that role: the engine's layer class, the local tensor it lands in (``param``; fused
tensors such as ``qkv_proj`` hold several roles, in ``parts`` order), the cut (a key of
:data:`CUTS`), the group it is cut over (a key of ``GROUPS``: its size and index come from the
:class:`~topology._engine.layout.EngineLayout`), the count that group must divide (a key of
:data:`UNITS`), and whether it is a routed expert's tensor (then the expert-parallel group picks
the rank's experts, :data:`PLACEMENTS`). :func:`holding` applies one row to one rank: the
:class:`Holding` lists the pieces, each a box of the Hugging Face tensor and the box of the local
tensor it is copied to. Each cut transcribes the engine's ``weight_loader``; the tests and
``docs/engines.md`` cite the lines (vLLM 0.33.0, SGLang 0.5.23).

Algorithm (the cuts; ``n`` ranks in the group, this rank's index ``i``):
    ``rows``: dim 0 in ``n`` equal blocks, block ``i`` (``ColumnParallelLinear``).
    ``kv_rows``: a head block of ``max(1, kv / n)`` heads starting at head ``i * kv // n``
    (``QKVParallelLinear``: with ``n > kv`` each KV head is held by ``n / kv`` ranks).
    ``cols``: dim 1 in ``n`` equal blocks (``RowParallelLinear``; a 1-dim bias is held whole).
    ``vocab``: rows padded to ``p = ceil(rows / 64) * 64``; rank ``i`` holds rows
    ``[min(i * p / n, rows), min((i + 1) * p / n, rows))`` at the top of a ``p / n``-row tensor
    (``VocabParallelEmbedding``/``ParallelLMHead``: padding rows receive nothing).
    ``whole``: the whole tensor (replicated).

>>> from topology._architecture.architecture import Architecture
>>> from topology._engine.layout import EngineLayout
>>> llama = Architecture(2, 64, 100, 128, heads=8, kv_heads=2, head_dim=8)
>>> vllm = EngineLayout("vllm", tp=8)
>>> k = holding(vllm, "k", (16, 64), llama, rank=5)
>>> k.param, k.shape, k.pieces[0].source, k.pieces[0].target
('qkv_proj', (24, 64), ((8, 16), (0, 64)), ((8, 16), (0, 64)))
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from .._architecture.architecture import Architecture
from .._architecture.roles import ROLES
from .._args import check_index, divisors, format_choices, show
from .._errors import TopologyError
from .._fields import LIMIT
from .layout import EngineLayout

__all__ = [
    "CUTS",
    "PAD_TO",
    "PLACEMENTS",
    "RULES",
    "UNITS",
    "Holding",
    "Piece",
    "Rule",
    "holding",
    "padded_vocab",
    "rule_of",
]

PAD_TO = 64
"""vLLM's and SGLang's ``DEFAULT_VOCAB_PADDING_SIZE``: the vocabulary is padded to a multiple."""

Box = tuple[tuple[int, int], ...]
"""``(start, stop)`` per dim of a tensor."""


@attrs.frozen
class Piece:
    """A box of a Hugging Face tensor and the box of the engine's local tensor it is copied to.

    The target has the source's extents, after one leading dim of extent 1 for a routed
    expert's tensor (the rank's local expert index in ``w13_weight``/``w2_weight``).
    """

    source: Box
    target: Box

    @property
    def shape(self) -> tuple[int, ...]:
        """The source box's extents."""
        return tuple(stop - start for start, stop in self.source)


@attrs.frozen
class Holding:
    """What one engine rank holds of one Hugging Face tensor.

    ``param`` is the engine's local tensor (``qkv_proj``, ``experts.w13_weight``; empty: the
    Hugging Face name itself), ``shape`` its local shape (all its fused parts, padding
    included), ``pieces`` what this tensor contributes to it (none: the rank holds none of it).
    """

    param: str
    shape: tuple[int, ...]
    pieces: tuple[Piece, ...]


@attrs.frozen
class _Part:
    """One tensor cut for one rank: its local shape and the box it holds (None: nothing)."""

    shape: tuple[int, ...]
    source: Box | None


def _full(shape: tuple[int, ...]) -> Box:
    return tuple((0, n) for n in shape)


def _with(box: Box, dim: int, span: tuple[int, int]) -> Box:
    return (*box[:dim], span, *box[dim + 1 :])


def _resized(shape: tuple[int, ...], dim: int, size: int) -> tuple[int, ...]:
    return (*shape[:dim], size, *shape[dim + 1 :])


@attrs.frozen
class _Cut:
    """What a cut needs: the tensor, its role and layer (for messages), the group's size and
    this rank's index in it, the count the group must divide, and the dim being cut."""

    engine: str
    role: str
    layer: str
    shape: tuple[int, ...]
    size: int
    index: int
    unit: str
    count: int
    dim: int = 0

    def refuse(self, rule: str, valid: list[int]) -> TopologyError:
        return TopologyError(
            f"engine={self.engine}: {self.role} ({self.layer}) {rule}; "
            f"valid group sizes: {format_choices(valid)}"
        )

    def split(self) -> int:
        """The rows of one of ``size`` blocks of a dim made of ``count`` units."""
        dim = 0 if len(self.shape) == 1 else self.dim
        if self.shape[dim] % self.count:
            raise TopologyError(
                f"engine={self.engine}: {self.role} shape {self.shape} dim {dim} "
                f"({self.shape[dim]}) is not a multiple of its {self.count} {self.unit}; "
                "give the tensor's global shape"
            )
        if self.count % self.size:
            raise self.refuse(
                f"is cut over {self.size} ranks, which must divide its {self.count} {self.unit}",
                divisors(self.count),
            )
        return self.shape[dim] // self.size


def _whole(cut: _Cut) -> _Part:
    return _Part(cut.shape, _full(cut.shape))


def _rows(cut: _Cut) -> _Part:
    block = cut.split()
    span = (cut.index * block, (cut.index + 1) * block)
    return _Part(_resized(cut.shape, 0, block), _with(_full(cut.shape), 0, span))


def _cols(cut: _Cut) -> _Part:
    if len(cut.shape) == 1:
        return _whole(cut)  # a row-parallel bias is added once, held whole by every rank
    block = attrs.evolve(cut, dim=1).split()
    span = (cut.index * block, (cut.index + 1) * block)
    return _Part(_resized(cut.shape, 1, block), _with(_full(cut.shape), 1, span))


def _kv_rows(cut: _Cut) -> _Part:
    heads, ranks = cut.count, cut.size
    if (ranks % heads if ranks >= heads else heads % ranks) or cut.shape[0] % heads:
        valid = sorted(set(divisors(heads)) | {heads * d for d in range(1, 9)})
        raise cut.refuse(
            f"is cut over {ranks} ranks, which must divide or be a multiple of its {heads} "
            f"KV heads (shape {cut.shape})",
            valid,
        )
    per_head = cut.shape[0] // heads
    first, count = cut.index * heads // ranks, max(1, heads // ranks)
    span = (first * per_head, (first + count) * per_head)
    return _Part(_resized(cut.shape, 0, count * per_head), _with(_full(cut.shape), 0, span))


def padded_vocab(rows: int) -> int:
    """``rows`` rounded up to a multiple of :data:`PAD_TO` (vLLM's ``pad_vocab_size``).

    >>> padded_vocab(32000), padded_vocab(32001), padded_vocab(151936)
    (32000, 32064, 151936)
    """
    return -(-rows // PAD_TO) * PAD_TO


def _vocab(cut: _Cut) -> _Part:
    rows = cut.shape[0]
    padded = padded_vocab(rows)
    if padded % cut.size:
        raise cut.refuse(
            f"pads its {rows} rows to {padded} (a multiple of {PAD_TO}), which must divide "
            f"into {cut.size} equal blocks",
            divisors(padded),
        )
    block = padded // cut.size
    start, stop = min(cut.index * block, rows), min((cut.index + 1) * block, rows)
    source = _with(_full(cut.shape), 0, (start, stop)) if start < stop else None
    return _Part(_resized(cut.shape, 0, block), source)


CUTS: dict[str, Callable[[_Cut], _Part]] = {
    "whole": _whole,
    "rows": _rows,
    "kv_rows": _kv_rows,
    "cols": _cols,
    "vocab": _vocab,
}
"""The cuts a rule may name (see the module's Algorithm)."""

UNITS: dict[str, Callable[[Architecture, tuple[int, ...]], int]] = {
    "heads": lambda model, shape: model.heads,
    "KV heads": lambda model, shape: model.kv_heads,
    "rows": lambda model, shape: shape[0],
    "columns": lambda model, shape: shape[-1],
}
"""What a cut's group must divide: the model's heads, its KV heads, or the cut dim itself."""

_PART_ROWS: dict[str, Callable[[Architecture], int]] = {
    "q": lambda model: model.heads * model.head_dim,
    "k": lambda model: model.kv_heads * model.head_dim,
    "v": lambda model: model.kv_heads * model.head_dim,
    "q_a": lambda model: _mla(model)[0],
    "kv_a": lambda model: _mla(model)[1] + _mla(model)[3],
}
"""Dim 0 of a fused part that differs from its siblings', from the model (``q_a``: the query
LoRA rank; ``kv_a``: the KV LoRA rank plus the rope head dim); other parts share one shape."""


def _mla(model: Architecture) -> tuple[int, int, int, int, int]:
    assert model.mla is not None  # an MLA rule is chosen only for an MLA model
    return model.mla


@attrs.frozen
class Rule:
    """One row of :data:`RULES`: how an engine loads a Hugging Face tensor of one role.

    ``layer`` is the engine's class; ``param`` the local tensor (empty: the Hugging Face name);
    ``cut`` a key of :data:`CUTS`; ``group`` a key of ``GROUPS`` (None for ``whole``); ``unit``
    a key of :data:`UNITS`; ``parts`` the roles fused into ``param`` in order (empty: alone);
    ``expert`` True for a routed expert's tensor.
    """

    layer: str
    param: str
    cut: str
    group: str | None = None
    unit: str = "rows"
    parts: tuple[str, ...] = ()
    expert: bool = False


_QKV = ("q", "k", "v")
_MERGED = "MergedColumnParallelLinear"
_REPLICATED_MERGED = "MergedColumnParallelLinear(disable_tp)"


def _vllm_like(qkv_a: str) -> dict[str, Rule]:
    """The rules vLLM and SGLang share (SGLang copies vLLM's layers; ``qkv_a`` is the name of
    their fused, replicated MLA down-projection)."""
    experts = ("expert_gate", "expert_up")
    shared = ("shared_gate", "shared_up")
    return {
        "embedding": Rule("VocabParallelEmbedding", "embed_tokens", "vocab", "embedding"),
        "lm_head": Rule("ParallelLMHead", "lm_head", "vocab", "lm_head"),
        "norm": Rule("RMSNorm", "", "whole"),
        "q": Rule("QKVParallelLinear", "qkv_proj", "rows", "attention", "heads", _QKV),
        "k": Rule("QKVParallelLinear", "qkv_proj", "kv_rows", "attention", "KV heads", _QKV),
        "v": Rule("QKVParallelLinear", "qkv_proj", "kv_rows", "attention", "KV heads", _QKV),
        "o": Rule("RowParallelLinear", "o_proj", "cols", "attention", "heads"),
        "gate": Rule(_MERGED, "gate_up_proj", "rows", "dense", "rows", ("gate", "up")),
        "up": Rule(_MERGED, "gate_up_proj", "rows", "dense", "rows", ("gate", "up")),
        "down": Rule("RowParallelLinear", "down_proj", "cols", "dense", "columns"),
        "router": Rule("ReplicatedLinear", "gate", "whole"),
        "router_bias": Rule("ReplicatedLinear", "gate.e_score_correction_bias", "whole"),
        "expert_gate": Rule(
            "FusedMoE", "experts.w13_weight", "rows", "expert_tp", "rows", experts, expert=True
        ),
        "expert_up": Rule(
            "FusedMoE", "experts.w13_weight", "rows", "expert_tp", "rows", experts, expert=True
        ),
        "expert_down": Rule(
            "FusedMoE", "experts.w2_weight", "cols", "expert_tp", "columns", expert=True
        ),
        "shared_gate": Rule(
            _MERGED, "shared_experts.gate_up_proj", "rows", "dense", "rows", shared
        ),
        "shared_up": Rule(_MERGED, "shared_experts.gate_up_proj", "rows", "dense", "rows", shared),
        "shared_down": Rule(
            "RowParallelLinear", "shared_experts.down_proj", "cols", "dense", "columns"
        ),
        "q_a": Rule(_REPLICATED_MERGED, qkv_a, "whole", parts=("q_a", "kv_a")),
        "kv_a": Rule(_REPLICATED_MERGED, qkv_a, "whole", parts=("q_a", "kv_a")),
        "q_b": Rule("ColumnParallelLinear", "q_b_proj", "rows", "attention", "heads"),
        "kv_b": Rule("ColumnParallelLinear", "kv_b_proj", "rows", "attention", "heads"),
    }


def _mla_rules(rules: dict[str, Rule]) -> dict[str, Rule]:
    """Multi-head latent attention: no k/v, and a query without LoRA is a plain column split."""
    mla = {role: rule for role, rule in rules.items() if role not in ("k", "v")}
    mla["q"] = Rule("ColumnParallelLinear", "q_proj", "rows", "attention", "heads")
    return mla


def _gqa_rules(rules: dict[str, Rule]) -> dict[str, Rule]:
    """Grouped-query attention: no latent-attention projections."""
    latent = ("q_a", "q_b", "kv_a", "kv_b")
    return {role: rule for role, rule in rules.items() if role not in latent}


_VLLM = _vllm_like("fused_qkv_a_proj")
_SGLANG = _vllm_like("fused_qkv_a_proj_with_mqa")
_HF = {role: Rule("load_weights", "", "whole") for role in ROLES}

RULES: dict[tuple[str, str], dict[str, Rule]] = {
    ("vllm", "gqa"): _gqa_rules(_VLLM),
    ("vllm", "mla"): _mla_rules(_VLLM),
    ("sglang", "gqa"): _gqa_rules(_SGLANG),
    ("sglang", "mla"): _mla_rules(_SGLANG),
    ("hf", "gqa"): _gqa_rules(_HF),
    ("hf", "mla"): {role: rule for role, rule in _HF.items() if role not in ("k", "v")},
}
"""Each engine's rule per role, for grouped-query (``gqa``) and latent (``mla``) attention."""


def _vllm_experts(experts: int, ranks: int, index: int, placement: str) -> range:
    """vLLM's ``determine_expert_map``: ``experts // ranks`` each, the first ``experts % ranks``
    ranks one more; ``linear`` a contiguous block, ``round_robin`` every ``ranks``-th expert."""
    base, extra = divmod(experts, ranks)
    if placement == "round_robin":
        return range(index, experts, ranks)
    start = index * base + min(index, extra)
    return range(start, start + base + (index < extra))


def _even_experts(experts: int, ranks: int, index: int, placement: str) -> range:
    """SGLang's ``_map_global_expert_id_to_local_expert_id``: ``experts / ranks`` contiguous."""
    if experts % ranks:
        raise TopologyError(
            f"engine=sglang: ep({ranks}) must divide the {experts} experts (each ep rank holds "
            f"an equal block); valid ep: {format_choices(divisors(experts))}"
        )
    block = experts // ranks
    return range(index * block, (index + 1) * block)


PLACEMENTS: dict[str, Callable[[int, int, int, str], range]] = {
    "vllm": _vllm_experts,
    "sglang": _even_experts,
}
"""How each engine that cuts experts places them on its expert-parallel ranks: (experts, ranks,
index, placement) -> the rank's experts in local order (``hf`` holds every expert whole)."""


def rule_of(layout: EngineLayout, model: Architecture, role: str) -> Rule:
    """The rule ``layout``'s engine applies to a Hugging Face tensor of ``role``.

    Raises:
        TopologyError: ``role`` is not one of ``ROLES``, or the model has no tensor of it
            (``k`` of a latent-attention model, ``q_a`` of a grouped-query one).
    """
    if role not in ROLES:
        raise TopologyError(f"role must be one of {', '.join(ROLES)}, got {show(role)}")
    attention = "mla" if model.mla is not None else "gqa"
    rules = RULES[(layout.engine, attention)]
    if role not in rules:
        kind = "latent (MLA)" if attention == "mla" else "grouped-query"
        raise TopologyError(
            f"a model with {kind} attention has no {role} tensor; its roles: {', '.join(rules)}"
        )
    return rules[role]


def _check_shape(shape: object) -> tuple[int, ...]:
    if (
        type(shape) is not tuple
        or not 1 <= len(shape) <= 2
        or not all(type(n) is int and 1 <= n <= LIMIT for n in shape)
    ):
        raise TopologyError(
            f"shape must be a tuple of 1 or 2 positive ints (a weight or its bias), got "
            f"{show(shape)}; give the Hugging Face tensor's global shape"
        )
    return shape


def _part(
    layout: EngineLayout, model: Architecture, role: str, shape: tuple[int, ...], rank: int
) -> _Part:
    rule = rule_of(layout, model, role)
    size, index = layout.group(rule.group, rank) if rule.group else (1, 0)
    cut = _Cut(
        layout.engine, role, rule.layer, shape, size, index, rule.unit,
        UNITS[rule.unit](model, shape),
    )  # fmt: skip
    return CUTS[rule.cut](cut)


def _sibling_shape(
    model: Architecture, role: str, sibling: str, shape: tuple[int, ...]
) -> tuple[int, ...]:
    """The global shape of ``sibling``, a part fused with ``role`` (``role`` itself: ``shape``,
    checked against the model when the model sets its rows)."""
    rows = _PART_ROWS.get(sibling)
    if rows is None:
        return shape
    if role == sibling and rows(model) != shape[0]:
        raise TopologyError(
            f"{role} shape {shape} must have {rows(model)} rows (dim 0), as the model's heads "
            "and head dims give; give the model the tensor belongs to"
        )
    return _resized(shape, 0, rows(model))


def holding(
    layout: EngineLayout,
    role: str,
    shape: tuple[int, ...],
    model: Architecture,
    rank: int,
    expert: int | None = None,
) -> Holding:
    """What engine rank ``rank`` holds of a Hugging Face tensor of ``role`` and global ``shape``.

    Args:
        layout: the engine and its sizes.
        role: the tensor's role (one of ``ROLES``; a bias has its weight's role).
        shape: the tensor's global shape (2 dims for a weight, 1 for a bias or norm).
        model: the model (its heads, KV heads, head dim, experts and MLA sizes).
        rank: the engine rank, in ``range(layout.world_size)``.
        expert: for a routed expert's tensor, its expert index; None otherwise.

    Returns:
        The local tensor the rank copies it into, that tensor's shape, and the pieces (none when
        the rank holds none of it: another rank's expert, a vocabulary block of padding only).

    Raises:
        TopologyError: a bad role, shape, rank or expert, or a size the engine cannot cut the
            tensor into (the message names the count the group must divide and valid sizes).

    >>> from topology._architecture.architecture import Architecture
    >>> mixtral = Architecture(1, 8, 64, 16, 4, 2, 2, experts=8, top_k=2, moe_ffn=16)
    >>> ep = EngineLayout("vllm", tp=2, dp=2, ep=4)
    >>> [len(holding(ep, "expert_up", (16, 8), mixtral, rank, expert=5).pieces)
    ...  for rank in range(4)]
    [0, 0, 1, 0]
    >>> holding(ep, "expert_up", (16, 8), mixtral, 2, expert=5)
    Holding(param='experts.w13_weight', shape=(2, 32, 8), pieces=(Piece(source=((0, 16), (0, 8)), \
target=((1, 2), (16, 32), (0, 8))),))
    """
    shape = _check_shape(shape)
    rank = check_index("rank", rank, at_most=layout.world_size - 1, why="the engine's last rank")
    rule = rule_of(layout, model, role)
    _check_expert(model, role, expert)
    fused = rule.parts or (role,)
    parts = [
        _part(
            layout,
            model,
            part,
            _sibling_shape(model, role, part, shape) if rule.parts else shape,
            rank,
        )
        for part in fused
    ]
    mine = fused.index(role)
    own, offset = parts[mine], sum(part.shape[0] for part in parts[:mine])
    local_shape = _resized(own.shape, 0, sum(part.shape[0] for part in parts))
    target = None if own.source is None else _at(own.source, offset)
    if rule.expert:
        return _expert_holding(layout, model, rule, rank, expert, local_shape, own.source, target)
    pieces = () if own.source is None or target is None else (Piece(own.source, target),)
    return Holding(rule.param, local_shape, pieces)


def _at(source: Box, offset: int) -> Box:
    """A box of ``source``'s extents at the top of the local tensor, ``offset`` rows down."""
    return tuple(
        (offset if dim == 0 else 0, stop - start + (offset if dim == 0 else 0))
        for dim, (start, stop) in enumerate(source)
    )


_EXPERT_ROLES = ("expert_gate", "expert_up", "expert_down")


def _check_expert(model: Architecture, role: str, expert: object) -> None:
    """An expert index for a routed expert's tensor (in range), none for any other."""
    if role not in _EXPERT_ROLES:
        if expert is not None:
            raise TopologyError(
                f"role {role} is not a routed expert's, got expert={show(expert)}; give expert "
                f"only for {', '.join(_EXPERT_ROLES)}"
            )
        return
    if expert is None:
        raise TopologyError(
            f"a routed expert's tensor needs its expert index, got none; give expert in "
            f"range({model.experts})"
        )
    check_index("expert", expert, at_most=model.experts - 1, why="the model's last expert")


def _expert_holding(
    layout: EngineLayout,
    model: Architecture,
    rule: Rule,
    rank: int,
    expert: int | None,
    local_shape: tuple[int, ...],
    source: Box | None,
    target: Box | None,
) -> Holding:
    assert expert is not None  # _check_expert gave an expert's tensor its index
    ranks, index = layout.group("expert_ep", rank)
    mine = PLACEMENTS[layout.engine](model.experts, ranks, index, layout.placement)
    shape = (len(mine), *local_shape)
    if expert not in mine or source is None or target is None:
        return Holding(rule.param, shape, ())
    slot = mine.index(expert)
    return Holding(rule.param, shape, (Piece(source, ((slot, slot + 1), *target)),))
