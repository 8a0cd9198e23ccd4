"""place(): the host order that keeps the chattiest groups inside domains (private).

Given a layout and an :class:`~.allocation.Allocation`, :func:`place` chooses which hosts run the
job and in which order the launcher should number them (node rank = position), so that as few
groups as possible cross a tier: first the tp/etp groups, then ep and cp, then pp and dp
(:data:`~.crossings.KIND_CLASSES`), each class counted per tier innermost first
(:meth:`Crossings.key`). Ranks fill hosts in order, so a host order is all a launcher needs
(a hostfile, ``SLURM_HOSTFILE``, one ``torchrun --node-rank`` per host).

Algorithm: rank ``r`` runs on slot ``r // G``. Adding the kinds one by one in priority order,
the slots joined by their groups form nested components (the tp blocks, the blocks those make
with ep, ...). Packing walks that tree from the whole job down: a component goes whole into the
first domain with room for it, else its children are packed one by one, largest first. When
component sizes divide each other, as they do for any grid, this keeps the most components of
every level whole (a component placed whole costs its domain exactly its size, so it never
spoils a finer level). Several packings (domains in name order within their outer domains,
largest first, best fit, tier by tier; confined to one outer domain when one holds the job;
two component trees, :mod:`.pack`), the swaps of :mod:`.search` and the launcher
orders themselves are scored with :func:`~.crossings.crossing_row`; the lowest score wins,
the launcher's own order on ties, so ``place`` never does worse than the launcher.

Exact where it says so: on every allocation of up to :data:`~.exact.EXACT_HOSTS` (8)
hosts, and on larger ones whose host types and slots are few enough
(:func:`~.exact.affordable`: at most 109,600 nodes, well under a second), a branch and
bound over host orders (:mod:`.exact`) then proves the least key, every class and tier,
and replaces the winner only by a strictly better order. Elsewhere the heuristics stand, and
:func:`~.bound.key_bound` bounds each entry of the key from below:
:attr:`Arrangement.proven` says which entries the bound proves, :attr:`Arrangement.optimal`
whether all are (the 64-host fat tree of ``benchmarks/bench_place.py``: its dense layout is
proven optimal, the MoE one through its ep/cp entries).

>>> from topology import Allocation, Host, Tier, Topology
>>> racks = {"n1": "r1", "n2": "r2", "n3": "r1", "n4": "r2"}
>>> alloc = Allocation([Host(n, 4, (r,)) for n, r in racks.items()], [Tier("rack", nvlink=True)])
>>> found = place(Topology(16, tp=8), alloc)
>>> found.hosts, found.before.count("tp", "rack"), found.after.count("tp", "rack")
(('n1', 'n3', 'n2', 'n4'), 2, 0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..._args import show
from ..._errors import TopologyError
from ..._fields import instance, text, tuple_of
from ..._machine.allocation import LAUNCHER_ORDERS, Allocation, host_slots
from ..._machine.hosts import gpu_counts
from ..._machine.rankmap import RankMap
from ..._megatron.topology import Topology
from ..crossings import (
    KIND_CLASSES,
    NODE_TIER,
    PLACED_KINDS,
    Crossings,
    HostSets,
    crossing_row,
    crossings,
    distinct_kinds,
    slot_sets,
)
from .bound import key_bound
from .exact import affordable, search
from .pack import Component, packings, tree
from .search import WeightedSet, improve

__all__ = ["Arrangement", "StepTime", "place"]

_SEARCH_EVERY_START = 64
"""Up to this many slots, the swap search starts from every candidate, else from the best."""


def _optional_seconds(owner: object, attribute: Any, value: object) -> None:
    if value is not None and (type(value) is not float or not 0 <= value < math.inf):
        raise TopologyError(
            f"Arrangement.{attribute.name} must be a finite float >= 0 or None, got {show(value)}"
        )


StepTime = Callable[[RankMap], float]
"""Predicted seconds per training step on a rank map (e.g. from :func:`topology.cost.estimate`)."""


@attrs.frozen
class Arrangement:
    """What :func:`place` chose: the host order and the crossings before and after.

    ``hosts`` are the hosts to run on in launcher order (node rank = index); ``before`` counts
    the crossings of the launcher's ``baseline`` order, ``after`` those of ``hosts``;
    ``method`` names the candidate that won (a launcher order when nothing beats it).
    ``step_time_before``/``step_time_after`` are the predicted step times of the two orders
    when :func:`place` was given ``step_time``. ``exact`` is True when an exact search proved
    that no host order has a smaller ``after.key()`` (allocations of up to 8 hosts, larger ones
    with few host types and slots, or without
    tiers); ``bound`` holds, per entry of ``after.key()``, a lower bound on that entry over the
    orders that cross no group of an earlier class where ``hosts`` crosses none (None: no
    bound, as 0).
    """

    topology: Topology = attrs.field(validator=instance(Topology))
    allocation: Allocation = attrs.field(validator=instance(Allocation))
    baseline: str = attrs.field(validator=text)
    hosts: tuple[str, ...] = attrs.field(validator=tuple_of(str))
    before: Crossings = attrs.field(validator=instance(Crossings))
    after: Crossings = attrs.field(validator=instance(Crossings))
    method: str = attrs.field(validator=text)
    step_time_before: float | None = attrs.field(default=None, validator=_optional_seconds)
    step_time_after: float | None = attrs.field(default=None, validator=_optional_seconds)
    exact: bool = attrs.field(default=False, validator=instance(bool))
    bound: tuple[int, ...] | None = attrs.field(default=None)

    def __attrs_post_init__(self) -> None:
        if (self.before.kinds, self.before.tiers) != (self.after.kinds, self.after.tiers):
            raise TopologyError(
                "Arrangement.before and .after must count the same kinds and tiers, got "
                f"{self.before.kinds}/{self.before.tiers} and {self.after.kinds}/{self.after.tiers}"
            )
        key = self.after.key()
        if self.bound is not None and (
            type(self.bound) is not tuple
            or len(self.bound) != len(key)
            or any(
                type(b) is not int or not 0 <= b <= k for b, k in zip(self.bound, key, strict=True)
            )
        ):
            raise TopologyError(
                f"Arrangement.bound must hold one int per entry of after.key() ({len(key)}), "
                f"each from 0 to that entry {key}, got {show(self.bound)}; pass None for no bound"
            )

    @property
    def proven(self) -> tuple[bool, ...]:
        """Per entry of ``after.key()``, True when no host order with the same earlier entries
        crosses fewer groups there (the lexicographic sense ``place`` minimises in): every entry
        when :attr:`exact`, else the entries that equal their :attr:`bound`."""
        key = self.after.key()
        bound = self.bound if self.bound is not None else (0,) * len(key)
        return tuple(self.exact or k == b for k, b in zip(key, bound, strict=True))

    @property
    def optimal(self) -> bool:
        """True when no host order has a smaller crossing key than :attr:`hosts`."""
        return all(self.proven)

    @property
    def improved(self) -> bool:
        """True when ``hosts`` crosses fewer groups than the launcher's order (node crossings
        count too: on hosts of different GPU counts the order changes them)."""
        return self.after.key(first_tier=0) < self.before.key(first_tier=0)

    @property
    def unused(self) -> tuple[str, ...]:
        """Hosts of the allocation the job does not need."""
        chosen = set(self.hosts)
        return tuple(h.name for h in self.allocation.hosts if h.name not in chosen)

    def rank_map(self) -> RankMap:
        """Where every rank runs when the launcher takes :attr:`hosts` as they are."""
        return self.allocation.with_order(self.hosts).rank_map(self.topology.world_size)

    def hostfile(self) -> str:
        """:attr:`hosts`, one per line (what ``--host-order`` reads); with :meth:`slots`, the
        CLI's ``--format hostfile`` and ``slurm`` write ``host slots=N`` lines and one line per
        task."""
        return "".join(f"{name}\n" for name in self.hosts)

    def slots(self) -> tuple[int, ...]:
        """The ranks each host of :attr:`hosts` runs: its GPUs, filled in order (the last host
        used may run fewer).

        >>> from topology import Allocation, Host, Topology, place
        >>> alloc = Allocation([Host("a", 4), Host("b", 4), Host("c", 4), Host("d", 4)])
        >>> place(Topology(10, tp=2), alloc).slots()
        (4, 4, 2)
        """
        return host_slots(self.allocation, self.hosts, self.topology.world_size)

    def certificate(self) -> list[dict[str, Any]]:
        """Per entry of ``after.key()`` (kind class, then tier innermost first): the class, the
        tier, the groups that cross, the :attr:`bound` and whether the entry is :attr:`proven`."""
        key = self.after.key()
        bound = self.bound if self.bound is not None else (0,) * len(key)
        tiers = self.after.tiers[1:]
        return [
            {
                "class": "/".join(KIND_CLASSES[i // len(tiers)]),
                "tier": tiers[i % len(tiers)],
                "crossing": key[i],
                "bound": bound[i],
                "proven": proven,
            }
            for i, proven in enumerate(self.proven)
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``hosts`` (node rank = index), ``crossings`` per kind and tier before and
        after, the baseline order, the winning method, the unused hosts and the ``optimality``
        of the key (``exact``, ``optimal`` and the :meth:`certificate` of each entry)."""
        before, after = self.before.to_dict(), self.after.to_dict()
        return {
            "hosts": list(self.hosts),
            "baseline": self.baseline,
            "method": self.method,
            "improved": self.improved,
            "unused": list(self.unused),
            "step_time": {"before": self.step_time_before, "after": self.step_time_after},
            "tiers": before["tiers"],
            "groups": before["groups"],
            "crossings": {
                kind: {
                    tier: {"before": before["crossing"][kind][tier], "after": row[tier]}
                    for tier in before["tiers"]
                }
                for kind, row in after["crossing"].items()
            },
            "optimality": {
                "exact": self.exact,
                "optimal": self.optimal,
                "key": self.certificate(),
            },
        }


def place(
    topology: Topology,
    allocation: Allocation,
    *,
    order: str = "listed",
    step_time: StepTime | None = None,
) -> Arrangement:
    """Choose the hosts and their launcher order for ``topology`` on ``allocation``.

    Args:
        topology: the layout (``rank_offset`` 0: the job owns its hosts).
        allocation: the hosts and tiers the job got. Hosts of different GPU counts are
            placed by the orders of :func:`_place_mixed` (not proven optimal).
        order: the launcher order to compare against (one of ``LAUNCHER_ORDERS``).
        step_time: predicted seconds per step on a rank map; it breaks ties between orders
            with equal crossings and is reported for the launcher's order and the chosen one.
            ``lambda m: estimate(topology, m, model, hardware).total`` prices it with
            :mod:`topology.cost`.

    Returns:
        An :class:`Arrangement`; ``hosts`` crosses no more groups than ``order`` does, and no
        host order has a smaller crossing key on allocations of up to 8 hosts and wherever the
        exact search is affordable (``exact``); elsewhere ``proven`` says which entries of the
        key a lower bound proves least.

    Raises:
        TopologyError: wrong types, a ``rank_offset``, or fewer GPUs than ranks.
    """
    topo, alloc = _checked(topology, allocation, order)
    if step_time is not None and not callable(step_time):
        raise TopologyError(f"step_time must be a callable taking a RankMap, got {show(step_time)}")
    if len({h.gpus for h in alloc.hosts}) > 1:
        return _place_mixed(topo, alloc, order, step_time)
    labels = _host_labels(alloc)
    distinct = _distinct_tiers(labels)
    if len(distinct) < len(alloc.tiers):
        return _place_distinct(topo, alloc, order, step_time, distinct)
    gpus = alloc.hosts[0].gpus
    slots = math.ceil(topo.world_size / gpus)
    names = (NODE_TIER, *(t.name for t in alloc.tiers))
    structure = _Structure.of(topo, gpus, slots)
    baseline = alloc.rank_map(topo.world_size, order=order)
    index = {host.name: i for i, host in enumerate(alloc.hosts)}
    candidates: list[tuple[str, tuple[int, ...]]] = [
        (order, tuple(index[n] for n in baseline.host_order))
    ]
    for other in LAUNCHER_ORDERS:
        hosts = alloc.ordered(other).hosts[:slots]
        candidates.append((other, tuple(index[h.name] for h in hosts)))
    if alloc.tiers:
        candidates += packings(alloc, labels, structure.roots, slots)
    best_name, best = candidates[0]
    best_score = structure.score(best, labels, names)
    for name, candidate in candidates[1:]:
        score = structure.score(candidate, labels, names)
        if score.key() < best_score.key():
            best_name, best, best_score = name, candidate, score
    if alloc.tiers:
        weighted = structure.weighted()
        starts = candidates if slots <= _SEARCH_EVERY_START else [(best_name, best)]
        for name, start in starts:
            chosen = set(start)
            spare = [h for h in range(len(alloc.hosts)) if h not in chosen]
            searched = tuple(improve([*start, *spare], labels, weighted)[:slots])
            score = structure.score(searched, labels, names)
            if score.key() < best_score.key():
                best_name, best, best_score = f"{name}, then swaps", searched, score
    exact = not alloc.tiers or affordable(labels, len(alloc.hosts), slots)
    if alloc.tiers and exact:
        launched = candidates[0][1]  # its hosts first: a type's hosts are taken in this order
        spare = [h for h in range(len(alloc.hosts)) if h not in launched]
        found = search([*launched, *spare], labels, structure.weighted(), slots, best_score.key())
        if found.order is not None:
            best_name, best = "exact search", found.order
            best_score = structure.score(best, labels, names)
    before_time = after_time = None
    if step_time is not None:
        price = _pricer(step_time, alloc, topo.world_size)
        ties = [
            (name, c) for name, c in candidates if structure.score(c, labels, names) == best_score
        ]
        timed = min(((price(c), i) for i, (_, c) in enumerate(ties)), default=None)
        if timed is not None and timed[0] < price(best):
            best_name, best = ties[timed[1]]
        before_time, after_time = price(candidates[0][1]), price(best)
    return Arrangement(
        topology=topo,
        allocation=alloc,
        baseline=order,
        hosts=tuple(alloc.hosts[i].name for i in best),
        before=crossings(topo, baseline),
        after=best_score,
        method=best_name,
        step_time_before=before_time,
        step_time_after=after_time,
        exact=exact,
        bound=key_bound(labels, structure.families(), len(KIND_CLASSES), best_score.key()),
    )


def _distinct_tiers(labels: list[list[int]]) -> tuple[int, ...]:
    """The tiers whose domains split the hosts as no earlier tier does (first of each split).

    >>> _distinct_tiers([[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 1, 1]])
    (0, 2)
    """
    seen: set[tuple[int, ...]] = set()
    keep = []
    for tier, row in enumerate(labels):
        if tuple(row) not in seen:
            seen.add(tuple(row))
            keep.append(tier)
    return tuple(keep)


def _place_distinct(
    topo: Topology,
    alloc: Allocation,
    order: str,
    step_time: StepTime | None,
    keep: tuple[int, ...],
) -> Arrangement:
    """:func:`place` on an allocation where some tiers split the hosts as an earlier tier does
    (a chain of switches over the same leaves): placed on the ``keep`` tiers only, then
    counted on all. A repeated tier crosses exactly the groups of the tier it repeats, so its
    entries of the key repeat an earlier entry of the same class: two orders compare on the
    full key as on the kept one, and the proof and bound carry over entry by entry."""
    tiers = [alloc.tiers[t] for t in keep]
    hosts = [attrs.evolve(h, domains=tuple(h.domains[t] for t in keep)) for h in alloc.hosts]
    world = topo.world_size
    priced = None
    if step_time is not None:

        def priced(rank_map: RankMap) -> float:
            return step_time(alloc.with_order(rank_map.host_order).rank_map(world))

    part = place(topo, Allocation(hosts, tiers), order=order, step_time=priced)
    labels = [tuple(row) for row in _host_labels(alloc)]
    source = [keep[[labels[k] for k in keep].index(row)] for row in labels]
    after = crossings(topo, alloc.with_order(part.hosts).rank_map(world))
    width = len(keep)
    bound = (
        None
        if part.bound is None
        else tuple(
            part.bound[c * width + keep.index(source[t])]
            for c in range(len(KIND_CLASSES))
            for t in range(len(alloc.tiers))
        )
    )
    return Arrangement(
        topology=topo,
        allocation=alloc,
        baseline=order,
        hosts=part.hosts,
        before=crossings(topo, alloc.rank_map(world, order=order)),
        after=after,
        method=part.method,
        step_time_before=part.step_time_before,
        step_time_after=part.step_time_after,
        exact=part.exact,
        bound=bound,
    )


def _pricer(
    step_time: StepTime, alloc: Allocation, world_size: int
) -> Callable[[tuple[int, ...]], float]:
    """``step_time`` of a host order, checked to be a finite number of seconds."""

    def price(order: tuple[int, ...]) -> float:
        rank_map = alloc.with_order([alloc.hosts[i].name for i in order]).rank_map(world_size)
        seconds = step_time(rank_map)
        if type(seconds) not in (int, float) or not 0 <= seconds < math.inf:
            raise TopologyError(
                f"step_time must return a finite number of seconds >= 0, got {show(seconds)}"
            )
        return float(seconds)

    return price


def _checked(topology: object, allocation: object, order: object) -> tuple[Topology, Allocation]:
    if not isinstance(topology, Topology):
        raise TopologyError(f"topology must be a Topology, got {type(topology).__name__}")
    if not isinstance(allocation, Allocation):
        raise TopologyError(
            f"allocation must be an Allocation, got {type(allocation).__name__}; "
            "read one with read_allocation, read_slurm_topology, read_topograph or read_hostfile"
        )
    if order not in LAUNCHER_ORDERS:
        raise TopologyError(f"order must be one of {', '.join(LAUNCHER_ORDERS)}, got {show(order)}")
    if topology.rank_offset:
        raise TopologyError(
            f"place needs a layout that owns its hosts (rank_offset 0), got rank_offset "
            f"{topology.rank_offset}; place the whole job's layout instead"
        )
    if topology.world_size > allocation.gpus:
        raise TopologyError(
            f"world_size {topology.world_size} needs more GPUs than the allocation's "
            f"{allocation.gpus} ({len(allocation.hosts)} hosts: {gpu_counts(allocation.hosts)})"
        )
    return topology, allocation


def _place_mixed(
    topo: Topology, alloc: Allocation, order: str, step_time: StepTime | None
) -> Arrangement:
    """:func:`place` on hosts of different GPU counts: ranks fill each host's GPUs in host
    order, so a host order is still all a launcher needs (a hostfile's ``slots=N``, a Slurm
    hostfile's line per task). Candidates: the launcher orders, and the hosts grouped by
    domain, outermost tier first (domains in listed order or largest first; within a domain
    as listed or most GPUs first). Each is scored on its real rank map, node crossings
    included (they depend on the order here); the least wins, the launcher's order on ties.
    Not proven optimal (``exact`` False, no bound)."""
    world = topo.world_size
    index = {host.name: i for i, host in enumerate(alloc.hosts)}
    baseline = alloc.rank_map(world, order=order)
    candidates: list[tuple[str, tuple[int, ...]]] = [
        (order, tuple(index[h.name] for h in alloc.ordered(order).hosts))
    ]
    candidates += [
        (other, tuple(index[h.name] for h in alloc.ordered(other).hosts))
        for other in LAUNCHER_ORDERS
    ]
    candidates += _grouped_orders(alloc)

    def score(candidate: tuple[int, ...]) -> Crossings:
        names = [alloc.hosts[i].name for i in candidate]
        return crossings(topo, alloc.with_order(names).rank_map(world))

    scored = [(score(c).key(first_tier=0), i) for i, (_, c) in enumerate(candidates)]
    best_key = min(scored)[0]
    ties = [candidates[i] for key, i in scored if key == best_key]
    best_name, best = ties[0]
    before_time = after_time = None
    if step_time is not None:
        price = _pricer(step_time, alloc, world)
        timed = min((price(c), i) for i, (_, c) in enumerate(ties))
        best_name, best = ties[timed[1]]
        before_time, after_time = price(candidates[0][1]), timed[0]
    chosen = alloc.with_order([alloc.hosts[i].name for i in best]).rank_map(world)
    return Arrangement(
        topology=topo,
        allocation=alloc,
        baseline=order,
        hosts=chosen.host_order,
        before=crossings(topo, baseline),
        after=crossings(topo, chosen),
        method=best_name,
        step_time_before=before_time,
        step_time_after=after_time,
    )


def _grouped_orders(alloc: Allocation) -> list[tuple[str, tuple[int, ...]]]:
    """Host orders that keep each domain's hosts together, outermost tier first (see
    :func:`_place_mixed`), named for the method line."""
    labels = _host_labels(alloc)
    gpus = [h.gpus for h in alloc.hosts]
    totals = []
    for row in labels:
        total: dict[int, int] = {}
        for host, label in enumerate(row):
            total[label] = total.get(label, 0) + gpus[host]
        totals.append(total)
    found = []
    for larger in (False, True):
        for most in (False, True):

            def key(h: int, larger: bool = larger, most: bool = most) -> tuple[int, ...]:
                domains = [
                    part
                    for row, total in zip(reversed(labels), reversed(totals), strict=True)
                    for part in ((-total[row[h]] if larger else 0), row[h])
                ]
                return (*domains, -gpus[h] if most else 0, h)

            name = "grouped by domain" if alloc.tiers else "listed"
            name += ", largest domains first" if larger and alloc.tiers else ""
            name += ", most GPUs first" if most else ""
            found.append((name, tuple(sorted(range(len(gpus)), key=key))))
    return found


def _host_labels(alloc: Allocation) -> list[list[int]]:
    """Per tier, an integer domain label per host (an unknown domain is a label of its own)."""
    result = []
    for tier in range(len(alloc.tiers)):
        ids: dict[str, int] = {}
        row = []
        for position, host in enumerate(alloc.hosts):
            domain = host.domains[tier]
            key = f"\0{position}" if domain is None else domain
            row.append(ids.setdefault(key, len(ids)))
        result.append(row)
    return result


@attrs.frozen
class _Structure:
    """The slot-level groups of a layout: host sets per distinct kind and the component tree."""

    kinds: tuple[str, ...]
    first: dict[str, str]
    sets: dict[str, HostSets]
    totals: dict[str, int]
    roots: tuple[Component, ...]

    @classmethod
    def of(cls, topo: Topology, gpus: int, slots: int) -> _Structure:
        kinds = tuple(k for k in PLACED_KINDS if k in topo.kinds)
        first = distinct_kinds(topo, kinds)
        sets = {k: slot_sets(topo, k, gpus) for k in kinds if first[k] == k}
        totals = {k: len(topo.groups(k)) for k in kinds}
        shares = {k: sum(1 for f in first.values() if f == first[k]) for k in kinds}
        roots: list[Component] = []
        for heavier in (False, True):
            ranked = sorted(kinds, key=lambda k: _rank(k, sets[first[k]], shares[k], heavier))
            root = tree(slots, [sets[first[k]] for k in ranked])
            if root not in roots:
                roots.append(root)
        return cls(kinds, first, sets, totals, tuple(roots))

    def weighted(self) -> list[WeightedSet]:
        """Every host set once, weighted per kind class by the groups it stands for."""
        return [weighted for family in self.families() for weighted in family]

    def families(self) -> list[list[WeightedSet]]:
        """:meth:`weighted`'s host sets, one list per distinct kind (its sets are its groups')."""
        found = []
        for kind, sets in self.sets.items():
            weights = tuple(
                sum(1 for k in group if k in self.first and self.first[k] == kind)
                for group in KIND_CLASSES
            )
            found.append(
                [(tuple(sorted(hosts)), tuple(w * n for w in weights)) for hosts, n in sets.items()]
            )
        return found

    def score(
        self, order: Sequence[int], labels: Sequence[Sequence[int]], names: tuple[str, ...]
    ) -> Crossings:
        """The crossings when slot ``s`` runs on host ``order[s]``."""
        per_slot = [[row[host] for host in order] for row in labels]
        measured = {kind: crossing_row(sets, per_slot) for kind, sets in self.sets.items()}
        return Crossings(
            tiers=names,
            kinds=self.kinds,
            crossing=tuple(measured[self.first[k]] for k in self.kinds),
            totals=tuple(self.totals[k] for k in self.kinds),
        )


def _rank(kind: str, sets: HostSets, share: int, heavier: bool) -> tuple[int, float, int]:
    """Tree levels go class by class, and inside a class the kinds of smaller host sets first
    (their blocks nest inside the others'); with ``heavier``, the kinds whose host sets stand
    for the most groups first (dp, when edp repeats its groups, before pp); ``share`` kinds
    have these groups."""
    level = next(i for i, group in enumerate(KIND_CLASSES) if kind in group)
    size = max((len(hosts) for hosts in sets), default=0)
    weight = sum(sets.values()) / len(sets) * share if heavier and sets else 0.0
    return level, -weight, size
