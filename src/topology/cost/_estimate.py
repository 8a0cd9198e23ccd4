"""The step-time estimate: compute plus the collectives each parallel dimension runs (private)."""

from __future__ import annotations

from typing import Any

import attrs

from .._cluster import Cluster
from .._errors import TopologyError
from .._topology import Topology
from ._collectives import all_reduce, all_to_all, p2p
from ._hardware import Hardware
from ._memory import Memory, memory
from ._model import Model, Workload
from ._placement import crosses

__all__ = ["DIMENSIONS", "Estimate", "estimate"]

DIMENSIONS = ("tp", "cp", "ep", "pp", "dp", "edp")
"""The communication lines of an estimate, in the order they are printed."""

_LINK_NAMES = {None: "none", False: "intra", True: "inter"}
_GROUP_KIND = {"tp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dp-cp", "edp": "edp"}


@attrs.frozen
class Estimate:
    """Seconds per training step of one layout, broken down by what costs them.

    ``total = compute + sum(communication) + bubble``: nothing overlaps, so this is an upper
    bound that ranks layouts by what they expose, not a promise of wall time.

    Attributes:
        topology: the layout.
        micro_batches: micro-batches per step on each data-parallel replica.
        compute: seconds of forward + backward work on one GPU.
        communication: ``(dimension, seconds)`` for tp, cp, ep, pp, dp, edp.
        links: ``(dimension, "intra" | "inter" | "none")``: the slowest link its groups use.
        bubble: seconds the pipeline idles while it fills and drains.
        memory: bytes per GPU, or None when the workload has no memory figures.
    """

    topology: Topology
    micro_batches: int
    compute: float
    communication: tuple[tuple[str, float], ...]
    links: tuple[tuple[str, str], ...]
    bubble: float
    memory: Memory | None = None

    @property
    def total(self) -> float:
        """Seconds per step: compute, every communication line and the bubble."""
        return self.compute + sum(seconds for _, seconds in self.communication) + self.bubble

    @property
    def fits(self) -> bool:
        """True unless the memory model says the layout does not fit on a GPU."""
        return self.memory is None or self.memory.fits

    def comm(self, dimension: str) -> float:
        """Seconds of communication charged to ``dimension`` (tp, cp, ep, pp, dp or edp)."""
        for name, seconds in self.communication:
            if name == dimension:
                return seconds
        raise TopologyError(f"unknown dimension {dimension!r}; valid: {', '.join(DIMENSIONS)}")

    def link(self, dimension: str) -> str:
        """ "intra", "inter" or "none": the link ``dimension``'s groups use."""
        self.comm(dimension)
        return dict(self.links)[dimension]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the layout, every line in seconds, links, memory and the total."""
        return {
            "topology": self.topology.to_dict(),
            "layout": str(self.topology),
            "micro_batches": self.micro_batches,
            "compute_s": self.compute,
            "communication_s": dict(self.communication),
            "links": dict(self.links),
            "bubble_s": self.bubble,
            "total_s": self.total,
            "memory": None if self.memory is None else self.memory.to_dict(),
        }

    def __str__(self) -> str:
        lines = [f"{self.topology}: {self.total:.4g} s per step"]
        lines.append(f"  compute        {self.compute:10.4g} s")
        for name, seconds in self.communication:
            if seconds:
                link = dict(self.links)[name]
                lines.append(f"  {name + ' comm':14} {seconds:10.4g} s  ({link}-node)")
        if self.bubble:
            lines.append(f"  pp bubble      {self.bubble:10.4g} s")
        if self.memory is not None:
            capacity = "?" if self.memory.capacity is None else f"{self.memory.capacity / 1e9:.0f}"
            verdict = "fits" if self.memory.fits else "DOES NOT FIT"
            total = self.memory.total / 1e9
            lines.append(f"  memory         {total:10.4g} GB of {capacity} GB ({verdict})")
        return "\n".join(lines)


def estimate(
    topology: Topology,
    cluster: Cluster,
    model: Model | Workload,
    hardware: Hardware,
    *,
    distributed_optimizer: bool = True,
) -> Estimate:
    """Estimate one training step of ``model`` laid out as ``topology`` on ``cluster``.

    Algorithm (per GPU, alpha-beta costs from :mod:`topology.cost`, a group uses the intra-node
    link iff every group of its kind stays in one node / NVLink domain): with ``m`` micro-batches
    of ``b`` samples, activation ``A`` per sample and ``L / pp`` layers per stage,

    - compute ``m * C * b / (tp * cp * pp)`` for work ``C`` per sample;
    - tp: per layer ``tp_collectives`` all-reduces of ``b * A / cp`` over the tp group;
    - cp: per layer ``3 (cp - 1)`` ring sends of the local keys and values ``2 b A / (cp tp)``
      (forward, and twice in backward);
    - ep: per MoE layer 4 all-to-alls (dispatch, combine; forward, backward) of
      ``top_k * b * A / (cp * tp)``;
    - pp: ``2 (vpp * m + pp - 1)`` sends of ``b * A / (cp * tp)`` (activations forward, gradients
      backward, interleaved chunks cross ``vpp`` times as many stage boundaries);
    - dp: an all-reduce (or reduce-scatter + all-gather, the same cost) of the dense gradients
      ``G / (tp * pp)`` over dp-cp; edp: of the expert gradients over edp;
    - bubble ``(pp - 1) / vpp`` times one micro-batch's compute, tp, cp and ep time.

    Raises:
        TopologyError: if the global batch does not split into whole micro-batches per replica.

    >>> from topology import Cluster, Topology
    >>> from topology.cost import TOY_GPU, Workload
    >>> toy = Workload("toy", samples=16, micro_batch=1, compute=20.0, gradient=500.0)
    >>> e = estimate(Topology(4), Cluster(4), toy, TOY_GPU)
    >>> round(e.compute, 6), round(e.comm("dp"), 6), round(e.total, 6)
    (8.0, 7.8, 15.8)
    """
    work = model.workload() if isinstance(model, Model) else model
    t = topology
    tp, cp, pp, ep = t.tp, t.cp, t.pp, t.ep
    dp = t.dp or 1
    etp = t.etp or tp
    vpp = t.vpp or 1
    m = work.micro_batches(dp)
    b = work.micro_batch
    stage_layers = work.layers / pp
    moe_layers = work.moe_layers / pp
    shard = b * work.activation / (cp * tp)

    sizes = {"tp": tp, "cp": cp, "ep": ep, "pp": pp, "dp": dp * cp, "edp": t.edp}
    crossing = {
        name: crosses(t, _GROUP_KIND[name], cluster) if sizes[name] > 1 else None
        for name in DIMENSIONS
    }
    links = {
        name: None if leaves is None else hardware.link(leaves) for name, leaves in crossing.items()
    }

    compute_mb = hardware.compute_time(work.compute * b / (tp * cp * pp))
    per_mb = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    if (link := links["tp"]) is not None:
        payload = b * work.activation / cp
        per_mb["tp"] = stage_layers * work.tp_collectives * all_reduce(link, tp, payload)
    if (link := links["cp"]) is not None:
        per_mb["cp"] = stage_layers * 3 * (cp - 1) * p2p(link, 2 * shard)
    if (link := links["ep"]) is not None and moe_layers:
        per_mb["ep"] = moe_layers * 4 * all_to_all(link, ep, work.top_k * shard)
    comm = {name: seconds * m for name, seconds in per_mb.items()}
    comm["pp"] = 0.0
    if (link := links["pp"]) is not None:
        comm["pp"] = 2 * (vpp * m + pp - 1) * p2p(link, shard)
    comm["dp"] = 0.0
    if (link := links["dp"]) is not None and work.gradient:
        comm["dp"] = all_reduce(link, dp * cp, work.gradient / (tp * pp))
    comm["edp"] = 0.0
    if (link := links["edp"]) is not None and work.expert_gradient:
        comm["edp"] = all_reduce(link, t.edp, work.expert_gradient / (etp * ep * pp))

    bubble = (pp - 1) / vpp * (compute_mb + sum(per_mb.values()))
    return Estimate(
        topology=t,
        micro_batches=m,
        compute=m * compute_mb,
        communication=tuple((name, comm[name]) for name in DIMENSIONS),
        links=tuple((name, _LINK_NAMES[leaves]) for name, leaves in crossing.items()),
        bubble=bubble,
        memory=memory(t, work, hardware.memory, distributed_optimizer=distributed_optimizer),
    )
