"""What is trained: a transformer description and the per-step workload it implies (private)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._architecture.architecture import Architecture
from .._architecture.presets import ARCHITECTURES
from .._args import show
from .._errors import TopologyError
from . import _fields

__all__ = ["MODELS", "Model", "Workload"]


def _number(*, default: Any = attrs.NOTHING, optional: bool = False) -> Any:
    """A float field: a finite number >= 0 (or None when ``optional``)."""
    check = _fields.optional(_fields.amount) if optional else _fields.amount
    return attrs.field(default=default, converter=_fields.as_float, validator=check)


def _int(*, default: Any = attrs.NOTHING, minimum: int = 1) -> Any:
    """An int field from ``minimum`` to 2**53."""
    return attrs.field(default=default, validator=_fields.size if minimum else _fields.count)


def _name() -> Any:
    return attrs.field(validator=_fields.text)


@attrs.frozen
class Workload:
    """One training step in the cost model's units (work units, data units, bytes).

    Sizes are for the whole, unsharded model; :func:`~topology.cost.estimate` divides them by the
    layout. Real models come from :meth:`Model.workload`; seed 003's toy sets them directly.

    Args:
        name: a short label.
        samples: the global batch (sequences, or the toy's items).
        micro_batch: samples per micro-batch.
        compute: forward + backward work per sample (FLOPs, or toy compute units).
        gradient: data units of the dense parameters' gradients (all-reduced over dp-cp).
        expert_gradient: data units of the expert parameters' gradients (all-reduced over edp).
        layers: transformer layers (pipeline stages split them).
        activation: data units of one sample's hidden state at a layer boundary (s * h * bytes):
            the payload of TP all-reduces, PP sends, CP key/value exchange and EP dispatch.
        tp_collectives: TP all-reduces per layer per micro-batch (Megatron: 2 forward, 2 backward).
        moe_layers: layers with experts; top_k: experts each token visits.
        weight_bytes, expert_weight_bytes: bytes of dense / expert weights (None: no memory model).
        gradient_bytes_per_weight_byte, optimizer_bytes_per_weight_byte: memory of gradients and
            optimizer state relative to the weights (mixed-precision Adam: 1 and 6, i.e. 2 + 2 + 12
            bytes per parameter).
        activation_bytes: bytes of activations one sample keeps per layer (unsharded).

    >>> Workload("toy", samples=16, micro_batch=1, compute=20.0, gradient=500.0).micro_batches(4)
    4
    """

    name: str = _name()
    samples: int = _int()
    micro_batch: int = _int()
    compute: float = _number()
    gradient: float = _number()
    expert_gradient: float = _number(default=0.0)
    layers: int = _int(default=1)
    activation: float = _number(default=0.0)
    tp_collectives: int = _int(default=4, minimum=0)
    moe_layers: int = _int(default=0, minimum=0)
    top_k: int = _int(default=1)
    weight_bytes: float | None = _number(default=None, optional=True)
    expert_weight_bytes: float = _number(default=0.0)
    gradient_bytes_per_weight_byte: float = _number(default=1.0)
    optimizer_bytes_per_weight_byte: float = _number(default=6.0)
    activation_bytes: float = _number(default=0.0)

    def __attrs_post_init__(self) -> None:
        if self.moe_layers > self.layers:
            raise TopologyError(
                f"moe_layers ({self.moe_layers}) cannot exceed layers ({self.layers}); "
                "count the layers that have experts"
            )
        if self.samples % self.micro_batch:
            raise TopologyError(
                f"samples ({self.samples}) must be a multiple of micro_batch "
                f"({self.micro_batch}); change one of them"
            )

    def micro_batches(self, dp: int) -> int:
        """Micro-batches per step on each data-parallel replica of ``dp``.

        Raises:
            TopologyError: if ``samples`` does not split into whole micro-batches.
        """
        _fields.check_count("dp", dp)
        per_replica, rest = divmod(self.samples, dp * self.micro_batch)
        if rest or not per_replica:
            raise TopologyError(
                f"samples ({self.samples}) must be a multiple of dp({dp}) * micro_batch"
                f"({self.micro_batch}) = {dp * self.micro_batch}; change the batch or dp"
            )
        return per_replica


@attrs.frozen
class Model:
    """A Llama-like decoder, enough of it to cost a step and size its memory.

    Args:
        name: a short label.
        parameters: total parameter count (experts included).
        layers, hidden, sequence_length: the transformer's shape.
        global_batch, micro_batch: sequences per step and per micro-batch.
        bytes_per_element: bytes of a weight / activation element (2 for bf16).
        experts: experts per MoE layer (1: a dense model); top_k: experts per token.
        expert_parameters: how many of ``parameters`` sit in experts.

    Algorithm: training FLOPs per sequence ``6 * P_active * s + 12 * L * h * s**2`` (weights:
    2 forward + 4 backward per parameter per token; attention scores and values, Narayanan et al.
    2021), with ``P_active = P_dense + P_expert * top_k / experts``. Activations kept per layer
    per sequence: ``34 * s * h`` bytes in 16-bit with selective recomputation (Korthikanti et al.
    2022), divided by tp * cp when sharded.

    >>> MODELS["llama-7b"].workload().layers
    32
    """

    name: str = _name()
    parameters: float = _number()
    layers: int = _int()
    hidden: int = _int()
    sequence_length: int = _int()
    global_batch: int = _int()
    micro_batch: int = _int(default=1)
    bytes_per_element: int = _int(default=2)
    experts: int = _int(default=1)
    top_k: int = _int(default=1)
    expert_parameters: float = _number(default=0.0)

    def __attrs_post_init__(self) -> None:
        if self.expert_parameters > self.parameters:
            raise TopologyError(
                f"expert_parameters ({self.expert_parameters:g}) cannot exceed parameters "
                f"({self.parameters:g}); give the experts' share of the total"
            )
        if self.top_k > self.experts:
            raise TopologyError(
                f"top_k ({self.top_k}) cannot exceed experts ({self.experts}); use top_k <= experts"
            )
        if self.global_batch % self.micro_batch:
            raise TopologyError(
                f"global_batch ({self.global_batch}) must be a multiple of micro_batch "
                f"({self.micro_batch}); change one of them"
            )
        try:
            self.workload()
        except TopologyError as error:
            raise TopologyError(
                f"model {show(self.name)} is too large to cost ({error}); use smaller parameters, "
                "hidden or sequence_length"
            ) from None

    @property
    def is_moe(self) -> bool:
        """True when the model has more than one expert per MoE layer."""
        return self.experts > 1

    def workload(self) -> Workload:
        """The step this model implies, in FLOPs and bytes."""
        dense = self.parameters - self.expert_parameters
        active = dense + self.expert_parameters * self.top_k / self.experts
        s, h, b = self.sequence_length, self.hidden, self.bytes_per_element
        return Workload(
            self.name,
            samples=self.global_batch,
            micro_batch=self.micro_batch,
            compute=6 * active * s + 12 * self.layers * h * s * s,
            gradient=dense * b,
            expert_gradient=self.expert_parameters * b,
            layers=self.layers,
            activation=float(s * h * b),
            moe_layers=self.layers if self.is_moe else 0,
            top_k=self.top_k,
            weight_bytes=dense * b,
            expert_weight_bytes=self.expert_parameters * b,
            gradient_bytes_per_weight_byte=1.0,
            optimizer_bytes_per_weight_byte=12.0 / b,
            activation_bytes=17.0 * s * h * b,
        )

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON-safe values."""
        return attrs.asdict(self)

    @classmethod
    def from_architecture(cls, name: str, architecture: Architecture) -> Model:
        """The cost model's view of a row of the model table (or of a model read from its
        ``config.json``): its shapes and counts, trained at :data:`PRESET_SEQUENCE_LENGTH` tokens
        and :data:`PRESET_GLOBAL_BATCH` sequences.

        Raises:
            TopologyError: an architecture without ``parameters`` (give its weight count).

        >>> Model.from_architecture("llama-7b", ARCHITECTURES["llama-7b"]) == MODELS["llama-7b"]
        True
        """
        if architecture.parameters is None:
            raise TopologyError(
                f"model {show(name)} has no parameter count; give Architecture.parameters "
                "(e.g. the sum of topology.weights)"
            )
        return cls(
            name,
            architecture.parameters,
            layers=architecture.layers,
            hidden=architecture.hidden,
            sequence_length=PRESET_SEQUENCE_LENGTH,
            global_batch=PRESET_GLOBAL_BATCH,
            experts=architecture.experts,
            top_k=architecture.top_k,
            expert_parameters=architecture.expert_parameters,
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Model:
        """The inverse of :meth:`to_dict`; unknown keys raise ``TopologyError``.

        >>> Model.from_dict(MODELS["llama-70b"].to_dict()) == MODELS["llama-70b"]
        True
        """
        if not isinstance(data, Mapping):
            raise TopologyError(
                f"a model must be a mapping of Model fields, got {show(data)} "
                f"({type(data).__name__})"
            )
        names = [field.name for field in attrs.fields(cls)]
        unknown = [show(key) for key in data if key not in names]
        if unknown:
            raise TopologyError(
                f"unknown model field {min(unknown)}; valid fields: {', '.join(names)}"
            )
        required = [f.name for f in attrs.fields(cls) if f.default is attrs.NOTHING]
        missing = [name for name in required if name not in data]
        if missing:
            raise TopologyError(
                f"model is missing field {missing[0]!r}; give every required field "
                f"({', '.join(required)})"
            )
        return cls(**{str(key): value for key, value in data.items()})


PRESET_SEQUENCE_LENGTH, PRESET_GLOBAL_BATCH = 4096, 1024
"""The step every preset is costed at: 4096 tokens a sequence, 1024 sequences (4M tokens, Llama 2's
batch). A training choice, not a fact of the model, so it lives here and not in the model table."""


MODELS = {
    name: Model.from_architecture(name, row)
    for name, row in ARCHITECTURES.items()
    if row.parameters is not None
}
"""Presets: the rows of the one model table (``topology._architecture.presets``: Llama 2 7B / 13B /
70B, Mixtral 8x7B, DeepSeek-V3) that have a published parameter count, each costed with that count
(not the sum of its shapes) at :data:`PRESET_SEQUENCE_LENGTH` tokens and a global batch of
:data:`PRESET_GLOBAL_BATCH` sequences. ``topology.weights(name)`` lists the same row's weights."""
