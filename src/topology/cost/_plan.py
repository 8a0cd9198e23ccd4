"""plan(): every layout of a world size, costed and ranked, with the reasons the winner wins."""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

from .._cluster import Cluster
from .._errors import TopologyError
from .._topology import Topology
from ._estimate import DIMENSIONS, Estimate, estimate
from ._hardware import H100_NODE, Hardware
from ._model import Model, Workload

__all__ = ["DEFAULT_ORDERS", "Plan", "plan"]

DEFAULT_ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp")
"""Megatron's default order, the same with dp outermost, and one with dp innermost."""

_LINES = ("compute", *DIMENSIONS, "bubble")


@attrs.frozen
class Plan:
    """Layouts of one world size ranked by estimated step time, fastest first.

    Attributes:
        world_size, cluster, hardware, model: what was planned for.
        ranked: the best layouts that fit in memory and pass the checks, fastest first.
        considered: how many layouts were costed.
        rejected: ``(reason, count)``: "invalid" (Megatron rejects the order), "batch" (the
            global batch does not split into whole micro-batches), "memory" (does not fit),
            "check" (``topology.check`` found an error).
        checked: True if ``topology.check`` was available and screened the ranked layouts.
    """

    world_size: int
    cluster: Cluster
    hardware: str
    model: str
    ranked: tuple[Estimate, ...]
    considered: int
    rejected: tuple[tuple[str, int], ...]
    checked: bool

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
            "gpus_per_node": self.cluster.gpus_per_node,
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
            f"({self.cluster.gpus_per_node} per node): {self.considered} layouts costed, "
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
    return f"no {dimension}" if link == "none" else f"{dimension} {link}-node"


def _stages(estimate: Estimate) -> str:
    return f"pp{estimate.topology.pp} vpp{estimate.topology.vpp or 1}"


def _sizes(topology: Topology) -> tuple[int | None, ...]:
    t = topology
    return (t.tp, t.cp, t.ep, t.pp, t.vpp)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _layouts(
    world_size: int,
    work: Workload,
    experts: int,
    max_tp: int,
    orders: Sequence[str],
    vpps: Sequence[int | None],
) -> Iterator[Topology | None]:
    divisors = _divisors(world_size)
    for tp in (d for d in divisors if d <= max_tp):
        for pp in (d for d in _divisors(world_size // tp) if work.layers % d == 0):
            for cp in _divisors(world_size // (tp * pp)):
                dp = world_size // (tp * pp * cp)
                for ep in (e for e in _divisors(experts) if (tp * cp * dp) % e == 0):
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


def _checker() -> Callable[[Topology, Cluster], bool] | None:
    """``topology.check`` as a predicate, if the installed core has it."""
    try:
        module = importlib.import_module("topology._report")
    except ModuleNotFoundError:
        return None
    check = getattr(module, "check", None)
    if check is None:
        return None
    return lambda topology, cluster: bool(check(topology, cluster).ok)


def plan(
    world_size: int,
    cluster: Cluster,
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

    Candidates: every factorisation ``tp * cp * pp * dp = world_size`` (and ``ep`` dividing the
    model's experts for MoE) with ``tp <= max_tp`` (default: the NVLink domain, since a tp group
    leaving it is never faster), ``pp`` dividing the layers, each of ``orders`` and ``vpp``
    (interleaving only for ``pp >= 3`` and layers divisible by ``pp * vpp``). Layouts whose batch
    does not split or that do not fit in memory are dropped; the fastest are then screened by
    ``topology.check`` (when present) until ``top`` pass. An order that puts the same groups on
    the same links as a faster-listed one (equal sizes, links and cost) is listed once.

    Raises:
        TopologyError: if ``cluster`` has a node count that does not give ``world_size`` GPUs.

    >>> from topology import Cluster
    >>> from topology.cost import MODELS
    >>> result = plan(64, Cluster(8), MODELS["llama-7b"], top=3)
    >>> result.best.topology.tp <= 8, len(result.ranked)
    (True, 3)
    """
    if type(world_size) is not int or world_size < 1:
        raise TopologyError(f"world_size must be an int >= 1, got {world_size!r}")
    if type(top) is not int or top < 1:
        raise TopologyError(f"top must be an int >= 1, got {top!r}")
    if cluster.world_size is not None and cluster.world_size != world_size:
        raise TopologyError(
            f"world_size {world_size} does not match the cluster's {cluster.nodes} nodes * "
            f"{cluster.gpus_per_node} GPUs = {cluster.world_size}; drop nodes or fix world_size"
        )
    work = model.workload() if isinstance(model, Model) else model
    experts = model.experts if isinstance(model, Model) else 1
    bound = cluster.domain_size if max_tp is None else max_tp
    rejected: Counter[str] = Counter()
    feasible: list[Estimate] = []
    considered = 0
    for topology in _layouts(world_size, work, experts, bound, orders, vpp):
        if topology is None:
            rejected["invalid"] += 1
            continue
        considered += 1
        if work.samples % ((topology.dp or 1) * work.micro_batch):
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
    check = _checker()
    ranked: list[Estimate] = []
    seen: set[tuple[Any, ...]] = set()
    for result in feasible:
        if len(ranked) == top:
            break
        twin = (_sizes(result.topology), result.links, result.total)
        if twin in seen:
            continue
        seen.add(twin)
        if check is not None and not check(result.topology, cluster):
            rejected["check"] += 1
            continue
        ranked.append(result)
    return Plan(
        world_size=world_size,
        cluster=cluster,
        hardware=hardware.name,
        model=work.name,
        ranked=tuple(ranked),
        considered=considered,
        rejected=tuple(sorted(rejected.items())),
        checked=check is not None,
    )
