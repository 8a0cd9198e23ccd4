"""Lower bounds on the groups that must cross a tier, whatever the host order (private).

It certifies :func:`~.place.place` where brute force cannot reach (64 hosts have 64! orders):
when place's count equals the bound, no order does better.

Algorithm: a kind's groups run on host sets (:func:`~.crossings.host_sets`). When those sets
are disjoint and of one size ``s`` (any grid layout whose groups do not straddle hosts
unevenly), a set stays inside a domain only if ``s`` of that domain's hosts run it, so at most
``sum(floor(c / s))`` sets stay inside, over domain capacities ``c``; the other sets cross, and
at least the groups of the lightest of them do. A host of unknown domain is a domain of one.
Bounds of kinds add up (a sum of minima bounds the minimum of a sum); ``None`` when some kind's
sets are not disjoint or not of one size.

>>> from topology import Allocation, Host, Tier, Topology
>>> alloc = Allocation([Host(f"n{i}", 4, (r,)) for i, r in enumerate("aaabbb")],
...                    [Tier("rack", nvlink=True)])
>>> lower_bound(Topology(24, tp=8), alloc, "rack", ("tp",))
1

:func:`key_bound` bounds every entry of the crossing key (:meth:`Crossings.key`) the same way
from the host sets :func:`~.place.place` searches, per kind class and tier, for any host sets:
a set of more hosts than any domain holds always crosses; the disjoint sets of one kind that fit
are bounded as above, by how many fit (the smallest first) in each domain; where a kind's sets
share hosts, only those too large for every domain count. Kinds of one class add up, except
kinds that exclude each other: when every host set of one meets every host set of the other
and no domain holds the union of any two, a kept set of one and a kept set of the other would
share a host, so a domain, which would hold their union; so at most one of them keeps any
set (rows and columns of a grid: dp blocks and pp columns on racks smaller than a row and a
column together). The most weight kept is taken over the kinds that exclude none of each other.
Given the key ``place`` reached, an entry is bounded over the orders that keep inside, as it
does, every group of an earlier class on that tier (the lexicographic sense ``place``
minimises in): a set stays inside only with all the slots those groups join to it.

>>> key_bound([[0, 0, 0, 1, 1, 1]], [[((0, 1), (1,)), ((2, 3), (1,)), ((4, 5), (1,))]], 1)
(1,)
>>> rows, columns = [((0, 1), (1,)), ((2, 3), (1,))], [((0, 2), (1,)), ((1, 3), (1,))]
>>> key_bound([[0, 0, 1, 1]], [rows, columns], 1)  # a row and a column need 3 > 2 hosts
(2,)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..._machine.allocation import Allocation
from ..._megatron.topology import Topology
from ..crossings import distinct_kinds, slot_sets
from .search import WeightedSet

__all__ = ["key_bound", "lower_bound"]


def key_bound(
    labels: Sequence[Sequence[int]],
    families: Sequence[Sequence[WeightedSet]],
    classes: int,
    key: Sequence[int] | None = None,
) -> tuple[int, ...]:
    """Per entry of the crossing key (``class * tiers + tier``), the fewest groups that cross on
    any order of the hosts: ``labels[t][host]`` is a host's domain at tier ``t`` (an unknown one a
    label of its own), ``families`` the slot sets of each distinct kind with their weights per
    class, ``classes`` how many kind classes the key has.

    With ``key`` (a key reached), each entry is bounded over the orders whose earlier entries
    are 0 where ``key``'s are: there every host set of an earlier class stays inside a domain of
    the tier, so a later set stays inside only with every slot those sets join to its own
    (the sets are glued, and a set counts with the slots it is glued to).
    """
    tiers = len(labels)
    bound = [0] * (classes * tiers)
    for t, row in enumerate(labels):
        capacity = sorted(Counter(row).values(), reverse=True)
        glue = _Glue()
        for c in range(classes):
            weighted = [
                [(glue.spread(slots), weights[c]) for slots, weights in family if weights[c]]
                for family in families
            ]
            weighted = [family for family in weighted if family]
            total = sum(w for family in weighted for _, w in family)
            bound[c * tiers + t] = total - _kept(weighted, capacity)
            if key is not None and key[c * tiers + t] == 0:
                for family in families:
                    for slots, weights in family:
                        if weights[c]:
                            glue.join(slots)
    return tuple(bound)


class _Glue:
    """Slots joined by host sets that stay inside one domain (union-find)."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}

    def find(self, slot: int) -> int:
        parent = self.parent
        root = slot
        while parent.get(root, root) != root:
            root = parent[root]
        while parent.get(slot, slot) != root:
            parent[slot], slot = root, parent[slot]
        return root

    def join(self, slots: Sequence[int]) -> None:
        """Glue ``slots`` together (the smaller component into the larger)."""
        head = self.find(slots[0])
        for slot in slots[1:]:
            root = self.find(slot)
            if root == head:
                continue
            big, small = (head, root)
            if len(self.members.get(big, [big])) < len(self.members.get(small, [small])):
                big, small = small, big
            self.members.setdefault(big, [big]).extend(self.members.pop(small, [small]))
            self.parent[small] = head = big

    def spread(self, slots: tuple[int, ...]) -> tuple[int, ...]:
        """``slots`` and every slot glued to one of them, ascending."""
        if not self.parent:
            return slots
        roots = {self.find(s) for s in slots}
        return tuple(sorted(s for root in roots for s in self.members.get(root, [root])))


_PAIRS = 20_000
"""The most pairs of host sets compared to find two kinds that exclude each other."""


def _kept(
    families: Sequence[Sequence[tuple[tuple[int, ...], int]]], capacity: Sequence[int]
) -> int:
    """The most weight of ``families`` (each one kind's sets) that can stay inside domains of
    ``capacity`` hosts each (largest first): per kind by :func:`_family_kept`; two kinds whose
    sets all meet and never fit one domain together (a host set of one and one of the other
    sharing a host must share its domain) cannot both keep a set, so the most over the sets
    of kinds that exclude no other in the set is taken."""
    largest = capacity[0] if capacity else 0
    kept = [_family_kept(family, capacity) for family in families]
    fitting = [[set(slots) for slots, _ in family if len(slots) <= largest] for family in families]
    excludes = [
        [
            i != j
            and bool(fitting[i])
            and bool(fitting[j])
            and len(fitting[i]) * len(fitting[j]) <= _PAIRS
            and all(a & b and len(a | b) > largest for a in fitting[i] for b in fitting[j])
            for j in range(len(families))
        ]
        for i in range(len(families))
    ]
    best = 0
    for chosen in range(1 << len(families)):
        members = [i for i in range(len(families)) if chosen >> i & 1]
        if not any(excludes[i][j] for i in members for j in members):
            best = max(best, sum(kept[i] for i in members))
    return best


def _family_kept(sets: Sequence[tuple[tuple[int, ...], int]], capacity: Sequence[int]) -> int:
    """The most weight of ``sets`` (one kind's, of two or more slots) that can stay inside
    domains of ``capacity`` hosts each (largest first): disjoint sets, as many as fit each
    domain, smallest first, the heaviest; else every set that fits the largest domain."""
    largest = capacity[0] if capacity else 0
    fitting = [(len(slots), w, slots) for slots, w in sets if len(slots) <= largest]
    covered = sum(size for size, _, _ in fitting)
    if len({s for _, _, slots in fitting for s in slots}) != covered:
        return sum(w for _, w, _ in fitting)
    sizes = sorted(size for size, _, _ in fitting)
    fit = 0
    for room in capacity:
        used = 0
        for size in sizes:
            if used + size > room:
                break
            used += size
            fit += 1
    heaviest = sorted((w for _, w, _ in fitting), reverse=True)
    return sum(heaviest[:fit])


def lower_bound(
    topology: Topology, allocation: Allocation, tier: str | int, kinds: Sequence[str]
) -> int | None:
    """The fewest groups of ``kinds`` that cross ``tier`` on any order of ``allocation``'s hosts
    with equal GPU counts (``rank_offset`` 0), or None where the bound does not apply."""
    gpus = allocation.hosts[0].gpus
    index = allocation.tier_index(tier)
    capacity = Counter(
        host.domains[index] if host.domains[index] is not None else f"\0{position}"
        for position, host in enumerate(allocation.hosts)
    )
    first = distinct_kinds(topology, [k for k in kinds if k in topology.kinds])
    total = 0
    for kind in first:
        sets = slot_sets(topology, first[kind], gpus)
        if not sets:
            continue
        sizes = {len(hosts) for hosts in sets}
        covered = sum(len(hosts) for hosts in sets)
        if len(sizes) > 1 or len(set().union(*sets)) != covered:
            return None
        size = sizes.pop()
        whole = sum(c // size for c in capacity.values())
        must_cross = max(0, len(sets) - whole)
        total += sum(sorted(sets.values())[:must_cross])
    return total
