"""What is trained: a transformer description and the per-step workload it implies (private)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from .._errors import TopologyError

__all__ = ["MODELS", "Model", "Workload"]


def _size(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 1:
        raise TopologyError(f"{attribute.name} must be an int >= 1, got {value!r}")


def _count(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise TopologyError(f"{attribute.name} must be an int >= 0, got {value!r}")


def _amount(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise TopologyError(f"{attribute.name} must be a number >= 0, got {value!r}")


def _optional_amount(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None:
        _amount(instance, attribute, value)


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

    name: str
    samples: int = attrs.field(validator=_size)
    micro_batch: int = attrs.field(validator=_size)
    compute: float = attrs.field(validator=_amount)
    gradient: float = attrs.field(validator=_amount)
    expert_gradient: float = attrs.field(default=0.0, validator=_amount)
    layers: int = attrs.field(default=1, validator=_size)
    activation: float = attrs.field(default=0.0, validator=_amount)
    tp_collectives: int = attrs.field(default=4, validator=_count)
    moe_layers: int = attrs.field(default=0, validator=_count)
    top_k: int = attrs.field(default=1, validator=_size)
    weight_bytes: float | None = attrs.field(default=None, validator=_optional_amount)
    expert_weight_bytes: float = attrs.field(default=0.0, validator=_amount)
    gradient_bytes_per_weight_byte: float = 1.0
    optimizer_bytes_per_weight_byte: float = 6.0
    activation_bytes: float = attrs.field(default=0.0, validator=_amount)

    def __attrs_post_init__(self) -> None:
        if self.moe_layers > self.layers:
            raise TopologyError(
                f"moe_layers ({self.moe_layers}) cannot exceed layers ({self.layers}); "
                "count the layers that have experts"
            )

    def micro_batches(self, dp: int) -> int:
        """Micro-batches per step on each data-parallel replica of ``dp``.

        Raises:
            TopologyError: if ``samples`` does not split into whole micro-batches.
        """
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

    name: str
    parameters: float = attrs.field(validator=_amount)
    layers: int = attrs.field(validator=_size)
    hidden: int = attrs.field(validator=_size)
    sequence_length: int = attrs.field(validator=_size)
    global_batch: int = attrs.field(validator=_size)
    micro_batch: int = attrs.field(default=1, validator=_size)
    bytes_per_element: int = attrs.field(default=2, validator=_size)
    experts: int = attrs.field(default=1, validator=_size)
    top_k: int = attrs.field(default=1, validator=_size)
    expert_parameters: float = attrs.field(default=0.0, validator=_amount)

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
    def from_dict(cls, data: Mapping[str, Any]) -> Model:
        """The inverse of :meth:`to_dict`; unknown keys raise ``TopologyError``.

        >>> Model.from_dict(MODELS["llama-70b"].to_dict()) == MODELS["llama-70b"]
        True
        """
        names = [field.name for field in attrs.fields(cls)]
        unknown = sorted(str(key) for key in data if key not in names)
        if unknown:
            raise TopologyError(
                f"unknown model field {unknown[0]!r}; valid fields: {', '.join(names)}"
            )
        try:
            return cls(**dict(data))
        except TypeError as error:
            raise TopologyError(
                f"model is incomplete: {error}; give every required field"
            ) from None


MODELS = {
    model.name: model
    for model in (
        Model("llama-7b", 6.74e9, layers=32, hidden=4096, sequence_length=4096, global_batch=1024),
        Model("llama-13b", 13.0e9, layers=40, hidden=5120, sequence_length=4096, global_batch=1024),
        Model("llama-70b", 69.0e9, layers=80, hidden=8192, sequence_length=4096, global_batch=1024),
        Model(
            "mixtral-8x7b",
            46.7e9,
            layers=32,
            hidden=4096,
            sequence_length=4096,
            global_batch=1024,
            experts=8,
            top_k=2,
            expert_parameters=45.1e9,
        ),
    )
}
"""Presets: Llama 2 7B / 13B / 70B shapes (Touvron et al. 2023) and Mixtral 8x7B (Jiang et al.
2024: 8 experts of 3 * 4096 * 14336 weights in each of 32 layers, top-2), at 4096 tokens and a
global batch of 1024 sequences (4M tokens, Llama 2's batch)."""
