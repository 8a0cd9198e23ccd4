"""Exact search for :func:`~.place.place`: the least crossing key over every host order (private).

The packing and the swaps in :mod:`.place` are heuristics; on small allocations this search
proves the optimum of the whole key (:meth:`Crossings.key`, every class and tier) by branch and
bound, so ``place`` is exact there.

Algorithm: slots are given hosts one at a time, slot 0 first. The key depends only on each
host's domain per tier, so hosts with equal domains at every tier are one *type* and the search
branches over types with hosts left (a domain that holds a single host of the allocation is a
fresh domain, so the hosts alone in theirs at every tier are one type too). A group's host set
crosses tier ``t`` once two of its slots sit in different domains of ``t``; those crossings stay
whatever the later slots get, so the key of the crossings already fixed is an admissible lower
bound on every completion, entry by entry, hence lexicographically. A branch whose bound is not
below the best key found is cut: the search is complete (every order not cut is tried, every
order cut is no better than one kept), and only strictly better orders replace the incumbent,
so ties keep the caller's order. Types are tried in order of their first host in the caller's
order, and each type's hosts are handed out in that order, so the result is deterministic.

At depth ``k`` the search has at most ``min(T ** k, n! / (n - k)!)`` nodes for ``T`` types of
``n`` hosts; :func:`affordable` sums that over the slots and the caller runs the search where
the sum is at most :data:`EXACT_NODES` (109,600, every order of 8 hosts, about half a second):
on every allocation of up to :data:`EXACT_HOSTS` hosts, and on larger ones with few slots or
few types (18 hosts in 3 racks for a job of 8 hosts: 9,840). Usually it visits a few hundred.

>>> labels = [[0, 1, 0, 1]]  # one tier: hosts 0 and 2 in rack 0, hosts 1 and 3 in rack 1
>>> sets = [((0, 1), (1,)), ((2, 3), (1,))]  # two groups on slots 0+1 and 2+3
>>> search([0, 1, 2, 3], labels, sets, 4, (2,))
Searched(order=(0, 2, 1, 3), key=(0,), nodes=6)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import attrs

from .search import WeightedSet

__all__ = ["EXACT_HOSTS", "EXACT_NODES", "Searched", "affordable", "host_types", "search"]

EXACT_HOSTS = 8
"""Up to this many hosts, :func:`affordable` always holds."""

EXACT_NODES = 109_600
"""The most nodes :func:`affordable` allows the search: every order of 8 hosts."""

EXACT_SLOTS = 64
"""The most slots :func:`affordable` allows the search (it recurses once per slot)."""


def host_types(
    hosts: Sequence[int], labels: Sequence[Sequence[int]]
) -> dict[tuple[int, ...], list[int]]:
    """``hosts`` by type, in order of first appearance: a host's domain per tier, -1 where the
    domain holds no other host of the allocation (such hosts are interchangeable)."""
    sizes = [Counter(row) for row in labels]
    types: dict[tuple[int, ...], list[int]] = {}
    for host in hosts:
        kind = tuple(row[host] if sizes[t][row[host]] > 1 else -1 for t, row in enumerate(labels))
        types.setdefault(kind, []).append(host)
    return types


def affordable(labels: Sequence[Sequence[int]], hosts: int, slots: int) -> bool:
    """True when the search's nodes, at most ``min(T ** k, hosts! / (hosts - k)!)`` at depth
    ``k`` for ``T`` host types, sum to at most :data:`EXACT_NODES` over at most
    :data:`EXACT_SLOTS` slots, or when there is one type (every order has the same key).

    >>> affordable([[0] * 8 + [1] * 8 + [2] * 2], 18, 8)  # 3 + 9 + ... + 3 ** 8 = 9,840
    True
    >>> affordable([[r // 2 for r in range(12)]], 12, 12)  # 6 racks of 2: 6 ** 7 alone > 109,600
    False
    """
    count = len(host_types(range(hosts), labels))
    if count == 1:
        return True
    if slots > EXACT_SLOTS:
        return False
    total, orders, sequences = 0, 1, 1
    for depth in range(min(slots, hosts)):
        orders *= hosts - depth
        sequences *= count
        total += min(orders, sequences)
        if total > EXACT_NODES:
            return False
    return True


@attrs.frozen
class Searched:
    """What :func:`search` found: a strictly better ``order`` and its ``key`` (or None and the
    incumbent, which nothing beats) and the nodes visited."""

    order: tuple[int, ...] | None
    key: tuple[int, ...]
    nodes: int


def search(
    hosts: Sequence[int],
    labels: Sequence[Sequence[int]],
    sets: Sequence[WeightedSet],
    slots: int,
    incumbent: tuple[int, ...],
) -> Searched:
    """The host order of ``slots`` slots with the least key below ``incumbent``, if any.

    Args:
        hosts: every host, in the order that wins ties (a type's hosts are used in this order).
        labels: ``labels[t][host]``, the domain of ``host`` at tier ``t``.
        sets: the groups' slot sets with their weights per kind class (key entry
            ``class * tiers + tier``).
        slots: how many slots run ranks.
        incumbent: the key to beat (``classes * tiers`` entries).
    """
    tiers = len(labels)
    if not tiers or not sets:
        return Searched(None, tuple(incumbent), 0)
    classes = len(incumbent) // tiers
    types = host_types(hosts, labels)
    if len(types) == 1:  # every order has the same key
        return Searched(None, tuple(incumbent), 0)
    vectors = list(types)
    left = [len(members) for members in types.values()]
    holding: list[list[int]] = [[] for _ in range(slots)]
    for index, (members, _) in enumerate(sets):
        for slot in members:
            holding[slot].append(index)
    unset = -(slots + 2)
    first = [[unset] * tiers for _ in sets]
    crossed = [[False] * tiers for _ in sets]
    bound = [0] * (classes * tiers)
    best = list(incumbent)
    chosen = [0] * slots
    found: list[int] | None = None
    nodes = 0

    def visit(slot: int) -> None:
        nonlocal found, nodes, best
        if slot == slots:
            best, found = list(bound), list(chosen)
            return
        for kind, vector in enumerate(vectors):
            if not left[kind]:
                continue
            nodes += 1
            trail: list[tuple[int, int, bool]] = []
            for index in holding[slot]:
                weights = sets[index][1]
                for t in range(tiers):
                    if crossed[index][t]:
                        continue
                    label = vector[t] if vector[t] >= 0 else -1 - slot
                    if first[index][t] == unset:
                        first[index][t] = label
                        trail.append((index, t, False))
                    elif first[index][t] != label:
                        crossed[index][t] = True
                        trail.append((index, t, True))
                        for c in range(classes):
                            bound[c * tiers + t] += weights[c]
            if bound < best:
                left[kind] -= 1
                chosen[slot] = kind
                visit(slot + 1)
                left[kind] += 1
            for index, t, was_crossing in reversed(trail):
                if was_crossing:
                    crossed[index][t] = False
                    weights = sets[index][1]
                    for c in range(classes):
                        bound[c * tiers + t] -= weights[c]
                else:
                    first[index][t] = unset

    visit(0)
    if found is None:
        return Searched(None, tuple(incumbent), nodes)
    queues = [iter(members) for members in types.values()]
    order = tuple(next(queues[kind]) for kind in found)
    return Searched(order, tuple(best), nodes)
