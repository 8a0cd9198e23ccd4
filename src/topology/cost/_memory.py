"""Bytes one GPU holds for a layout: weights, gradients, optimizer state, activations (private)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from .._errors import TopologyError
from .._megatron.topology import Topology
from ._fields import amount, as_float, optional, positive
from ._model import Workload

__all__ = ["Memory", "memory"]

_GB = 1e9


@attrs.frozen
class Memory:
    """Bytes per GPU of the busiest rank (the first pipeline stage), and the device's capacity.

    >>> m = Memory(weights=2e9, gradients=2e9, optimizer=12e9, activations=4e9, capacity=80e9)
    >>> m.total, m.fits
    (20000000000.0, True)
    """

    weights: float = attrs.field(converter=as_float, validator=amount)
    gradients: float = attrs.field(converter=as_float, validator=amount)
    optimizer: float = attrs.field(converter=as_float, validator=amount)
    activations: float = attrs.field(converter=as_float, validator=amount)
    capacity: float | None = attrs.field(
        default=None, converter=as_float, validator=optional(positive)
    )

    def __attrs_post_init__(self) -> None:
        if not math.isfinite(self.total):
            raise TopologyError(
                "memory parts sum past the largest float; weights, gradients, optimizer and "
                "activations must add up to a finite number of bytes"
            )

    @property
    def total(self) -> float:
        """Sum of the four parts."""
        return self.weights + self.gradients + self.optimizer + self.activations

    @property
    def fits(self) -> bool:
        """True if the total fits the device (always, when the capacity is unknown)."""
        return self.capacity is None or self.total <= self.capacity

    def to_dict(self) -> dict[str, Any]:
        """The parts, total and capacity in GB, and whether it fits."""
        parts = ("weights", "gradients", "optimizer", "activations", "total")
        data: dict[str, Any] = {f"{p}_gb": round(getattr(self, p) / _GB, 3) for p in parts}
        data["capacity_gb"] = None if self.capacity is None else round(self.capacity / _GB, 3)
        data["fits"] = self.fits
        return data


def memory(
    topology: Topology,
    workload: Workload,
    capacity: float | None,
    *,
    distributed_optimizer: bool = True,
) -> Memory | None:
    """The memory of one GPU, or None when ``workload`` carries no memory figures.

    Algorithm: dense weights are split by ``tp * pp`` and expert weights by ``etp * ep * pp``;
    gradients follow the weights; the distributed optimizer also splits optimizer state over
    ``dp * cp`` (dense) and ``edp`` (experts). Under 1F1B the first stage keeps
    ``min(pp, micro-batches)`` micro-batches of its ``layers / pp`` layers, each
    ``activation_bytes * micro_batch / (tp * cp)`` per layer.
    """
    if workload.weight_bytes is None:
        return None
    t = topology
    dense = workload.weight_bytes / (t.tp * t.pp)
    expert = workload.expert_weight_bytes / (t.etp * t.ep * t.pp)
    dense_state, expert_state = dense, expert
    if distributed_optimizer:
        dense_state /= t.dp * t.cp
        expert_state /= t.edp
    in_flight = min(t.pp, workload.micro_batches(t.dp))
    per_layer = workload.activation_bytes * workload.micro_batch / (t.tp * t.cp)
    return Memory(
        weights=dense + expert,
        gradients=(dense + expert) * workload.gradient_bytes_per_weight_byte,
        optimizer=(dense_state + expert_state) * workload.optimizer_bytes_per_weight_byte,
        activations=per_layer * workload.layers / t.pp * in_flight,
        capacity=capacity,
    )
