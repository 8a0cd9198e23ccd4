"""plan(): every layout of a world size, costed and ranked, with the reasons the winner wins."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, TypeGuard

import attrs

from .._args import check_size, divisors, show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.cluster import Cluster
from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from .._preflight.check import check
from ._estimate import DIMENSIONS, Estimate, estimate
from ._fields import check_count, check_flag, check_instance, count, flag, instance_of, text
from ._hardware import H100_NODE, Hardware
from ._model import Model, Workload

__all__ = ["DEFAULT_ORDERS", "Plan", "plan"]

DEFAULT_ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp")
"""Megatron's default order, the same with dp outermost, and one with dp innermost."""

_LINES = ("compute", *DIMENSIONS, "bubble")


def _estimates(value: object) -> tuple[Estimate, ...]:
    if not _is_list(value) or not all(isinstance(e, Estimate) for e in value):
        raise TopologyError(f"ranked must be a list of Estimates, got {show(value)}")
    return tuple(value)


def _reasons(value: object) -> tuple[tuple[str, int], ...]:
    try:
        pairs = dict(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        pairs = None
    if not isinstance(pairs, dict) or not all(
        isinstance(k, str) and type(n) is int and n >= 0 for k, n in pairs.items()
    ):
        raise TopologyError(
            f"rejected must pair reasons with counts, e.g. (('memory', 3),), got {show(value)}"
        )
    return tuple(pairs.items())


@attrs.frozen
class Plan:
    """Layouts of one world size ranked by estimated step time, fastest first.

    Attributes:
        world_size, cluster, hardware, model: what was planned for (``cluster`` is a
            :class:`Cluster` or the :class:`~topology.RankMap` the layouts were costed on).
        ranked: the best layouts that fit in memory and pass the checks, fastest first.
        considered: how many layouts were costed.
        rejected: ``(reason, count)``: "invalid" (Megatron rejects the order), "batch" (the
            global batch does not split into whole micro-batches), "memory" (does not fit),
            "check" (``topology.check`` found an error).
        checked: True when ``topology.check`` screened the ranked layouts (always, today).
    """

    world_size: int = attrs.field(validator=lambda _, __, value: check_size("world_size", value))
    cluster: Cluster | RankMap = attrs.field(
        validator=instance_of((Cluster, RankMap), "a Cluster or a RankMap")
    )
    hardware: str = attrs.field(validator=text)
    model: str = attrs.field(validator=text)
    ranked: tuple[Estimate, ...] = attrs.field(converter=_estimates)
    considered: int = attrs.field(validator=count)
    rejected: tuple[tuple[str, int], ...] = attrs.field(converter=_reasons)
    checked: bool = attrs.field(validator=flag)

    @property
    def gpus_per_node(self) -> int:
        """GPUs per node of the cluster; on a rank map, the most any host runs."""
        if isinstance(self.cluster, Cluster):
            return self.cluster.gpus_per_node
        return max(host.gpus for host in self.cluster.hosts)

    @property
    def best(self) -> Estimate:
        """The fastest layout.

        Raises:
            TopologyError: if no layout fits.
        """
        if not self.ranked:
            reasons = ", ".join(f"{n} by {r}" for r, n in self.rejected) or "none considered"
            raise TopologyError(
                f"no layout of {self.world_size} ranks fits {self.model} on {self.hardware} "
                f"({reasons}); use more GPUs, a smaller micro-batch or a bigger device"
            )
        return self.ranked[0]

    def explain(self, top: int = 3) -> str:
        """Why the winner wins: the lines where it saves most against each of the next layouts."""
        check_count("top", top)
        if not self.ranked:
            return "no layout fits"
        best = self.ranked[0]
        lines = [f"winner {best.topology}: {best.total:.4g} s per step"]
        for place, other in enumerate(self.ranked[1:top], start=2):
            lines.append(
                f"  beats #{place} {other.topology} ({other.total:.4g} s) by "
                f"{other.total - best.total:.3g} s: {_why(best, other)}"
            )
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the inputs, counts and every ranked estimate."""
        return {
            "world_size": self.world_size,
            "gpus_per_node": self.gpus_per_node,
            "hardware": self.hardware,
            "model": self.model,
            "considered": self.considered,
            "rejected": dict(self.rejected),
            "checked": self.checked,
            "ranked": [estimate.to_dict() for estimate in self.ranked],
            "explanation": self.explain(),
        }

    def __str__(self) -> str:
        header = (
            f"{self.model} on {self.world_size} x {self.hardware} "
            f"({self.gpus_per_node} per node): {self.considered} layouts costed, "
            + ", ".join(f"{n} rejected by {r}" for r, n in self.rejected)
        )
        rows = [header.rstrip(", ")]
        for place, est in enumerate(self.ranked, start=1):
            parts = [f"compute {est.compute:.3g}"]
            parts += [f"{n} {s:.3g}" for n, s in est.communication if s]
            if est.bubble:
                parts.append(f"bubble {est.bubble:.3g}")
            rows.append(f"{place:3}. {est.total:8.4g} s  {est.topology}  [{', '.join(parts)}]")
        rows.append(self.explain())
        return "\n".join(rows)


def _line(estimate: Estimate, name: str) -> float:
    if name == "compute":
        return estimate.compute
    if name == "bubble":
        return estimate.bubble
    return estimate.comm(name)


def _why(best: Estimate, other: Estimate) -> str:
    savings = sorted(((_line(other, n) - _line(best, n), n) for n in _LINES), reverse=True)
    reasons = []
    for saved, name in savings[:2]:
        if saved <= 0:
            break
        text = f"{saved:.3g} s less {name}" + ("" if name in ("compute", "bubble") else " comm")
        if name in DIMENSIONS and best.link(name) != other.link(name):
            text += f" ({_where(best, name)} instead of {_where(other, name)})"
        elif name == "bubble" and _stages(best) != _stages(other):
            text += f" ({_stages(best)} instead of {_stages(other)})"
        reasons.append(text)
    worst = savings[-1]
    if worst[0] < 0:
        comm = "" if worst[1] in ("compute", "bubble") else " comm"
        reasons.append(f"though it pays {-worst[0]:.3g} s more {worst[1]}{comm}")
    return "; ".join(reasons) or "equal cost"


def _where(estimate: Estimate, dimension: str) -> str:
    link = estimate.link(dimension)
    if link == "none":
        return f"no {dimension}"
    return (
        f"{dimension} {link}-node" if link in ("intra", "inter") else f"{dimension} across {link}"
    )


def _stages(estimate: Estimate) -> str:
    return f"pp{estimate.topology.pp} vpp{estimate.topology.vpp or 1}"


def _sizes(topology: Topology) -> tuple[int | None, ...]:
    t = topology
    return (t.tp, t.cp, t.ep, t.pp, t.vpp)


def _layouts(
    world_size: int,
    work: Workload,
    experts: int,
    max_tp: int,
    orders: Sequence[str],
    vpps: Sequence[int | None],
) -> Iterator[Topology | None]:
    """Every candidate of :func:`plan`, or None where Megatron rejects the combination.

    Algorithm: the divisors of ``W`` come from its prime factors once; the divisors of any
    ``W / (tp * pp)`` are the divisors of ``W`` that divide it. So the work is proportional to
    the number of factorisations ``tp * pp * cp * dp = W`` (times the divisor count for the
    filtering), never to ``W``.
    """
    world_divisors = divisors(world_size)
    expert_divisors = divisors(experts)

    def dividing(n: int) -> Iterator[int]:
        return (d for d in world_divisors if d <= n and n % d == 0)

    for tp in (d for d in world_divisors if d <= max_tp):
        for pp in (d for d in dividing(world_size // tp) if work.layers % d == 0):
            for cp in dividing(world_size // (tp * pp)):
                dp = world_size // (tp * pp * cp)
                for ep in (e for e in expert_divisors if (tp * cp * dp) % e == 0):
                    for order in orders:
                        for vpp in vpps:
                            if vpp is not None and (pp < 3 or work.layers % (pp * vpp)):
                                continue
                            yield _layout(world_size, tp, pp, cp, ep, vpp, order)


def _layout(
    world_size: int, tp: int, pp: int, cp: int, ep: int, vpp: int | None, order: str
) -> Topology | None:
    try:
        return Topology(world_size, tp=tp, pp=pp, cp=cp, ep=ep, vpp=vpp, order=order)
    except TopologyError:
        return None


def _orders(orders: object) -> tuple[str, ...]:
    if not _is_list(orders) or not orders:
        raise TopologyError(
            f"orders must be a non-empty list of order strings like {DEFAULT_ORDERS[0]!r}, "
            f"got {show(orders)}"
        )
    for index, order in enumerate(orders):
        try:
            Topology(1, order=order)
        except TopologyError as error:
            raise TopologyError(f"orders[{index}] is not a valid order: {error}") from None
    return tuple(orders)


def _vpps(vpp: object) -> tuple[int | None, ...]:
    if not _is_list(vpp) or not vpp:
        raise TopologyError(
            f"vpp must be a non-empty list of virtual stage counts or None, e.g. [None, 2], "
            f"got {show(vpp)}"
        )
    for index, value in enumerate(vpp):
        if value is not None:
            check_count(f"vpp[{index}]", value)
    return tuple(vpp)


def _is_list(value: object) -> TypeGuard[Sequence[Any]]:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def _inputs(
    world_size: object,
    cluster: object,
    model: object,
    hardware: object,
    top: object,
    max_tp: object,
    distributed_optimizer: object,
) -> tuple[int, Cluster | RankMap, Workload, int, Hardware]:
    """Check :func:`plan`'s scalar arguments; return the world, cluster, workload and experts."""
    world = check_size("world_size", world_size)
    if isinstance(cluster, Allocation):
        if cluster.gpus < world:
            raise TopologyError(
                f"world_size {world} exceeds the allocation's {cluster.gpus} GPUs; "
                "use fewer ranks or more hosts"
            )
        cluster = cluster.rank_map(world)
    if isinstance(cluster, RankMap):
        if cluster.world_size != world:
            raise TopologyError(
                f"world_size {world} does not match the rank map's {cluster.world_size} ranks; "
                f"use Allocation.rank_map({world})"
            )
    else:
        try:
            cluster = check_instance("cluster", cluster, Cluster, "a Cluster, e.g. Cluster(8)")
        except TopologyError as error:
            raise TopologyError(
                f"{error}; or give a RankMap or an Allocation of {world} GPUs"
            ) from None
    if isinstance(model, Model):
        work, experts = model.workload(), model.experts
    else:
        hint = "a Model or a Workload, e.g. MODELS['llama-7b']"
        work, experts = check_instance("model", model, Workload, hint), 1
    hardware = check_instance("hardware", hardware, Hardware, "a Hardware, e.g. H100_NODE")
    check_count("top", top)
    if max_tp is not None:
        check_count("max_tp", max_tp)
    check_flag("distributed_optimizer", distributed_optimizer)
    if (
        isinstance(cluster, Cluster)
        and cluster.world_size is not None
        and cluster.world_size != world
    ):
        raise TopologyError(
            f"world_size {world} does not match the cluster's {cluster.nodes} nodes * "
            f"{cluster.gpus_per_node} GPUs = {cluster.world_size}; drop nodes or fix world_size"
        )
    return world, cluster, work, experts, hardware


def _domain_size(where: Cluster | RankMap) -> int:
    """The most ranks one NVLink domain holds (the host's when no tier is NVLink)."""
    if isinstance(where, Cluster):
        return where.domain_size
    nvlink = next((t for t, tier in enumerate(where.tiers) if tier.nvlink), None)
    labels = where.nodes if nvlink is None else where.domain_ids(nvlink)
    return max(Counter(labels).values())


def plan(
    world_size: int,
    cluster: Cluster | RankMap | Allocation,
    model: Model | Workload,
    hardware: Hardware = H100_NODE,
    *,
    top: int = 5,
    orders: Sequence[str] = DEFAULT_ORDERS,
    vpp: Sequence[int | None] = (None, 2),
    max_tp: int | None = None,
    distributed_optimizer: bool = True,
) -> Plan:
    """Cost every layout of ``world_size`` ranks on ``cluster`` and rank the ones that fit.

    ``cluster`` is a :class:`Cluster`, a :class:`~topology.RankMap` of ``world_size`` ranks
    (hosts in launcher order and the tiers above them: layouts are priced tier by tier, see
    :func:`~topology.cost.estimate`) or an :class:`~topology.Allocation` (its hosts in listed
    order; pass ``allocation.rank_map(world_size, order=...)`` for another launcher order).

    Candidates: every factorisation ``tp * cp * pp * dp = world_size`` (and ``ep`` dividing the
    model's experts for MoE) with ``tp <= max_tp`` (default: the NVLink domain, since a tp group
    leaving it is never faster), ``pp`` dividing the layers, each of ``orders`` and ``vpp``
    (interleaving only for ``pp >= 3`` and layers divisible by ``pp * vpp``). Layouts whose batch
    does not split or that do not fit in memory are dropped; the fastest are then screened by
    ``topology.check`` until ``top`` pass. An order that puts the same groups on the same links
    as a faster-listed one (equal sizes, links and cost) is listed once. The time grows with the
    number of candidates, not with ``world_size``.

    Raises:
        TopologyError: if an argument has the wrong type or value (``max_tp`` and ``top`` are
            ints >= 1, ``orders`` and ``vpp`` non-empty lists), ``cluster`` has a node count
            that does not give ``world_size`` GPUs, or a rank map of another size.

    >>> from topology import Cluster
    >>> from topology.cost import MODELS
    >>> result = plan(64, Cluster(8), MODELS["llama-7b"], top=3)
    >>> result.best.topology.tp <= 8, len(result.ranked)
    (True, 3)
    >>> from topology import Allocation, Host, Tier
    >>> racks = Allocation([Host(f"n{i}", 4, (f"r{i // 4}", f"s{i // 8}")) for i in range(16)],
    ...                    [Tier("nvl", nvlink=True), Tier("spine", bandwidth=10e9)])
    >>> result = plan(64, racks, MODELS["llama-13b"], top=3)
    >>> result.gpus_per_node, sorted({link for e in result.ranked for _, link in e.links})
    (4, ['intra', 'none', 'nvl', 'spine'])
    """
    world, cluster, work, experts, hardware = _inputs(
        world_size, cluster, model, hardware, top, max_tp, distributed_optimizer
    )
    candidates = _layouts(
        world,
        work,
        experts,
        _domain_size(cluster) if max_tp is None else max_tp,
        _orders(orders),
        _vpps(vpp),
    )
    rejected: Counter[str] = Counter()
    feasible: list[Estimate] = []
    considered = 0
    for topology in candidates:
        if topology is None:
            rejected["invalid"] += 1
            continue
        considered += 1
        if work.samples % (topology.dp * work.micro_batch):
            rejected["batch"] += 1
            continue
        result = estimate(
            topology, cluster, work, hardware, distributed_optimizer=distributed_optimizer
        )
        if not result.fits:
            rejected["memory"] += 1
            continue
        feasible.append(result)
    feasible.sort(key=lambda e: (e.total, str(e.topology)))
    ranked: list[Estimate] = []
    seen: set[tuple[Any, ...]] = set()
    for result in feasible:
        if len(ranked) == top:
            break
        twin = (_sizes(result.topology), result.links, result.total)
        if twin in seen:
            continue
        seen.add(twin)
        if not check(result.topology, cluster).ok:
            rejected["check"] += 1
            continue
        ranked.append(result)
    return Plan(
        world_size=world,
        cluster=cluster,
        hardware=hardware.name,
        model=work.name,
        ranked=tuple(ranked),
        considered=considered,
        rejected=tuple(sorted(rejected.items())),
        checked=True,
    )
