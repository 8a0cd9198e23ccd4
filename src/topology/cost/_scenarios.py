"""Seed 003's toy scenarios, 0D to 4D, computed instead of slept through (private)."""

from __future__ import annotations

from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._machine.cluster import Cluster
from .._megatron.topology import Topology
from ._collectives import sequential_ring
from ._estimate import Estimate, estimate
from ._fields import amount, as_float, instance_of, optional, text
from ._hardware import TOY_GPU
from ._model import Workload

__all__ = ["SCENARIOS", "TOY_WORKLOAD", "Scenario", "scenario"]

RECEIVE_SECONDS = 0.05
"""The seed's receive acknowledgement after every send."""

TOY_WORKLOAD = Workload(
    "toy",
    samples=16,
    micro_batch=1,
    compute=20.0,
    gradient=500.0,
    layers=2,
    activation=10.0,
)
"""The seed's defaults (16 items of 20 compute units, a 500-unit gradient), plus what 2D-4D need:
two layers and 10 data units of activation per item."""

_LAYOUTS = {
    "0d": (Topology(1), "one GPU does every item in turn"),
    "1d": (Topology(4), "data parallel: 4 replicas, gradients all-reduced"),
    "2d": (Topology(8, tp=2), "dp4 x tp2: half the compute, but tp all-reduces in every layer"),
    "3d": (Topology(16, tp=2, pp=2), "+ pp2: half the layers per GPU, p2p sends and a bubble"),
    "4d": (
        Topology(32, tp=2, pp=2, cp=2),
        "+ cp2: half the sequence per GPU, a key/value ring, dp over dp x cp",
    ),
}

SCENARIOS = tuple(_LAYOUTS)
"""The scenario names, 0d to 4d."""


@attrs.frozen
class Scenario:
    """One of seed 003's scenarios: its estimate and, for 1D, the seed's own sequential ring."""

    name: str = attrs.field(validator=text)
    description: str = attrs.field(validator=text)
    estimate: Estimate = attrs.field(validator=instance_of(Estimate, "an Estimate"))
    seed_sync: float | None = attrs.field(
        default=None, converter=as_float, validator=optional(amount)
    )

    @property
    def seed_total(self) -> float | None:
        """The seed's total (compute + its sequential ring), for 1D only."""
        if self.seed_sync is None:
            return None
        return self.estimate.compute + self.seed_sync

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: name, description, the estimate and the seed's figures when there are any."""
        data: dict[str, Any] = {"scenario": self.name, "description": self.description}
        data.update(self.estimate.to_dict())
        if self.seed_sync is not None:
            data["seed_sequential_ring_s"] = self.seed_sync
            data["seed_total_s"] = self.seed_total
        return data

    def __str__(self) -> str:
        lines = [f"{self.name.upper()}: {self.description}", str(self.estimate)]
        if self.seed_sync is not None:
            lines.append(
                f"  the seed's sequential 'ring' ({self.estimate.topology.dp} sends one after "
                f"another) takes {self.seed_sync:.4g} s instead of the textbook ring's "
                f"{self.estimate.comm('dp'):.4g} s: total {self.seed_total:.4g} s"
            )
        return "\n".join(lines)


def scenario(name: str) -> Scenario:
    """Seed 003's scenario ``name`` (0d, 1d, 2d, 3d or 4d) on the toy GPU.

    >>> s = scenario("1d")
    >>> round(s.estimate.compute, 6), round(s.seed_sync or 0, 6), round(s.seed_total or 0, 6)
    (8.0, 20.4, 28.4)
    >>> round(s.estimate.total, 6)
    15.8
    """
    if not isinstance(name, str) or name not in _LAYOUTS:
        raise TopologyError(
            f"unknown scenario {show(name)}; valid scenarios: {', '.join(SCENARIOS)}"
        )
    topology, description = _LAYOUTS[name]
    cluster = Cluster(gpus_per_node=topology.world_size)
    result = estimate(topology, cluster, TOY_WORKLOAD, TOY_GPU)
    seed_sync = None
    if name == "1d":
        seed_sync = sequential_ring(
            TOY_GPU.inter, topology.dp, TOY_WORKLOAD.gradient, RECEIVE_SECONDS
        )
    return Scenario(name, description, result, seed_sync)
