"""EngineLayout: a generation engine, its parallel sizes and each rank's coordinates (private).

A refit's destination is an engine's ranks. Each engine lays its ranks out its own way; one row of
:data:`ENGINES` per engine holds every fact about it: which keys it takes, the checks between
them, its world size and the groups its weights are cut over (:data:`GROUPS`).

- ``vllm``: ``tp`` ranks per replica, ``dp`` replicas, rank ``= dp_rank * tp + tp_rank`` (tp
  varies fastest: vLLM's ``initialize_model_parallel`` reshapes the ranks as
  ``ExternalDP x DP x PP x PCP x TP``). Its MoE layers span every rank: without expert
  parallelism they cut each expert over all ``tp * dp`` ranks; ``enable_expert_parallel`` makes
  the expert-parallel group every rank, so ``ep`` is 1 or ``tp * dp``. ``placement`` is vLLM's
  ``expert_placement_strategy`` (``linear`` or ``round_robin``).
- ``sglang``: the same rank order; ``ep`` (``--ep-size``) divides ``tp`` and the experts are cut
  over ``tp / ep`` inside each replica. ``dp_attention`` (``--enable-dp-attention``) puts the
  ``dp`` attention replicas inside the ``tp`` ranks: the world is ``tp`` ranks, attention and
  the embedding are cut over ``tp / dp``.
- ``hf``: ``dp`` ranks, each holding whole tensors (what ``load_weights`` consumes).
- ``megatron``: the default destination, laid out by a ``Topology`` rather than here.

>>> layout = EngineLayout.from_string("engine=vllm,tp=4,dp=2,ep=8")
>>> layout.world_size, str(layout), layout.coord(5)
(8, 'engine=vllm,tp=4,dp=2,ep=8', EngineCoord(tp=1, dp=1))
>>> layout.group("expert_ep", 5), layout.group("attention", 5)
((8, 5), (4, 1))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from .._args import MAX_WORLD_SIZE, check_index, check_size, divisors, format_choices, show
from .._errors import TopologyError
from .._fields import flag, whole

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "GROUPS",
    "KEYS",
    "PLACEMENTS",
    "Engine",
    "EngineCoord",
    "EngineLayout",
]

DEFAULT_ENGINE = "megatron"
"""The destination when none is named: Megatron's own layout, given as a ``Topology``."""

PLACEMENTS = ("linear", "round_robin")
"""vLLM's expert placements under expert parallelism: rank ``i`` of ``ep`` holds a contiguous
block of experts (``linear``) or experts ``i, i + ep, i + 2 * ep, ...`` (``round_robin``)."""

KEYS = ("engine", "tp", "dp", "ep", "placement", "dp_attention")
"""The keys of an engine layout string, in the order ``str`` writes them."""

GROUPS = ("attention", "dense", "embedding", "lm_head", "expert_tp", "expert_ep")
"""The groups an engine cuts its weights over: the attention projections, the dense MLP and
shared experts, the input embedding, the output layer, and an expert's tensor-parallel and
expert-parallel groups. :meth:`EngineLayout.group` gives a rank's ``(size, index)`` in each."""

Group = Callable[["EngineLayout", int], tuple[int, int]]


@attrs.frozen
class EngineCoord:
    """A rank's coordinates: its tensor-parallel rank and its replica (``dp``) index.

    Under SGLang's ``dp_attention`` the replica is the attention replica and ``tp`` the rank in
    the whole tp group.
    """

    tp: int
    dp: int


@attrs.frozen
class Engine:
    """One row of :data:`ENGINES`: an engine's name, what it checks and how it groups ranks.

    ``check`` raises on a layout the engine refuses; ``world`` is its number of ranks;
    ``coord`` a rank's coordinates; ``groups`` a rank's ``(size, index)`` in each of
    :data:`GROUPS`; ``order`` says which coordinate varies fastest.
    """

    name: str
    check: Callable[[EngineLayout], None]
    world: Callable[[EngineLayout], int]
    coord: Callable[[EngineLayout, int], EngineCoord]
    groups: dict[str, Group]
    order: str


def _refuse(layout: EngineLayout, rule: str, valid: list[int]) -> TopologyError:
    return TopologyError(
        f"engine={layout.engine}: {rule}; valid: {format_choices(valid)}"
        if valid
        else f"engine={layout.engine}: {rule}"
    )


def _no_sglang_keys(layout: EngineLayout) -> None:
    if layout.dp_attention:
        raise TopologyError(
            f"engine={layout.engine} takes no dp_attention (SGLang's --enable-dp-attention); "
            "drop it or use engine=sglang"
        )


def _linear_only(layout: EngineLayout) -> None:
    if layout.placement != "linear":
        raise TopologyError(
            f"engine={layout.engine} places experts linearly (a contiguous block per ep rank), "
            f"got placement={layout.placement}; drop placement or use engine=vllm"
        )


def _check_vllm(layout: EngineLayout) -> None:
    _no_sglang_keys(layout)
    every = layout.tp * layout.dp
    if layout.ep not in (1, every):
        raise _refuse(
            layout,
            f"ep({layout.ep}) must be 1 or tp({layout.tp}) * dp({layout.dp}) = {every} "
            "(enable_expert_parallel puts every rank in the expert-parallel group)",
            sorted({1, every}),
        )
    if layout.placement != "linear" and layout.ep == 1:
        raise TopologyError(
            f"engine=vllm: placement={layout.placement} needs expert parallelism, got ep(1); "
            f"give ep={every} or drop placement"
        )


def _check_sglang(layout: EngineLayout) -> None:
    _linear_only(layout)
    if layout.tp % layout.ep:
        raise _refuse(
            layout,
            f"ep({layout.ep}) must divide tp({layout.tp}) (--ep-size cuts the tp ranks)",
            divisors(layout.tp),
        )
    if layout.dp_attention and layout.tp % layout.dp:
        raise _refuse(
            layout,
            f"with dp_attention, dp({layout.dp}) must divide tp({layout.tp}) (the attention "
            "replicas share the tp ranks)",
            divisors(layout.tp),
        )


def _check_hf(layout: EngineLayout) -> None:
    _no_sglang_keys(layout)
    _linear_only(layout)
    if (layout.tp, layout.ep) != (1, 1):
        raise TopologyError(
            f"engine=hf holds whole tensors on each of dp ranks, got tp({layout.tp}) and "
            f"ep({layout.ep}); give only dp (its world size)"
        )


def _replicas(layout: EngineLayout) -> int:
    return layout.tp * layout.dp


def _tp_fastest(layout: EngineLayout, rank: int) -> EngineCoord:
    return EngineCoord(tp=rank % layout.tp, dp=rank // layout.tp)


def _sglang_world(layout: EngineLayout) -> int:
    return layout.tp if layout.dp_attention else layout.tp * layout.dp


def _sglang_coord(layout: EngineLayout, rank: int) -> EngineCoord:
    if layout.dp_attention:
        return EngineCoord(tp=rank, dp=rank // (layout.tp // layout.dp))
    return _tp_fastest(layout, rank)


def _tp(layout: EngineLayout, rank: int) -> tuple[int, int]:
    return layout.tp, rank % layout.tp


def _one(layout: EngineLayout, rank: int) -> tuple[int, int]:
    return 1, 0


def _every_rank(layout: EngineLayout, rank: int) -> tuple[int, int]:
    return layout.tp * layout.dp, rank


def _vllm_expert_tp(layout: EngineLayout, rank: int) -> tuple[int, int]:
    return _one(layout, rank) if layout.ep > 1 else _every_rank(layout, rank)


def _vllm_expert_ep(layout: EngineLayout, rank: int) -> tuple[int, int]:
    return _every_rank(layout, rank) if layout.ep > 1 else _one(layout, rank)


def _sglang_attention(layout: EngineLayout, rank: int) -> tuple[int, int]:
    if layout.dp_attention:
        size = layout.tp // layout.dp
        return size, rank % size
    return _tp(layout, rank)


def _sglang_expert_tp(layout: EngineLayout, rank: int) -> tuple[int, int]:
    size = layout.tp // layout.ep
    return size, rank % layout.tp % size


def _sglang_expert_ep(layout: EngineLayout, rank: int) -> tuple[int, int]:
    size = layout.tp // layout.ep
    return layout.ep, rank % layout.tp // size


def _megatron(layout: EngineLayout) -> None:
    raise TopologyError(
        "engine=megatron is the default destination, laid out by a Topology; give its fields "
        "without engine= (tp=8,pp=2,...) or name one of vllm, sglang, hf"
    )


ENGINES = {
    row.name: row
    for row in (
        Engine(DEFAULT_ENGINE, _megatron, _replicas, _tp_fastest, {}, "a Topology's order"),
        Engine(
            "vllm",
            _check_vllm,
            _replicas,
            _tp_fastest,
            {
                "attention": _tp,
                "dense": _tp,
                "embedding": _tp,
                "lm_head": _tp,
                "expert_tp": _vllm_expert_tp,
                "expert_ep": _vllm_expert_ep,
            },
            "tp fastest, then dp",
        ),
        Engine(
            "sglang",
            _check_sglang,
            _sglang_world,
            _sglang_coord,
            {
                "attention": _sglang_attention,
                "dense": _tp,
                "embedding": _sglang_attention,
                "lm_head": _tp,
                "expert_tp": _sglang_expert_tp,
                "expert_ep": _sglang_expert_ep,
            },
            "tp fastest, then dp (with dp_attention: the world is the tp ranks)",
        ),
        Engine(
            "hf",
            _check_hf,
            _replicas,
            _tp_fastest,
            dict.fromkeys(GROUPS, _one),
            "one rank per dp replica",
        ),
    )
}
"""Every engine a layout string may name, with its checks, world size and groups."""


def _engine(instance: Any, attribute: Any, value: Any) -> None:
    if value not in ENGINES:
        raise TopologyError(
            f"engine must be one of {', '.join(ENGINES)}, got {show(value)}; e.g. engine=vllm,tp=8"
        )


def _placement(instance: Any, attribute: Any, value: Any) -> None:
    if value not in PLACEMENTS:
        raise TopologyError(
            f"placement must be one of {', '.join(PLACEMENTS)}, got {show(value)} "
            "(vLLM's expert_placement_strategy)"
        )


def _value(key: str, text: str) -> Any:
    """One key's value from its text: an int in plain ASCII digits, a bool, or a name."""
    if key in ("engine", "placement"):
        return text
    if key == "dp_attention":
        if text.lower() in ("1", "true", "0", "false"):
            return text.lower() in ("1", "true")
        raise TopologyError(f"dp_attention must be true or false, got {show(text)}")
    if not (1 <= len(text) <= 30 and text.isascii() and text.isdigit()):
        raise TopologyError(
            f"{key} must be a positive int in ASCII digits, got {show(text)}; e.g. {key}=8"
        )
    return int(text)


@attrs.frozen
class EngineLayout:
    """A generation engine's layout: which engine, its tensor/data/expert-parallel sizes.

    Args:
        engine: one of :data:`ENGINES` (``megatron`` is refused: it is laid out by a Topology).
        tp: tensor-parallel ranks per replica.
        dp: replicas (SGLang with ``dp_attention``: attention replicas inside the tp ranks).
        ep: expert-parallel size (vLLM: 1 or ``tp * dp``; SGLang: a divisor of ``tp``).
        placement: vLLM's expert placement under expert parallelism (:data:`PLACEMENTS`).
        dp_attention: SGLang's ``--enable-dp-attention``.

    Raises:
        TopologyError: an unknown engine, a size that is not a positive int, or sizes the engine
            refuses together (its row's ``check``).

    >>> EngineLayout("vllm", tp=8, ep=4)
    Traceback (most recent call last):
    topology._errors.TopologyError: engine=vllm: ep(4) must be 1 or tp(8) * dp(1) = 8 \
(enable_expert_parallel puts every rank in the expert-parallel group); valid: 1, 8
    """

    engine: str = attrs.field(validator=_engine)
    tp: int = attrs.field(default=1, validator=whole(1), kw_only=True)
    dp: int = attrs.field(default=1, validator=whole(1), kw_only=True)
    ep: int = attrs.field(default=1, validator=whole(1), kw_only=True)
    placement: str = attrs.field(default="linear", validator=_placement, kw_only=True)
    dp_attention: bool = attrs.field(default=False, validator=flag, kw_only=True)

    def __attrs_post_init__(self) -> None:
        self.row.check(self)
        check_size("engine layout world size", self.world_size, at_most=MAX_WORLD_SIZE)

    @classmethod
    def from_string(cls, text: str) -> EngineLayout:
        """The layout of ``engine=vllm,tp=8,dp=2,ep=16`` (one ``key=value`` per item).

        Raises:
            TopologyError: not a string, an item without ``=``, a key not in :data:`KEYS` or
                given twice, no ``engine``, a value that is not plain ASCII digits (or
                true/false for ``dp_attention``), or a layout :class:`EngineLayout` refuses.

        >>> EngineLayout.from_string("engine=sglang,tp=8,tp=4")
        Traceback (most recent call last):
        topology._errors.TopologyError: engine layout gives tp twice (tp=8, tp=4); give it once
        """
        if not isinstance(text, str):
            raise TopologyError(
                f"an engine layout must be a string like engine=vllm,tp=8, got {show(text)}"
            )
        fields: dict[str, Any] = {}
        given: dict[str, str] = {}
        for item in text.split(","):
            key, equals, value = (part.strip() for part in item.partition("="))
            if not equals or key not in KEYS:
                raise TopologyError(
                    f"engine layout item {show(item)} is not KEY=VALUE with a key of "
                    f"{', '.join(KEYS)}; e.g. engine=vllm,tp=8,dp=2"
                )
            if key in given:
                raise TopologyError(
                    f"engine layout gives {key} twice ({key}={given[key]}, {key}={value}); "
                    "give it once"
                )
            given[key] = value
            fields[key] = _value(key, value)
        if "engine" not in fields:
            raise TopologyError(
                f"engine layout {show(text)} names no engine; start it with engine= one of "
                f"{', '.join(ENGINES)}"
            )
        return cls(**fields)

    def to_dict(self) -> dict[str, Any]:
        """The fields, by name: ``EngineLayout(**layout.to_dict()) == layout``."""
        return attrs.asdict(self)

    def __str__(self) -> str:
        """``engine=vllm,tp=8,dp=2,ep=16``: the string :meth:`from_string` reads back."""
        text = f"engine={self.engine},tp={self.tp},dp={self.dp},ep={self.ep}"
        if self.placement != "linear":
            text += f",placement={self.placement}"
        return text + (",dp_attention=true" if self.dp_attention else "")

    @property
    def row(self) -> Engine:
        """This engine's row of :data:`ENGINES`."""
        return ENGINES[self.engine]

    @property
    def world_size(self) -> int:
        """The engine's ranks: ``tp * dp`` (SGLang with ``dp_attention``: ``tp``)."""
        return self.row.world(self)

    def _rank(self, rank: object) -> int:
        return check_index("rank", rank, at_most=self.world_size - 1)

    def coord(self, rank: int) -> EngineCoord:
        """``rank``'s tensor-parallel rank and replica (tp varies fastest).

        Raises:
            TopologyError: ``rank`` is not in ``range(world_size)``.
        """
        return self.row.coord(self, self._rank(rank))

    def group(self, name: str, rank: int) -> tuple[int, int]:
        """``(size, index)`` of ``rank`` in the engine's group ``name`` (one of :data:`GROUPS`).

        Raises:
            TopologyError: an unknown group or a rank out of range.
        """
        if name not in GROUPS:
            raise TopologyError(f"group must be one of {', '.join(GROUPS)}, got {show(name)}")
        return self.row.groups[name](self, self._rank(rank))
