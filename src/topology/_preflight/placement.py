"""Where the groups of each kind land on nodes, computed from their structure (private).

Every kind's groups are translates of one offset set ``X`` (a group is ``base + X``) whose bases
are ``offset + sum(c_j * e_j)`` over the kind's *outer* runs. ``X`` is a sum of runs
``(size, stride)`` sorted by stride, each stride larger than the span of the runs below it (the
digits of a mixed-radix rank). Node ``n(r) = r // u`` for a unit ``u`` (GPUs per node, or per
NVLink domain), so the number of units one group spans depends only on ``base mod u``.

Algorithm (no group is ever enumerated beyond a few thousand ranks):

1. Residues: the set of ``base mod u`` over all groups is built run by run; run ``(s, e)`` adds
   ``c * e mod u`` for ``c < min(s, u / gcd(e, u))`` (the multiples cycle after that), so the set
   never exceeds ``u`` entries and each residue keeps one witness base. Past
   ``_RESIDUE_BUDGET`` residues (only for huge ``u``) the witnesses found so far are measured
   and the row says ``exact=False``.
2. Units of ``base + X`` for one residue, the first rule that applies:

   - the runs with stride ``< u`` form the low part ``L``; consecutive points of ``L`` are less
     than ``u`` apart, so ``base + L`` covers the contiguous units ``n(base) .. n(base + max L)``,
     ``w`` of them. When each remaining run has a stride that is a multiple of ``u``, it copies
     the covered units ``s`` times, ``e / u`` units apart: with ``t`` the extent of the cover so
     far, copies are disjoint when ``t <= e / u`` (count multiplies by ``s``) and merge into one
     contiguous block when the cover is contiguous (extent ``(s - 1) * e / u + t``);
   - when no two consecutive points of ``X`` are more than ``u`` apart, no unit between the
     first and the last is empty: ``n(base + max X) - n(base) + 1``;
   - a group of at most ``_POINTS_LIMIT`` ranks is counted point by point;
   - otherwise by recursion on the outermost run: the ``s`` copies of the lower runs' set each
     cover ``f(residue of the copy)`` units, minus one wherever a copy's last unit is the next
     copy's first; the copies' residues cycle with period ``u / gcd(e, u)``, so each level sums
     one period (memoised per residue, within ``_RECURSION_BUDGET`` steps, else an upper bound
     and ``exact=False``).

A kind whose groups are not translates of one product of runs (an ``intra-dp-cp`` chunk that cuts
an axis unevenly) is measured group by group, each cut into at most two aligned pieces per run
(consecutive pieces share at most one unit): on every group when the world is small and on the
first, middle and last groups otherwise (``exact`` says which).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise
from math import gcd

import attrs

from .._fields import flag, text, whole
from .._layout.groups import Ranks, Runs, compress
from .._layout.hierarchy import level_grid
from .._megatron.kinds import DENSE_KINDS, EXPERT_KINDS
from .._megatron.topology import Topology
from .cluster import Cluster

__all__ = ["Placement", "Shape", "placement", "placements", "shape_of", "units_spanned"]

_ENUMERATE_LIMIT = 1 << 16
"""Irregular kinds are measured on every group up to this many ranks, else on samples."""

_RESIDUE_BUDGET = 512
"""At most this many distinct ``base mod u`` are measured per kind and unit."""

_POINTS_LIMIT = 4096
"""A group of at most this many ranks may be counted point by point."""

_RECURSION_BUDGET = 1 << 14
"""Steps the residue recursion may take for one group before it settles for a bound."""


def _span(runs: Runs) -> int:
    count = 1
    for size, _ in runs:
        count *= size
    return count


def _top(runs: Runs) -> int:
    """The largest point of ``runs`` (the smallest is 0)."""
    return sum((size - 1) * stride for size, stride in runs)


def _closed_form(base: int, runs: Runs, unit: int) -> int | None:
    """Units of ``base + X`` when every run at or above ``unit`` strides in whole units."""
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
            return None
        step = stride // unit
        if extent <= step:
            contiguous = contiguous and extent == step
            count *= size
        elif contiguous:
            count = (size - 1) * step + extent
        else:
            return None
        extent = (size - 1) * step + extent
    return count


def _max_gap(runs: Runs) -> int:
    """The largest distance between consecutive points of ``runs``."""
    gap = 1
    below = 0
    for size, stride in runs:
        if size > 1:
            gap = max(gap, stride - below)
        below += (size - 1) * stride
    return gap


class _TooHard(Exception):
    """The recursion ran out of budget."""


def _recursive(residue: int, runs: Runs, unit: int) -> int:
    """Units of ``residue + X`` by recursion on the outermost run (see the module doc)."""
    tops = [0]
    for size, stride in runs:
        tops.append(tops[-1] + (size - 1) * stride)
    memo: dict[tuple[int, int], int] = {}
    steps = [_RECURSION_BUDGET]

    def count(level: int, start: int) -> int:
        if level == 0:
            return 1
        key = (level, start)
        if key in memo:
            return memo[key]
        size, stride = runs[level - 1]
        low = tops[level - 1]
        move = stride % unit
        period = unit // gcd(move, unit) if move else 1

        def step(c: int) -> int:
            # copy c's units, less one if its first unit is copy c - 1's last
            previous = (start + (c - 1) * stride) % unit
            shared = (previous + low) // unit == (previous + stride) // unit
            return count(level - 1, (start + c * stride) % unit) - shared

        copies = size - 1
        cycle = min(copies, period)
        steps[0] -= cycle + 1
        if steps[0] < 0:
            raise _TooHard
        terms = [step(c) for c in range(1, cycle + 1)]
        total = count(level - 1, start) + sum(terms) * (copies // cycle if cycle else 0)
        total += sum(terms[: copies % cycle]) if cycle else 0
        memo[key] = total
        return total

    return count(len(runs), residue % unit)


def units_spanned(base: int, runs: Runs, unit: int) -> tuple[int, bool]:
    """``(units, exact)``: how many units (``r // unit``) the group ``base + X`` touches.

    ``X`` is the mixed-radix point set of ``runs``; ``exact`` is False only when the count is
    an upper bound (see the module doc).

    >>> units_spanned(6, ((2, 1), (4, 4)), 3)  # ranks 6, 7, 10, 11, ..., 19
    (5, True)
    >>> units_spanned(0, ((2, 1), (1 << 20, 10)), 8)  # by recursion, nothing enumerated
    (1048576, True)
    """
    if not runs:
        return 1, True
    closed = _closed_form(base, runs, unit)
    if closed is not None:
        return closed, True
    top = _top(runs)
    if _max_gap(runs) <= unit:
        return (base + top) // unit - base // unit + 1, True
    if _span(runs) <= _POINTS_LIMIT:
        return len({r // unit for r in Ranks(base, runs)}), True
    try:
        return _recursive(base, runs, unit), True
    except _TooHard:
        return min(_span(runs), (base % unit + top) // unit + 1), False


def _pieces_units(pieces: list[tuple[int, Runs]], unit: int) -> tuple[int, bool]:
    """Units of an ascending union of pieces; consecutive pieces share at most one unit."""
    total = 0
    exact = True
    last_unit = None
    for first, runs in pieces:
        count, sure = units_spanned(first, runs, unit)
        total += count - (first // unit == last_unit)
        exact = exact and sure
        last_unit = (first + _top(runs)) // unit
    return total, exact


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

    def group(self, base: int) -> Ranks:
        """The group ``base + X``, lazily."""
        if self.inner is not None:
            return Ranks(base, self.inner)
        explicit = self.explicit
        return Ranks(base, ((explicit[-1] + 1, 1),), explicit)

    def residues(self, unit: int, limit: int = _RESIDUE_BUDGET) -> tuple[dict[int, int], bool]:
        """``({base mod unit: one base with that residue}, complete)`` over all groups.

        ``complete`` is False when more than ``limit`` residues exist; then ``limit`` of them
        are returned.
        """
        found = {self.offset % unit: self.offset}
        complete = True
        for size, stride in self.outer:
            step = stride % unit
            period = unit // gcd(step, unit) if step else 1
            grown: dict[int, int] = {}
            for residue, witness in found.items():
                for c in range(min(size, period)):
                    if len(grown) >= limit:
                        complete = False
                        break
                    grown.setdefault((residue + c * step) % unit, witness + c * stride)
            found = grown
        return found, complete

    def units_spanned(self, base: int, unit: int) -> tuple[int, bool]:
        """``(units, exact)``: how many units (``r // unit``) the group ``base + X`` touches."""
        if self.inner is None:
            return len({(base + x) // unit for x in self.explicit}), True
        return units_spanned(base, self.inner, unit)

    def extremes(self, unit: int) -> tuple[int, int, int, bool]:
        """``(most units, a base that spans them, fewest units, exact)`` over all groups."""
        residues, exact = self.residues(unit)
        spans: dict[int, int] = {}
        for residue, base in residues.items():
            spans[residue], sure = self.units_spanned(base, unit)
            exact = exact and sure
        worst = max(spans, key=spans.__getitem__)
        return spans[worst], residues[worst], min(spans.values()), exact


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


def _as_ranks(ranks: Sequence[int]) -> Ranks:
    return Ranks.of(ranks)


@attrs.frozen
class Placement:
    """How one kind's groups sit on the cluster.

    ``nodes``/``domains`` are the most nodes / NVLink domains one group spans and ``nodes_min``
    the fewest; ``best_nodes`` is the fewest any placement could achieve (``ceil(size / G)``).
    ``example`` is a group that spans ``nodes`` nodes, as a lazy :class:`Ranks` (it equals the
    tuple of its ranks). ``exact`` is False only when a large world was measured on sample
    groups (an irregular kind, or more than ``_RESIDUE_BUDGET`` distinct offsets of the groups
    against a huge node).

    >>> from topology import Cluster, Topology
    >>> row = placement(Topology(32, tp=8, order="dp-tp"), Cluster(8), "tp")
    >>> row.nodes, row.best_nodes, row.intra_node, row.example
    (4, 1, False, (0, 4, 8, 12, 16, 20, 24, 28))
    """

    kind: str = attrs.field(validator=text)
    size: int = attrs.field(validator=whole(1))
    groups: int = attrs.field(validator=whole(1))
    nodes: int = attrs.field(validator=whole(0))
    nodes_min: int = attrs.field(validator=whole(0))
    best_nodes: int = attrs.field(validator=whole(0))
    domains: int = attrs.field(validator=whole(0))
    example: Ranks = attrs.field(converter=_as_ranks)
    exact: bool = attrs.field(default=True, validator=flag)

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
    """The :class:`Placement` of ``kind``'s groups on ``cluster``, in time independent of W."""
    node = cluster.gpus_per_node
    domain = cluster.domain_size
    size = topo.size(kind)
    shape = shape_of(topo, kind)
    if shape is None:
        return _sampled(topo, kind, node, domain)
    most, base, fewest, exact = shape.extremes(node)
    domains, _, _, exact_domains = shape.extremes(domain)
    return Placement(
        kind=kind,
        size=size,
        groups=len(topo.groups(kind)),
        nodes=most,
        nodes_min=fewest,
        best_nodes=-(-size // node),
        domains=domains,
        example=shape.group(base),
        exact=exact and exact_domains,
    )


def _ranks_units(group: Ranks, unit: int) -> tuple[int, bool]:
    pieces = group.blocks()
    if pieces is None:  # a strided chunk of several runs: never built by Topology
        return len(group), False
    return _pieces_units(pieces, unit)


def _sampled(topo: Topology, kind: str, node: int, domain: int) -> Placement:
    groups = topo.groups(kind)
    count = len(groups)
    exact = topo.world_size <= _ENUMERATE_LIMIT
    indices = range(count) if exact else sorted({0, count // 2, count - 1})
    measured = []
    for index in indices:
        group = groups.ranks(index)
        nodes, sure_nodes = _ranks_units(group, node)
        domains, sure_domains = _ranks_units(group, domain)
        exact = exact and sure_nodes and sure_domains
        measured.append((nodes, domains, group))
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
