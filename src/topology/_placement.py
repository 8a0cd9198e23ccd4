"""Where the groups of each kind land on nodes, computed from their structure (private).

Every kind's groups are translates of one offset set ``X`` (a group is ``base + X``) whose bases
are ``offset + sum(c_j * e_j)`` over the kind's *outer* runs. ``X`` is a sum of runs
``(size, stride)`` sorted by stride, each stride at least the span of the runs below it (the
digits of a mixed-radix rank). Node ``n(r) = r // u`` for a unit ``u`` (GPUs per node, or per
NVLink domain), so the number of units one group spans depends only on ``base mod u``.

Algorithm (no group is enumerated unless its shape is irregular):

1. Residues: the set of ``base mod u`` over all groups is built run by run; run ``(s, e)`` adds
   ``c * e mod u`` for ``c < min(s, u / gcd(e, u))`` (the multiples cycle after that), so the set
   never exceeds ``u`` entries and each residue keeps one witness base.
2. Span of ``base + X`` for one residue: the runs with stride ``< u`` form the low part ``L``;
   consecutive points of ``L`` are less than ``u`` apart, so ``base + L`` covers the contiguous
   units ``n(base) .. n(base + max L)``, ``w`` of them. Each remaining run must have a stride
   that is a multiple of ``u`` (else we fall back to enumerating that one group): it copies the
   covered units ``s`` times, ``e / u`` units apart. With ``t`` the extent of the cover so far,
   copies are disjoint when ``t <= e / u`` (count multiplies by ``s``) and merge into one
   contiguous block when the cover is contiguous (extent ``(s - 1) * e / u + t``).

Both steps cost O(runs * u); a kind whose groups are not translates of one product of runs (an
``intra-dp-cp`` chunk that cuts an axis unevenly) is measured on every group when the world is
small and on the first, middle and last groups otherwise (``exact`` says which).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from math import gcd

import attrs

from ._cluster import Cluster
from ._groups import Runs, compress
from ._hierarchy import level_grid
from ._kinds import DENSE_KINDS, EXPERT_KINDS
from ._topology import Topology

__all__ = ["Placement", "Shape", "placement", "placements", "shape_of"]

_ENUMERATE_LIMIT = 1 << 16
"""Irregular kinds are measured on every group up to this many ranks, else on samples."""


@attrs.frozen
class Shape:
    """The groups of one kind as translates ``base + X`` (private algebra, see module doc).

    ``inner`` are the runs of ``X`` (sorted by stride), or None when ``X`` is not a product of
    runs and ``explicit`` lists its offsets; ``outer`` are the runs that number the groups.
    """

    inner: Runs | None
    explicit: tuple[int, ...]
    outer: Runs
    offset: int

    @property
    def key(self) -> tuple[object, ...]:
        """Equal keys mean the same family of groups (first base, canonical ``X``, outer runs).

        ``X`` alone is not enough: embedding groups on stages (0, 1) and on stages (2, 3) share
        ``X`` but cover different ranks.
        """
        inner = ("runs", self.inner) if self.inner is not None else ("offsets", self.explicit)
        return (self.offset, inner, self.outer)

    def offsets(self) -> tuple[int, ...]:
        """The offsets ``X``, ascending."""
        if self.inner is None:
            return self.explicit
        points = [0]
        for size, stride in self.inner:
            points = [p + c * stride for c in range(size) for p in points]
        return tuple(sorted(points))

    def residues(self, unit: int) -> dict[int, int]:
        """``{base mod unit: one base with that residue}`` over all groups."""
        found = {self.offset % unit: self.offset}
        for size, stride in self.outer:
            step = stride % unit
            period = unit // gcd(step, unit) if step else 1
            grown: dict[int, int] = {}
            for residue, witness in found.items():
                for c in range(min(size, period)):
                    grown.setdefault((residue + c * step) % unit, witness + c * stride)
            found = grown
        return found

    def units_spanned(self, base: int, unit: int) -> int:
        """How many units (``r // unit``) the group ``base + X`` touches."""
        if self.inner is None:
            return len({(base + x) // unit for x in self.explicit})
        runs = self.inner
        low = 0
        index = 0
        while index < len(runs) and runs[index][1] < unit:
            low += (runs[index][0] - 1) * runs[index][1]
            index += 1
        width = (base + low) // unit - base // unit + 1
        count = extent = width
        contiguous = True
        for size, stride in runs[index:]:
            if stride % unit:
                return len({(base + x) // unit for x in self.offsets()})
            step = stride // unit
            if extent <= step:
                contiguous = contiguous and extent == step
                count *= size
            elif contiguous:
                count = (size - 1) * step + extent
            else:
                return len({(base + x) // unit for x in self.offsets()})
            extent = (size - 1) * step + extent
        return count


def _digits(topo: Topology, kind: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    grid, axes = topo._grid_kind(kind)
    chosen = {a for name in axes for a in name.split("-")}
    inner: list[tuple[int, int]] = []
    outer: list[tuple[int, int]] = []
    for axis, size, stride in zip(grid.axes, grid.shape, grid.strides, strict=True):
        (inner if axis in chosen else outer).append((size, stride))
    return sorted(inner, key=_stride), sorted(outer, key=_stride)


def _stride(run: tuple[int, int]) -> int:
    return run[1]


def _normal(runs: Iterable[tuple[int, int]]) -> Runs:
    ordered = sorted(runs, key=_stride)
    return compress([s for s, _ in ordered], [d for _, d in ordered])


def _split(digits: list[tuple[int, int]], width: int) -> tuple[list[tuple[int, int]], ...] | None:
    """Cut mixed-radix digits at position ``width``: (low digits, high digits), or None."""
    low: list[tuple[int, int]] = []
    high: list[tuple[int, int]] = []
    need = width
    for size, stride in digits:
        if need == 1:
            high.append((size, stride))
        elif need % size == 0:
            low.append((size, stride))
            need //= size
        elif size % need == 0:
            low.append((need, stride))
            high.append((size // need, stride * need))
            need = 1
        else:
            return None
    return low, high


def _regular(
    inner: Iterable[tuple[int, int]], outer: Iterable[tuple[int, int]], offset: int
) -> Shape:
    return Shape(_normal(inner), (), _normal(outer), offset)


def shape_of(topo: Topology, kind: str) -> Shape | None:
    """The translate structure of ``kind``'s groups, or None when it is irregular."""
    offset = topo.rank_offset
    if kind in DENSE_KINDS or kind in EXPERT_KINDS:
        return _regular(*_digits(topo, kind), offset)
    if kind in ("embedding", "position-embedding"):
        (pp_digit,), rest = _digits(topo, "pp")
        stages = topo.embedding_stages if kind == "embedding" else topo.position_embedding_stages
        points = tuple(s * pp_digit[1] for s in stages)
        steps = {b - a for a, b in pairwise(points)}
        if len(points) == 1 or len(steps) == 1:
            step = points[1] - points[0] if len(points) > 1 else 1
            return Shape(_normal([(len(points), step)]), (), _normal(rest), offset + points[0])
        return Shape(None, tuple(p - points[0] for p in points), _normal(rest), offset + points[0])
    if kind.startswith("hcp-"):
        level = int(kind[4:])
        sizes = topo.hcp_sizes or ()
        (cp_digit,), rest = _digits(topo, "cp")
        grid = level_grid(sizes)
        stride = cp_digit[1]
        inner: list[tuple[int, int]] = []
        outer = list(rest)
        for axis, size, step in zip(grid.axes, grid.shape, grid.strides, strict=True):
            (inner if axis == f"l{level}" else outer).append((size, step * stride))
        return _regular(inner, outer, offset)
    instances = topo.dist_opt_instances
    base_kind = "dp-cp" if kind == "intra-dp-cp" else "edp"
    inner, outer = _digits(topo, base_kind)
    width = topo.size(base_kind) // instances
    cut = _split(list(_normal(inner)), width)
    if cut is None:
        return None
    low, high = cut
    if kind in ("intra-dp-cp", "intra-edp"):
        return _regular(low, high + outer, offset)
    if kind == "inter-edp":
        return _regular(high, low + outer, offset)
    return _regular(low + outer, high, offset)  # intra-dist-opt: one block of edp positions


@attrs.frozen
class Placement:
    """How one kind's groups sit on the cluster.

    ``nodes``/``domains`` are the most nodes / NVLink domains one group spans and ``nodes_min``
    the fewest; ``best_nodes`` is the fewest any placement could achieve (``ceil(size / G)``).
    ``example`` is a group that spans ``nodes`` nodes. ``exact`` is False only when an irregular
    kind of a large world was measured on sample groups.

    >>> from topology import Cluster, Topology
    >>> row = placement(Topology(32, tp=8, order="dp-tp"), Cluster(8), "tp")
    >>> row.nodes, row.best_nodes, row.intra_node, row.example
    (4, 1, False, (0, 4, 8, 12, 16, 20, 24, 28))
    """

    kind: str
    size: int
    groups: int
    nodes: int
    nodes_min: int
    best_nodes: int
    domains: int
    example: tuple[int, ...]
    exact: bool = True

    @property
    def intra_node(self) -> bool:
        """True if every group stays inside one node."""
        return self.nodes == 1

    @property
    def intra_domain(self) -> bool:
        """True if every group stays inside one NVLink domain."""
        return self.domains == 1

    def to_dict(self) -> dict[str, object]:
        """JSON-safe: every field plus ``intra_node``/``intra_domain``; ``example`` cut at 64."""
        return {
            "kind": self.kind,
            "size": self.size,
            "groups": self.groups,
            "nodes": self.nodes,
            "nodes_min": self.nodes_min,
            "best_nodes": self.best_nodes,
            "domains": self.domains,
            "intra_node": self.intra_node,
            "intra_domain": self.intra_domain,
            "example": list(self.example[:64]),
            "example_size": len(self.example),
            "exact": self.exact,
        }


def placement(topo: Topology, cluster: Cluster, kind: str) -> Placement:
    """The :class:`Placement` of ``kind``'s groups on ``cluster``."""
    node = cluster.gpus_per_node
    domain = cluster.domain_size
    size = topo.size(kind)
    groups = topo.groups(kind)
    shape = shape_of(topo, kind)
    if shape is None:
        return _sampled(topo, kind, node, domain)
    spans = {r: shape.units_spanned(b, node) for r, b in shape.residues(node).items()}
    worst = max(spans, key=spans.__getitem__)
    base = shape.residues(node)[worst]
    domains = max(shape.units_spanned(b, domain) for b in shape.residues(domain).values())
    return Placement(
        kind=kind,
        size=size,
        groups=len(groups),
        nodes=spans[worst],
        nodes_min=min(spans.values()),
        best_nodes=-(-size // node),
        domains=domains,
        example=tuple(base + x for x in shape.offsets()),
    )


def _sampled(topo: Topology, kind: str, node: int, domain: int) -> Placement:
    groups = topo.groups(kind)
    count = len(groups)
    exact = topo.world_size <= _ENUMERATE_LIMIT
    indices = range(count) if exact else sorted({0, count // 2, count - 1})
    measured = [
        (len({r // node for r in g}), len({r // domain for r in g}), g)
        for g in (groups[i] for i in indices)
    ]
    worst = max(measured, key=lambda m: m[0])
    size = topo.size(kind)
    return Placement(
        kind=kind,
        size=size,
        groups=count,
        nodes=worst[0],
        nodes_min=min(m[0] for m in measured),
        best_nodes=-(-size // node),
        domains=max(m[1] for m in measured),
        example=worst[2],
        exact=exact,
    )


def placements(topo: Topology, cluster: Cluster) -> tuple[Placement, ...]:
    """One :class:`Placement` per kind, in ``topo.kinds`` order."""
    return tuple(placement(topo, cluster, kind) for kind in topo.kinds)
