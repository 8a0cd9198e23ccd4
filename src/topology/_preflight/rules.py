"""The pre-launch rules behind :func:`topology.check` (private).

Each rule looks at the layout, the cluster and the placement table and returns findings with a
stable code. Rules that blame the order compare against every other order of the five axes
(at most 120 candidates, built only when a rule fires) and name the best one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import permutations

import attrs

from .._errors import TopologyError
from .._machine.cluster import Cluster
from .._megatron.kinds import CROSSING_SEVERITY
from .._megatron.shapes import shape_of
from .._megatron.topology import Topology
from .communicators import Communicators
from .findings import Finding
from .placement import Placement, placement

__all__ = ["RULES", "run_rules"]

_MEGATRON_ORDER = "tp-cp-ep-dp-pp"


@attrs.define
class _Context:
    topo: Topology
    cluster: Cluster
    rows: dict[str, Placement]
    counts: Communicators
    max_communicators: int
    _candidates: list[Topology] | None = None
    _cache: dict[tuple[str, str], Placement] = attrs.Factory(dict)

    @property
    def unit(self) -> int:
        return self.cluster.domain_size

    def where(self) -> str:
        if self.cluster.nvlink_domain is None:
            return f"one {self.cluster.gpus_per_node}-GPU node"
        return f"one {self.cluster.domain_size}-GPU NVLink domain"

    def candidates(self) -> list[Topology]:
        if self._candidates is None:
            found = []
            for tokens in permutations(self.topo.order.split("-")):
                order = "-".join(tokens)
                if order == self.topo.order:
                    continue
                try:
                    found.append(attrs.evolve(self.topo, order=order))
                except TopologyError:
                    continue
            self._candidates = found
        return self._candidates

    def row(self, topo: Topology, kind: str) -> Placement:
        if topo is self.topo:
            return self.rows[kind]
        key = (topo.order, kind)
        if key not in self._cache:
            self._cache[key] = placement(topo, self.cluster, kind)
        return self._cache[key]

    def best_order(self, kind: str, score: Callable[[Topology], tuple[int, ...]]) -> Topology:
        """The candidate with the lowest score; ties go to Megatron's order, then fewest moves."""
        current = self.topo.order.split("-")

        def moves(topo: Topology) -> int:
            return sum(a != b for a, b in zip(topo.order.split("-"), current, strict=True))

        return min(
            self.candidates(),
            key=lambda t: (*score(t), t.order != _MEGATRON_ORDER, moves(t)),
        )


def _world_size(ctx: _Context) -> list[Finding]:
    topo, cluster = ctx.topo, ctx.cluster
    if cluster.world_size is None:
        return []
    end = topo.rank_offset + topo.world_size
    have = cluster.world_size
    where = f"nodes({cluster.nodes}) * gpus_per_node({cluster.gpus_per_node}) = {have}"
    if topo.rank_offset == 0 and end != have:
        fix = (
            f"use world_size {have} or --nodes {-(-end // cluster.gpus_per_node)}"
            if end % cluster.gpus_per_node == 0 or end > have
            else f"use world_size {have}"
        )
        return [
            Finding(
                "error",
                "world-size-mismatch",
                f"world_size {topo.world_size} does not match the allocation of {where} GPUs; "
                f"{fix}",
            )
        ]
    if end > have:
        return [
            Finding(
                "error",
                "world-size-mismatch",
                f"rank_offset({topo.rank_offset}) + world_size({topo.world_size}) = {end} "
                f"exceeds the allocation of {where} GPUs; shrink the layout or add nodes",
            )
        ]
    return []


def _partial_node(ctx: _Context) -> list[Finding]:
    gpus = ctx.cluster.gpus_per_node
    world = ctx.topo.world_size
    if world % gpus == 0:
        return []
    used = world % gpus
    start = ctx.topo.rank_offset + world - used
    return [
        Finding(
            "warning",
            "partial-node",
            f"world_size {world} is not a multiple of gpus_per_node {gpus}: one node runs only "
            f"{used} of its {gpus} GPUs; use a multiple of {gpus}",
            range(start, start + used),
        )
    ]


def _rank_offset(ctx: _Context) -> list[Finding]:
    offset = ctx.topo.rank_offset
    gpus = ctx.cluster.gpus_per_node
    if offset % gpus == 0:
        return []
    aligned = offset - offset % gpus
    return [
        Finding(
            "warning",
            "rank-offset-unaligned",
            f"rank_offset {offset} is not a multiple of gpus_per_node {gpus}, so the layout "
            f"starts mid-node and shares node {offset // gpus} with other work; use rank_offset "
            f"{aligned} or {aligned + gpus}",
            range(aligned, aligned + gpus),
        )
    ]


def _duplicate(ctx: _Context, kind: str) -> bool:
    """True for ``etp`` when its groups are the ``tp`` groups (reported once, as tp)."""
    if kind != "etp":
        return False
    etp, tp = shape_of(ctx.topo, "etp"), shape_of(ctx.topo, "tp")
    return etp is not None and tp is not None and etp.key == tp.key


def _too_large(kind: str) -> Callable[[_Context], list[Finding]]:
    def rule(ctx: _Context) -> list[Finding]:
        size = ctx.topo.size(kind)
        unit = ctx.unit
        if size <= unit or _duplicate(ctx, kind):
            return []
        row = ctx.rows[kind]
        return [
            Finding(
                "error",
                f"{kind}-larger-than-node",
                f"{kind}({size}) is larger than {ctx.where()}, so every {kind} collective "
                f"crosses the network; use {kind} <= {unit} and grow another axis instead",
                row.example,
            )
        ]

    return rule


def _crossing(kind: str) -> Callable[[_Context], list[Finding]]:
    def rule(ctx: _Context) -> list[Finding]:
        row = ctx.rows[kind]
        size = row.size
        need = -(-size // ctx.unit)
        if size == 1 or row.domains <= need or _duplicate(ctx, kind):
            return []

        def score(topo: Topology) -> tuple[int, ...]:
            fast = tuple(ctx.row(topo, k).domains for k in ("tp", "etp") if k != kind)
            return (ctx.row(topo, kind).domains, *fast)

        best = ctx.best_order(kind, score) if ctx.candidates() else None
        unit_name = "nodes" if ctx.cluster.nvlink_domain is None else "NVLink domains"
        spread = (
            f"order {ctx.topo.order!r} spreads each {kind} group of {size} ranks over up to "
            f"{row.domains} {unit_name}"
        )
        if best is not None and ctx.row(best, kind).domains < row.domains:
            better = ctx.row(best, kind).domains
            return [
                Finding(
                    CROSSING_SEVERITY[kind],
                    f"{kind}-crosses-nodes",
                    f"{spread} although {need} would do; order {best.order!r} keeps each "
                    f"{kind} group within {better}",
                    row.example,
                )
            ]
        return [
            Finding(
                "warning",
                f"{kind}-straddles-nodes",
                f"{spread} although {need} would hold it, and no order does better because "
                f"{kind}({size}) or rank_offset({ctx.topo.rank_offset}) does not divide the "
                f"{ctx.unit} GPUs of {ctx.where()}; make both multiples or divisors of "
                f"{ctx.unit}",
                row.example,
            )
        ]

    return rule


def _pipeline_vs_data(ctx: _Context) -> list[Finding]:
    topo = ctx.topo
    if topo.pp == 1 or topo.dp == 1:
        return []
    pp_row, dp_row = ctx.rows["pp"], ctx.rows["dp"]
    if pp_row.nodes_min >= topo.pp or dp_row.nodes <= dp_row.best_nodes:
        return []

    def score(candidate: Topology) -> tuple[int, ...]:
        fast = tuple(ctx.row(candidate, k).domains for k in ("tp", "etp", "cp"))
        return (*fast, ctx.row(candidate, "dp").nodes)

    best = ctx.best_order("dp", score)
    best_dp = ctx.row(best, "dp").nodes
    if best_dp >= dp_row.nodes or score(best)[:3] > tuple(
        ctx.rows[k].domains for k in ("tp", "etp", "cp")
    ):
        return []
    return [
        Finding(
            "warning",
            "stages-share-node",
            f"pipeline stages share nodes (a pp group of {topo.pp} spans {pp_row.nodes_min} "
            f"node(s)) while each dp group of {topo.dp} spans {dp_row.nodes} nodes; dp's "
            f"gradient all-reduce moves the whole stage's gradients every step, far more than "
            f"pp's point-to-point activations, so dp inside the node is cheaper: order "
            f"{best.order!r} puts each dp group on {best_dp} node(s) and the stages across nodes",
            ctx.rows["dp"].example,
        )
    ]


def _communicator_budget(ctx: _Context) -> list[Finding]:
    counts = ctx.counts
    findings = [
        Finding(
            "info",
            "communicators",
            f"each rank joins {counts.per_rank_min} to {counts.per_rank_max} distinct "
            f"communicators; strategy 'all' makes {counts.all} new_group calls, 'local' at most "
            f"{counts.local} per rank, Megatron's initialize_model_parallel {counts.megatron}",
        )
    ]
    if counts.per_rank_max > ctx.max_communicators:
        findings.append(
            Finding(
                "warning",
                "too-many-communicators",
                f"one rank joins {counts.per_rank_max} distinct communicators, more than "
                f"max_communicators({ctx.max_communicators}); each NCCL communicator holds its "
                f"own GPU buffers, so create only the kinds you use (ProcessGroups kinds=...)",
            )
        )
    return findings


RULES: tuple[Callable[[_Context], list[Finding]], ...] = (
    _world_size,
    _partial_node,
    _rank_offset,
    _too_large("tp"),
    _too_large("etp"),
    _crossing("tp"),
    _crossing("etp"),
    _crossing("cp"),
    _crossing("ep"),
    _pipeline_vs_data,
    _communicator_budget,
)
"""Every rule, in the order findings are reported (before sorting by severity)."""


def run_rules(
    topo: Topology,
    cluster: Cluster,
    rows: Sequence[Placement],
    counts: Communicators,
    max_communicators: int,
) -> list[Finding]:
    """Run :data:`RULES` and return their findings."""
    ctx = _Context(topo, cluster, {row.kind: row for row in rows}, counts, max_communicators)
    return [finding for rule in RULES for finding in rule(ctx)]
