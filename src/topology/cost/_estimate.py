"""The step-time estimate: compute plus the collectives each parallel dimension runs (private)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._machine.cluster import Cluster
from .._machine.rankmap import RankMap
from .._megatron.kinds import COST_KINDS
from .._megatron.topology import Topology
from .._preflight.placement import crosses_domains
from ._collectives import ring_all_gather, ring_all_reduce, send, two_level_all_reduce
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
from ._hardware import Hardware, Link
from ._memory import Memory, memory
from ._model import Model, Workload
from ._tiers import Route, Tiers

__all__ = ["DIMENSIONS", "Estimate", "estimate"]

DIMENSIONS = ("tp", "cp", "ep", "pp", "dp", "edp")
"""The communication lines of an estimate, in the order they are printed."""

_LINK_NAMES = {None: "none", False: "intra", True: "inter"}
_LINK_VALUES = tuple(_LINK_NAMES.values())


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
        if not isinstance(link, str) or not link.strip():
            raise TopologyError(
                f"links[{key!r}] must be one of {', '.join(_LINK_VALUES)} or a tier name, "
                f"got {show(link)}"
            )
    return tuple((str(k), str(v)) for k, v in pairs.items())


def _kind_of_link(link: str) -> str:
    """``link`` in the vocabulary of a :class:`Cluster`: a tier name is an ``inter`` link."""
    return link if link in _LINK_VALUES else "inter"


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
        links: ``(dimension, link)``: the slowest link its groups use, ``"intra"``,
            ``"inter"`` or ``"none"`` (no communication); on a rank map, the name of the tier
            priced when that is a tier outside the NVLink domain (see :func:`estimate`).
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
        """ "intra", "inter", "none" or a tier's name: the link ``dimension``'s groups use."""
        self.comm(dimension)
        return dict(self.links)[dimension]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the layout, every line in seconds, links, memory and the total.

        ``links`` keeps the ``intra`` / ``inter`` / ``none`` vocabulary (a tier outside the
        NVLink domain is ``inter``); an estimate on a rank map that priced such a tier adds
        ``link_tiers``, the tier named per dimension.
        """
        out = {
            "topology": self.topology.to_dict(),
            "layout": str(self.topology),
            "micro_batches": self.micro_batches,
            "compute_s": self.compute,
            "communication_s": dict(self.communication),
            "links": {name: _kind_of_link(link) for name, link in self.links},
            "bubble_s": self.bubble,
            "total_s": self.total,
            "memory": None if self.memory is None else self.memory.to_dict(),
        }
        if any(link not in _LINK_VALUES for _, link in self.links):
            out["link_tiers"] = dict(self.links)
        return out

    def __str__(self) -> str:
        lines = [f"{self.topology}: {self.total:.4g} s per step"]
        lines.append(f"  compute        {self.compute:10.4g} s")
        for name, seconds in self.communication:
            if seconds:
                link = dict(self.links)[name]
                where = f"{link}-node" if link in _LINK_VALUES else f"across {link}"
                lines.append(f"  {name + ' comm':14} {seconds:10.4g} s  ({where})")
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
    where: Cluster | RankMap,
    model: Model | Workload,
    hardware: Hardware,
    *,
    distributed_optimizer: bool = True,
    hierarchical: bool = True,
) -> Estimate:
    """Estimate one training step of ``model`` laid out as ``topology`` on ``where``.

    ``where`` is a :class:`Cluster` (a uniform machine) or a :class:`~topology.RankMap` (the
    hosts a launcher really numbered, and the network tiers above them).

    Algorithm (per GPU, alpha-beta costs from :mod:`topology.cost`): with ``m`` micro-batches
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
      ``G / (tp * pp)`` over dp-cp; with replicate x shard data parallelism (a ``dp-replicate``
      kind: HSDP), a reduce-scatter and an all-gather over each shard group (``intra-dp-cp``,
      ``s`` ranks) on its own link and an all-reduce of ``G / (tp * pp * s)`` across the
      replicas on theirs; edp: of the expert gradients over edp;
    - bubble ``(pp - 1) / vpp`` times one micro-batch's compute, tp, cp and ep time.

    Links. On a :class:`Cluster` a dimension uses ``hardware.intra`` iff every group of its
    kind stays in one NVLink domain (the node by default), else ``hardware.inter``; all-reduces
    are flat rings. On a :class:`~topology.RankMap` each dimension is priced on the slowest
    link any of its groups crosses:

    - inside one host: ``hardware.intra``;
    - across hosts inside the NVLink tier's domain (the innermost ``Tier(nvlink=True)``): that
      tier's own ``bandwidth`` / ``latency`` where given, else ``hardware.intra``'s (tiers
      inner to it likewise, falling back to the NVLink link);
    - across any tier outside the NVLink domain: that tier's figures, ``hardware.inter``'s
      where missing; leaving the NVLink domain (or, with no NVLink tier, the host) without
      crossing such a tier: ``hardware.inter``.

    "Slowest" is the crossed level with the lowest bandwidth, ties going to the outermost;
    :meth:`Estimate.link` names it ("intra" inside the NVLink domain, "inter" for hosts with no
    tier crossed, else the tier). With ``hierarchical`` (the default; a Cluster is always flat),
    an all-reduce (tp, dp, edp) whose group spans ``k`` domains of that level with ``m`` ranks in
    each is a reduce-scatter inside the domains, an all-reduce of ``1 / m`` of the payload
    across, and an all-gather inside (``hierarchical_all_reduce``; the inner
    link is the slowest its per-domain parts cross); other groups run the flat ring on the
    slowest link; the dimension costs what its slowest group costs.

    Raises:
        TopologyError: if an argument has the wrong type, the topology has a GTP axis (not
            modelled yet), the global batch does not split into
            whole micro-batches per replica, the layers do not split over ``pp * vpp`` chunks,
            the rank map holds fewer than ``rank_offset + world_size`` ranks, or the figures
            overflow floating point.

    >>> from topology import Cluster, Topology
    >>> from topology.cost import TOY_GPU, Workload
    >>> toy = Workload("toy", samples=16, micro_batch=1, compute=20.0, gradient=500.0)
    >>> e = estimate(Topology(4), Cluster(4), toy, TOY_GPU)
    >>> round(e.compute, 6), round(e.comm("dp"), 6), round(e.total, 6)
    (8.0, 7.8, 15.8)
    >>> from topology import Allocation, Host, Tier
    >>> from topology.cost import H100_NODE, MODELS
    >>> racks = Allocation([Host(f"n{i}", 4, (f"r{i // 4}", f"s{i // 8}")) for i in range(16)],
    ...                    [Tier("nvl", nvlink=True), Tier("spine", bandwidth=25e9)])
    >>> e = estimate(Topology(64, tp=4, pp=2), racks.rank_map(64), MODELS["llama-13b"], H100_NODE)
    >>> e.link("tp"), e.link("dp"), e.link("pp")
    ('intra', 'nvl', 'spine')
    """
    work = _inputs(topology, where, model, hardware, distributed_optimizer)
    check_flag("hierarchical", hierarchical)
    try:
        if isinstance(where, Cluster):
            pricing = _on_cluster(topology, where, hardware)
        else:
            pricing = _on_rank_map(topology, where, hardware, hierarchical)
        return _estimate(topology, pricing, work, hardware, distributed_optimizer)
    except TopologyError as error:
        raise TopologyError(
            f"the step of {show(work.name)} on {topology} cannot be costed: {error}; "
            "the workload's figures are too large for floating point"
        ) from None


def _inputs(
    topology: object,
    where: object,
    model: object,
    hardware: object,
    distributed_optimizer: object,
) -> Workload:
    """Check the arguments of :func:`estimate` and return the workload."""
    topo = check_instance("topology", topology, Topology, "a Topology, e.g. Topology(8, tp=2)")
    if topo.gtp > 1 or topo.egtp > 1:
        raise TopologyError(
            f"estimate does not model Megatron's GTP axes yet (gtp {topo.gtp}, egtp {topo.egtp}: "
            "weight all-gathers, batches split over gtp); estimate the layout without them, "
            "e.g. attrs.evolve(topology, gtp=1, egtp=1)"
        )
    if not isinstance(where, RankMap | Cluster):
        try:
            check_instance("cluster", where, Cluster, "a Cluster, e.g. Cluster(gpus_per_node=8)")
        except TopologyError as error:
            raise TopologyError(
                f"{error}; or give a RankMap, e.g. Allocation(hosts).rank_map(world_size)"
            ) from None
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
    if isinstance(where, RankMap):
        end = topo.rank_offset + topo.world_size
        if where.world_size < end:
            raise TopologyError(
                f"the rank map holds {where.world_size} ranks but {topo} needs rank_offset + "
                f"world_size = {end}; give an allocation with more GPUs"
            )
    return work


@attrs.frozen
class _Pricing:
    """Per dimension the link (None: no communication) and its name, and how to all-reduce."""

    links: dict[str, Link | None]
    names: dict[str, str]
    all_reduce: Callable[[str, int, float], float]
    kind_link: Callable[[str], Link]
    """The link one kind's groups are priced on (the slowest any of them crosses)."""


def _sizes(t: Topology) -> dict[str, int]:
    return {"tp": t.tp, "cp": t.cp, "ep": t.ep, "pp": t.pp, "dp": t.dp * t.cp, "edp": t.edp}


def _on_cluster(t: Topology, cluster: Cluster, hardware: Hardware) -> _Pricing:
    sizes = _sizes(t)
    crossing = {
        name: crosses_domains(t, cluster, COST_KINDS[name]) if sizes[name] > 1 else None
        for name in DIMENSIONS
    }
    links = {
        name: None if leaves is None else hardware.link(leaves) for name, leaves in crossing.items()
    }

    def reduce(name: str, n: int, payload: float) -> float:
        link = links[name]
        return 0.0 if link is None else ring_all_reduce(link, n, payload)

    names = {name: _LINK_NAMES[leaves] for name, leaves in crossing.items()}
    return _Pricing(
        links, names, reduce, lambda kind: hardware.link(crosses_domains(t, cluster, kind))
    )


def _on_rank_map(
    t: Topology, rank_map: RankMap, hardware: Hardware, hierarchical: bool
) -> _Pricing:
    sizes = _sizes(t)
    tiers = Tiers.of(rank_map, hardware)
    routes: dict[str, Route | None] = {
        name: tiers.route(t, COST_KINDS[name]) if sizes[name] > 1 else None for name in DIMENSIONS
    }

    def reduce(name: str, n: int, payload: float) -> float:
        route = routes[name]
        return 0.0 if route is None else tiers.all_reduce(route, payload, hierarchical=hierarchical)

    return _Pricing(
        links={name: None if r is None else r.level.link for name, r in routes.items()},
        names={name: "none" if r is None else r.level.name for name, r in routes.items()},
        all_reduce=reduce,
        kind_link=lambda kind: _route_link(tiers, t, kind, hardware),
    )


def _route_link(tiers: Tiers, t: Topology, kind: str, hardware: Hardware) -> Link:
    route = tiers.route(t, kind)
    return hardware.intra if route is None else route.level.link


def _hsdp(t: Topology, pricing: _Pricing, gradient: float) -> float:
    """Gradient reduction of replicate x shard data parallelism (HSDP, Megatron's distributed
    optimizer instances): reduce-scatter and all-gather inside each shard group (dp-shard x cp,
    ``intra-dp-cp``), all-reduce of one shard's ``gradient / s`` across the replicas."""
    shard = t.size("intra-dp-cp")
    inner = pricing.kind_link("intra-dp-cp")
    outer = pricing.kind_link("dp-replicate")
    return two_level_all_reduce(inner, outer, shard, t.size("dp-replicate"), gradient)


def _estimate(
    t: Topology,
    pricing: _Pricing,
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
    links, reduce = pricing.links, pricing.all_reduce

    compute_mb = hardware.compute_time(work.compute * b / (tp * cp * pp))
    per_mb = {"tp": 0.0, "cp": 0.0, "ep": 0.0}
    if links["tp"] is not None:
        payload = b * work.activation / cp
        per_mb["tp"] = stage_layers * work.tp_collectives * reduce("tp", tp, payload)
    if (link := links["cp"]) is not None:
        per_mb["cp"] = stage_layers * 3 * (cp - 1) * send(link, 2 * shard)
    if (link := links["ep"]) is not None and moe_layers:
        per_mb["ep"] = moe_layers * 4 * ring_all_gather(link, ep, work.top_k * shard)
    comm = {name: seconds * m for name, seconds in per_mb.items()}
    comm["pp"] = 0.0
    if (link := links["pp"]) is not None:
        comm["pp"] = 2 * (vpp * m + pp - 1) * send(link, shard)
    comm["dp"] = 0.0
    if links["dp"] is not None and work.gradient:
        gradient = work.gradient / (tp * pp)
        if "dp-replicate" in t.kinds:
            comm["dp"] = _hsdp(t, pricing, gradient)
        else:
            comm["dp"] = reduce("dp", dp * cp, gradient)
    comm["edp"] = 0.0
    if links["edp"] is not None and work.expert_gradient:
        comm["edp"] = reduce("edp", t.edp, work.expert_gradient / (etp * ep * pp))

    bubble = (pp - 1) / vpp * (compute_mb + sum(per_mb.values()))
    return Estimate(
        topology=t,
        micro_batches=m,
        compute=m * compute_mb,
        communication=tuple((name, comm[name]) for name in DIMENSIONS),
        links=tuple((name, pricing.names[name]) for name in DIMENSIONS),
        bubble=bubble,
        memory=memory(t, work, hardware.memory, distributed_optimizer=distributed_optimizer),
    )
