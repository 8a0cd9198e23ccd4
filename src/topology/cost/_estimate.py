"""The step-time estimate: compute plus the collectives each parallel dimension runs (private)."""

from __future__ import annotations

import math
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._megatron.topology import Topology
from .._preflight.cluster import Cluster
from .._preflight.placement import crosses_domains
from ._collectives import ring_all_gather, ring_all_reduce, send
from ._fields import (
    amount,
    as_float,
    check_amount,
    check_flag,
    check_instance,
    instance_of,
    optional,
    size,
)
from ._hardware import Hardware
from ._memory import Memory, memory
from ._model import Model, Workload

__all__ = ["DIMENSIONS", "Estimate", "estimate"]

DIMENSIONS = ("tp", "cp", "ep", "pp", "dp", "edp")
"""The communication lines of an estimate, in the order they are printed."""

_LINK_NAMES = {None: "none", False: "intra", True: "inter"}
_LINK_VALUES = tuple(_LINK_NAMES.values())
_GROUP_KIND = {"tp": "tp", "cp": "cp", "ep": "ep", "pp": "pp", "dp": "dp-cp", "edp": "edp"}


def _pairs(name: str, value: object) -> dict[object, object]:
    """``value`` as a dict of the six dimensions, in order, or raise."""
    pairs: dict[object, object] | None
    try:
        pairs = dict(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        pairs = None
    if pairs is None or tuple(pairs) != DIMENSIONS:
        raise TopologyError(
            f"{name} must pair each of {', '.join(DIMENSIONS)} (in that order) with a value, "
            f"got {show(value)}"
        )
    return pairs


def _lines(value: object) -> tuple[tuple[str, float], ...]:
    pairs = _pairs("communication", value)
    return tuple((str(k), check_amount(f"communication[{k!r}]", v)) for k, v in pairs.items())


def _links(value: object) -> tuple[tuple[str, str], ...]:
    pairs = _pairs("links", value)
    for key, link in pairs.items():
        if link not in _LINK_VALUES:
            raise TopologyError(
                f"links[{key!r}] must be one of {', '.join(_LINK_VALUES)}, got {show(link)}"
            )
    return tuple((str(k), str(v)) for k, v in pairs.items())


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

    topology: Topology = attrs.field(validator=instance_of(Topology, "a Topology"))
    micro_batches: int = attrs.field(validator=size)
    compute: float = attrs.field(converter=as_float, validator=amount)
    communication: tuple[tuple[str, float], ...] = attrs.field(converter=_lines)
    links: tuple[tuple[str, str], ...] = attrs.field(converter=_links)
    bubble: float = attrs.field(converter=as_float, validator=amount)
    memory: Memory | None = attrs.field(
        default=None, validator=optional(instance_of(Memory, "a Memory or None"))
    )

    def __attrs_post_init__(self) -> None:
        if not math.isfinite(self.total):
            raise TopologyError(
                "compute, communication and bubble sum past the largest float; an estimate "
                "must total a finite number of seconds"
            )

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
        raise TopologyError(f"unknown dimension {show(dimension)}; valid: {', '.join(DIMENSIONS)}")

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
        TopologyError: if an argument has the wrong type, the global batch does not split into
            whole micro-batches per replica, the layers do not split over ``pp * vpp`` chunks,
            or the figures overflow floating point.

    >>> from topology import Cluster, Topology
    >>> from topology.cost import TOY_GPU, Workload
    >>> toy = Workload("toy", samples=16, micro_batch=1, compute=20.0, gradient=500.0)
    >>> e = estimate(Topology(4), Cluster(4), toy, TOY_GPU)
    >>> round(e.compute, 6), round(e.comm("dp"), 6), round(e.total, 6)
    (8.0, 7.8, 15.8)
    """
    work = _inputs(topology, cluster, model, hardware, distributed_optimizer)
    try:
        return _estimate(topology, cluster, work, hardware, distributed_optimizer)
    except TopologyError as error:
        raise TopologyError(
            f"the step of {show(work.name)} on {topology} cannot be costed: {error}; "
            "the workload's figures are too large for floating point"
        ) from None


def _inputs(
    topology: object,
    cluster: object,
    model: object,
    hardware: object,
    distributed_optimizer: object,
) -> Workload:
    """Check the arguments of :func:`estimate` and return the workload."""
    topo = check_instance("topology", topology, Topology, "a Topology, e.g. Topology(8, tp=2)")
    check_instance("cluster", cluster, Cluster, "a Cluster, e.g. Cluster(gpus_per_node=8)")
    if isinstance(model, Model):
        work = model.workload()
    else:
        hint = "a Model or a Workload, e.g. MODELS['llama-7b']"
        work = check_instance("model", model, Workload, hint)
    check_instance("hardware", hardware, Hardware, "a Hardware, e.g. H100_NODE")
    check_flag("distributed_optimizer", distributed_optimizer)
    pp, vpp = topo.pp, topo.vpp or 1
    if work.layers % (pp * vpp):
        raise TopologyError(
            f"layers ({work.layers}) must be a multiple of pp({pp}) * vpp({vpp}) = {pp * vpp} "
            f"so that every pipeline chunk holds whole layers; use a pp that divides "
            f"{work.layers}"
        )
    work.micro_batches(topo.dp)
    return work


def _estimate(
    t: Topology,
    cluster: Cluster,
    work: Workload,
    hardware: Hardware,
    distributed_optimizer: bool,
) -> Estimate:
    tp, cp, pp, ep = t.tp, t.cp, t.pp, t.ep
    dp = t.dp
    etp = t.etp
    vpp = t.vpp or 1
    m = work.micro_batches(dp)
    b = work.micro_batch
    stage_layers = work.layers / pp
    moe_layers = work.moe_layers / pp
    shard = b * work.activation / (cp * tp)

    sizes = {"tp": tp, "cp": cp, "ep": ep, "pp": pp, "dp": dp * cp, "edp": t.edp}
    crossing = {
        name: crosses_domains(t, cluster, _GROUP_KIND[name]) if sizes[name] > 1 else None
        for name in DIMENSIONS
    }
    links = {
        name: None if leaves is None else hardware.link(leaves) for name, leaves in crossing.items()
    }

    compute_mb = hardware.compute_time(work.compute * b / (tp * cp * pp))
    per_mb = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    if (link := links["tp"]) is not None:
        payload = b * work.activation / cp
        per_mb["tp"] = stage_layers * work.tp_collectives * ring_all_reduce(link, tp, payload)
    if (link := links["cp"]) is not None:
        per_mb["cp"] = stage_layers * 3 * (cp - 1) * send(link, 2 * shard)
    if (link := links["ep"]) is not None and moe_layers:
        per_mb["ep"] = moe_layers * 4 * ring_all_gather(link, ep, work.top_k * shard)
    comm = {name: seconds * m for name, seconds in per_mb.items()}
    comm["pp"] = 0.0
    if (link := links["pp"]) is not None:
        comm["pp"] = 2 * (vpp * m + pp - 1) * send(link, shard)
    comm["dp"] = 0.0
    if (link := links["dp"]) is not None and work.gradient:
        comm["dp"] = ring_all_reduce(link, dp * cp, work.gradient / (tp * pp))
    comm["edp"] = 0.0
    if (link := links["edp"]) is not None and work.expert_gradient:
        comm["edp"] = ring_all_reduce(link, t.edp, work.expert_gradient / (etp * ep * pp))

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
