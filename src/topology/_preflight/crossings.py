"""Crossings: how many groups of each kind leave a domain of each tier on a real rank map (private).

A group *crosses* a tier when its ranks run on hosts in two or more domains of that tier (a host
of unknown domain shares it with no other host); it crosses ``node`` when it holds ranks of two
hosts. Only the groups of :data:`PLACED_KINDS` are counted, the kinds whose traffic placement can
change; singleton groups never cross.

Algorithm: each group is reduced to the set of hosts (node ranks) it runs on, equal sets are
counted once with their multiplicity (a host holds many groups of one kind), and each set is
labelled per tier through its hosts' domains. Time is linear in the ranks of the kinds counted
(kinds with equal groups, such as ``etp`` and ``tp`` by default, are measured once).

>>> from topology import Allocation, Host, Tier, Topology
>>> alloc = Allocation([Host(n, 4, (r,)) for n, r in
...                     [("a", "r1"), ("b", "r2"), ("c", "r1"), ("d", "r2")]],
...                    [Tier("rack", nvlink=True)])
>>> found = crossings(Topology(16, tp=8), alloc.rank_map(16))
>>> found.count("tp", "node"), found.count("tp", "rack"), found.groups("tp")
(2, 2, 2)
>>> crossings(Topology(16, tp=8), alloc.rank_map(16, order="natural")).count("tp", "rack")
2
>>> crossings(Topology(16, tp=8), alloc.with_order(list("acbd")).rank_map(16)).count("tp", 1)
0
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import attrs

from .._args import format_choices, show
from .._errors import TopologyError
from .._fields import tuple_of
from .._layout.runs import Runs, max_gap, offsets, point, top, volume
from .._machine.hosts import NODE_TIER
from .._machine.rankmap import RankMap
from .._megatron.kinds import KIND_CLASSES
from .._megatron.shapes import shape_of
from .._megatron.topology import Topology

__all__ = [
    "KIND_CLASSES",
    "NODE_TIER",
    "PLACED_KINDS",
    "Crossings",
    "crossing_row",
    "crossings",
    "host_sets",
    "slot_sets",
]

PLACED_KINDS: tuple[str, ...] = tuple(kind for group in KIND_CLASSES for kind in group)
"""The kinds :func:`crossings` counts, in :data:`KIND_CLASSES` order."""


HostSets = Counter[frozenset[int]]
"""The distinct host sets one kind's groups run on, each with how many groups share it."""


class _Nodes(Protocol):
    """What :func:`host_sets` reads: the host of a rank, ``nodes[r]``."""

    def __getitem__(self, rank: int, /) -> int: ...


def host_sets(topology: Topology, kind: str, nodes: _Nodes) -> HostSets:
    """The host sets of ``kind``'s groups that hold two or more hosts, with multiplicities.

    ``nodes[r]`` is the host (node rank) that runs global rank ``r``.

    >>> host_sets(Topology(8, tp=4), "tp", [r // 2 for r in range(8)])
    Counter({frozenset({0, 1}): 1, frozenset({2, 3}): 1})
    """
    found: HostSets = Counter()
    for group in topology.groups(kind):
        if len(group) < 2:
            continue
        first = nodes[group[0]]
        if nodes[group[-1]] == first and all(nodes[r] == first for r in group):
            continue
        found[frozenset(nodes[r] for r in group)] += 1
    return found


def slot_sets(topology: Topology, kind: str, gpus: int) -> HostSets:
    """:func:`host_sets` on hosts of ``gpus`` consecutive ranks (rank ``r`` on host
    ``r // gpus``), from the kind's shape where it allows, in O(hosts x axes) plus the sets.

    Algorithm: split the offsets ``X`` of a group into runs whose strides are multiples of
    ``gpus`` (``H``) and the rest (``L``). When no two consecutive points of ``L`` are more
    than ``gpus`` apart, ``base + L`` touches every host from ``q = base // gpus`` to
    ``(base + max L) // gpus``, that is ``q .. q + d`` with ``d = (base % gpus + max L) //
    gpus``, one of two values; ``H`` copies that block ``h / gpus`` hosts on. So the host set
    depends on ``(q, d)`` only, and the groups of each are the bases in one of two rank
    intervals per host (counted on the bases). Other shapes of few offsets are cut by
    :func:`_cut_sets`; the rest walk the ranks.

    >>> slot_sets(Topology(8, tp=4), "tp", 2)
    Counter({frozenset({0, 1}): 1, frozenset({2, 3}): 1})
    """
    shape = shape_of(topology, kind)
    outer = tuple(sorted(shape.outer, key=lambda run: run[1])) if shape is not None else ()
    if shape is None or not _nested(outer):
        return host_sets(topology, kind, _Blocks(gpus))
    if shape.inner is not None:
        low = tuple(run for run in shape.inner if run[1] % gpus)
        if not low or max_gap(low) <= gpus:
            high = tuple(run for run in shape.inner if not run[1] % gpus)
            return _block_sets(shape.offset, outer, low, high, gpus)
        if volume(shape.inner) > _CUT_POINTS:
            return host_sets(topology, kind, _Blocks(gpus))
    points = shape.explicit if shape.inner is None else offsets(shape.inner)
    hosts = (shape.offset + top(outer)) // gpus - shape.offset // gpus + 1
    if hosts * len(points) * min(len(points) + 1, gpus) > _CUT_WORK:
        return host_sets(topology, kind, _Blocks(gpus))
    return _cut_sets(shape.offset, outer, points, gpus)


_CUT_POINTS = 1 << 12
"""A group of at most this many offsets may be cut by :func:`_cut_sets`."""

_CUT_WORK = 1 << 22
"""The most offsets :func:`_cut_sets` may place (hosts x residue cuts x offsets)."""


@attrs.frozen
class _Blocks:
    """``r // gpus`` for every rank ``r``, computed when asked (no list of the ranks)."""

    gpus: int

    def __getitem__(self, rank: int, /) -> int:
        return rank // self.gpus


def _block_sets(offset: int, outer: Runs, low: Runs, high: Runs, gpus: int) -> HostSets:
    """:func:`slot_sets` when ``low``'s consecutive points are at most ``gpus`` apart."""
    reach = top(low)
    copies = [point(i, high) // gpus for i in range(volume(high))]
    lattice = _Lattice.of(outer)
    found: HostSets = Counter()
    for host in range(offset // gpus, (offset + top(outer)) // gpus + 1):
        start = host * gpus - offset
        cut = start + gpus - reach % gpus  # bases from here on reach one host further
        for lo, hi, d in (
            (start, cut - 1, reach // gpus),
            (cut, start + gpus - 1, reach // gpus + 1),
        ):
            count = lattice.between(lo, hi)
            if count and (d or len(copies) > 1):
                found[frozenset(host + j + c for j in range(d + 1) for c in copies)] += count
    return found


def _cut_sets(offset: int, outer: Runs, points: Sequence[int], gpus: int) -> HostSets:
    """:func:`slot_sets` for the groups ``base + points`` (any offsets), host by host.

    Algorithm: a base ``b`` on host ``q`` (``b = q * gpus + rho``) puts offset ``x`` on host
    ``q + (rho + x) // gpus``, which steps up where ``rho`` passes ``gpus - x % gpus``. Those
    cuts split ``0 .. gpus - 1`` into at most ``len(points) + 1`` intervals of equal host sets;
    the groups of each are the bases in that rank interval (counted on the bases). Time
    O(hosts x cuts x points).
    """
    cuts = sorted({0, *(gpus - x % gpus for x in points if x % gpus)})
    shapes = [
        (lo, hi - 1, sorted({(lo + x) // gpus for x in points}))
        for lo, hi in zip(cuts, [*cuts[1:], gpus], strict=True)
    ]
    lattice = _Lattice.of(outer)
    found: HostSets = Counter()
    for host in range(offset // gpus, (offset + top(outer)) // gpus + 1):
        start = host * gpus - offset
        for lo, hi, steps in shapes:
            if len(steps) > 1:
                count = lattice.between(start + lo, start + hi)
                if count:
                    found[frozenset(host + step for step in steps)] += count
    return found


def distinct_kinds(topology: Topology, kinds: Iterable[str]) -> dict[str, str]:
    """Each of ``kinds`` mapped to the first of them with the same groups (itself if none)."""
    seen: dict[object, str] = {}
    first: dict[str, str] = {}
    for kind in kinds:
        shape = shape_of(topology, kind)
        key: object = kind if shape is None else shape.key
        first[kind] = seen.setdefault(key, kind)
    return first


@attrs.frozen
class Crossings:
    """Per kind and tier, how many groups cross; ``tiers`` starts with ``"node"``.

    ``crossing[kind][t]`` counts the groups of ``kind`` that span two or more domains of
    ``tiers[t]``; ``totals[kind]`` is how many groups ``kind`` has. Build it with
    :func:`crossings`.
    """

    tiers: tuple[str, ...] = attrs.field(validator=tuple_of(str))
    kinds: tuple[str, ...] = attrs.field(validator=tuple_of(str))
    crossing: tuple[tuple[int, ...], ...] = attrs.field(validator=tuple_of(tuple))
    totals: tuple[int, ...] = attrs.field(validator=tuple_of(int))

    def __attrs_post_init__(self) -> None:
        rows = len(self.kinds)
        if len(self.crossing) != rows or len(self.totals) != rows:
            raise TopologyError(
                f"Crossings needs one crossing row and one total per kind ({rows} kinds), got "
                f"{len(self.crossing)} rows and {len(self.totals)} totals"
            )
        for row in self.crossing:
            if len(row) != len(self.tiers) or any(type(n) is not int or n < 0 for n in row):
                raise TopologyError(
                    f"each Crossings row must hold one count >= 0 per tier "
                    f"({len(self.tiers)} tiers), got {show(row)}"
                )

    def _kind(self, kind: str) -> int:
        if kind not in self.kinds:
            raise TopologyError(
                f"kind {show(kind)} is not counted; valid: {format_choices(self.kinds)}"
            )
        return self.kinds.index(kind)

    def _tier(self, tier: str | int) -> int:
        if type(tier) is int and 0 <= tier < len(self.tiers):
            return tier
        if isinstance(tier, str) and tier in self.tiers:
            return self.tiers.index(tier)
        raise TopologyError(f"tier {show(tier)} is not known; valid: {format_choices(self.tiers)}")

    def count(self, kind: str, tier: str | int) -> int:
        """How many groups of ``kind`` cross ``tier`` (a name or an index of :attr:`tiers`)."""
        return self.crossing[self._kind(kind)][self._tier(tier)]

    def groups(self, kind: str) -> int:
        """How many groups ``kind`` has."""
        return self.totals[self._kind(kind)]

    def key(self, *, first_tier: int = 1) -> tuple[int, ...]:
        """The vector placement minimises: per kind class, per tier from ``first_tier`` (skip
        ``node``, which a host order cannot change) innermost first, the groups that cross."""
        tiers = range(first_tier, len(self.tiers))
        return tuple(
            sum(self.crossing[self.kinds.index(kind)][t] for kind in group if kind in self.kinds)
            for group in KIND_CLASSES
            for t in tiers
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{"tiers": [...], "groups": {kind: n}, "crossing": {kind: {tier: n}}}``."""
        return {
            "tiers": list(self.tiers),
            "groups": dict(zip(self.kinds, self.totals, strict=True)),
            "crossing": {
                kind: dict(zip(self.tiers, row, strict=True))
                for kind, row in zip(self.kinds, self.crossing, strict=True)
            },
        }


def crossings(topology: Topology, rank_map: RankMap) -> Crossings:
    """Count, per kind of :data:`PLACED_KINDS` and per tier, the groups that cross it.

    Raises:
        TopologyError: the map holds fewer ranks than ``rank_offset + world_size``.
    """
    if not isinstance(topology, Topology):
        raise TopologyError(f"topology must be a Topology, got {type(topology).__name__}")
    if not isinstance(rank_map, RankMap):
        raise TopologyError(
            f"rank_map must be a RankMap, got {type(rank_map).__name__}; "
            "use Allocation.rank_map(world_size)"
        )
    end = topology.rank_offset + topology.world_size
    if rank_map.world_size < end:
        raise TopologyError(
            f"the rank map holds {rank_map.world_size} ranks but the layout needs "
            f"rank_offset + world_size = {end}; give an allocation with more GPUs"
        )
    host_labels = [rank_map.host_domain_ids(t) for t in range(len(rank_map.tiers))]
    names = (NODE_TIER, *(t.name for t in rank_map.tiers))
    spans = _host_spans(rank_map)
    runs = [_runs(spans, labels) for labels in (range(len(spans)), *host_labels)]
    if all(r is not None for r in runs):
        found = _count_by_intervals(topology, [r for r in runs if r is not None], names)
        if found is not None:
            return found
    unit_host = _unit_hosts(rank_map)
    if unit_host is None:
        return count_crossings(topology, rank_map.nodes, host_labels, names)
    unit, hosts = unit_host
    return _counted(
        topology, names, host_labels, lambda kind: _on_hosts(slot_sets(topology, kind, unit), hosts)
    )


def _counted(
    topology: Topology,
    tier_names: tuple[str, ...],
    tier_labels: Sequence[Sequence[int]],
    sets_of: Callable[[str], HostSets],
) -> Crossings:
    """The crossings of every placed kind from ``sets_of(kind)``, its host sets (measured once
    per distinct grouping of kinds)."""
    kinds = tuple(k for k in PLACED_KINDS if k in topology.kinds)
    first = distinct_kinds(topology, kinds)
    measured = {
        kind: crossing_row(sets_of(kind), tier_labels) for kind in kinds if first[kind] == kind
    }
    return Crossings(
        tiers=tier_names,
        kinds=kinds,
        crossing=tuple(measured[first[kind]] for kind in kinds),
        totals=tuple(len(topology.groups(kind)) for kind in kinds),
    )


_UNIT_LIMIT = 1 << 16
"""Hosts of unequal GPU counts are counted in blocks of their GPUs' gcd up to this many blocks
(else rank by rank)."""


def _unit_hosts(rank_map: RankMap) -> tuple[int, list[int] | None] | None:
    """``(unit, host of each block)``: blocks of ``unit`` consecutive ranks, each on one host
    (``unit`` the gcd of the hosts' GPU counts, the last host's ranks aside); the list is None
    when every host runs ``unit`` ranks (block = host), and the answer None past
    :data:`_UNIT_LIMIT` blocks."""
    full = [host.gpus for host in rank_map.hosts[:-1]] or [rank_map.hosts[0].gpus]
    unit = math.gcd(*full)
    last = rank_map.world_size - sum(full) if len(rank_map.hosts) > 1 else 0
    if all(gpus == unit for gpus in full) and last <= unit:
        return unit, None
    if -(-rank_map.world_size // unit) > _UNIT_LIMIT:
        return None
    hosts = [node for node, gpus in enumerate(full) for _ in range(gpus // unit)]
    last = rank_map.world_size - unit * len(hosts)
    return unit, hosts + [len(full)] * -(-last // unit)


def _on_hosts(sets: HostSets, hosts: list[int] | None) -> HostSets:
    """Block sets as host sets (``hosts[b]`` runs block ``b``; None: block = host), those on
    one host left out."""
    if hosts is None:
        return sets
    found: HostSets = Counter()
    for blocks, count in sets.items():
        on = frozenset(hosts[b] for b in blocks)
        if len(on) > 1:
            found[on] += count
    return found


def _host_spans(rank_map: RankMap) -> list[tuple[int, int]]:
    """``(first rank, end)`` of each host in launcher order (the last may run fewer ranks)."""
    spans = []
    first = 0
    for host in rank_map.hosts:
        end = min(first + host.gpus, rank_map.world_size)
        spans.append((first, end))
        first = end
    return spans


def _runs(spans: list[tuple[int, int]], labels: Sequence[int]) -> list[tuple[int, int]] | None:
    """The rank interval of each domain when every domain's hosts are consecutive, else None."""
    intervals: list[tuple[int, int]] = []
    last: int | None = None
    seen: set[int] = set()
    for (first, end), label in zip(spans, labels, strict=True):
        if label == last:
            intervals[-1] = (intervals[-1][0], end)
            continue
        if label in seen:
            return None
        seen.add(label)
        last = label
        intervals.append((first, end))
    return intervals


def _bases_up_to(limit: int, runs: Sequence[tuple[int, int]]) -> int:
    """How many points ``sum(c_j * e_j)`` (``0 <= c_j < s_j``) of nested ``runs`` are
    ``<= limit``, in O(runs): each stride exceeds the span of the runs below it, so at most one
    digit value per run is cut."""
    return _Lattice.of(runs).up_to(limit)


@attrs.frozen
class _Lattice:
    """Nested runs, outermost first, each with the span and the point count of those below."""

    levels: tuple[tuple[int, int, int, int], ...]  # size, stride, span below, points below

    @classmethod
    def of(cls, runs: Sequence[tuple[int, int]]) -> _Lattice:
        levels = []
        span, points = 0, 1
        for size, stride in runs:
            levels.append((size, stride, span, points))
            span += (size - 1) * stride
            points *= size
        return cls(tuple(reversed(levels)))

    def up_to(self, limit: int) -> int:
        """The points ``<= limit``."""
        total = 0
        for size, stride, span, points in self.levels:
            if limit < 0:
                return total
            whole = min(size, max(0, (limit - span) // stride + 1))
            total += whole * points
            if whole == size or whole * stride > limit:
                return total
            limit -= whole * stride
        return total + (limit >= 0)

    def between(self, lo: int, hi: int) -> int:
        """The points from ``lo`` to ``hi``."""
        return self.up_to(hi) - self.up_to(lo - 1) if hi >= lo else 0


def _nested(runs: Sequence[tuple[int, int]]) -> bool:
    """True if each run's stride exceeds the largest point of the runs below it."""
    span = 0
    for size, stride in runs:
        if stride <= span:
            return False
        span += (size - 1) * stride
    return True


def _contained(topology: Topology, kind: str, intervals: list[tuple[int, int]]) -> int | None:
    """How many groups of ``kind`` lie inside one of ``intervals`` (rank ranges), counted on
    the group bases in O(intervals x axes); None for a kind without nested translates."""
    shape = shape_of(topology, kind)
    if shape is None:
        return None
    outer = tuple(sorted(shape.outer, key=lambda run: run[1]))
    if not _nested(outer):
        return None
    reach = top(shape.inner) if shape.inner is not None else shape.explicit[-1]
    lattice = _Lattice.of(outer)
    first_base, last_base = shape.offset, shape.offset + top(outer)
    total = 0
    for first, end in intervals:
        if end > first_base and first <= last_base:
            total += lattice.between(first - shape.offset, end - 1 - reach - shape.offset)
    return total


def _count_by_intervals(
    topology: Topology, runs: list[list[tuple[int, int]]], names: tuple[str, ...]
) -> Crossings | None:
    """:func:`count_crossings` where every domain of every tier is one rank interval: a group
    stays in a domain when its first and last ranks do, so each tier's crossings are the groups
    minus those inside one interval, in O(hosts x kinds x axes) whatever the world size (None
    for a kind without nested translates: the caller walks the ranks)."""
    kinds = tuple(k for k in PLACED_KINDS if k in topology.kinds)
    first = distinct_kinds(topology, kinds)
    measured: dict[str, tuple[int, ...]] = {}
    for kind in kinds:
        if first[kind] != kind:
            continue
        total = len(topology.groups(kind))
        inside = [_contained(topology, kind, intervals) for intervals in runs]
        if any(n is None for n in inside):
            return None
        measured[kind] = tuple(total - n for n in inside if n is not None)
    return Crossings(
        tiers=names,
        kinds=kinds,
        crossing=tuple(measured[first[kind]] for kind in kinds),
        totals=tuple(len(topology.groups(kind)) for kind in kinds),
    )


def crossing_row(sets: HostSets, tier_labels: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The groups of ``sets`` that cross hosts, then each tier (``tier_labels[t][host]``)."""
    row = [sum(sets.values())]
    counted: dict[tuple[int, ...], int] = {}  # tiers of equal labels (a switch chain) once
    for labels in tier_labels:
        key = tuple(labels)
        if key not in counted:
            counted[key] = sum(n for hosts, n in sets.items() if _mixed(hosts, labels))
        row.append(counted[key])
    return tuple(row)


def _mixed(hosts: Iterable[int], labels: Sequence[int]) -> bool:
    """True if ``hosts`` carry two or more labels."""
    seen = None
    for host in hosts:
        label = labels[host]
        if seen is None:
            seen = label
        elif label != seen:
            return True
    return False


def count_crossings(
    topology: Topology,
    nodes: Sequence[int],
    tier_labels: Sequence[Sequence[int]],
    tier_names: tuple[str, ...],
) -> Crossings:
    """:func:`crossings` on raw labels: ``nodes[r]`` per rank, ``tier_labels[t][node]`` per host."""
    return _counted(
        topology, tier_names, tier_labels, lambda kind: host_sets(topology, kind, nodes)
    )
