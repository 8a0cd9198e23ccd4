"""Packings for :func:`~.place.place`: components of slots put whole into domains (private).

A layout's groups join slots into nested components (:func:`tree`: the tp blocks, the blocks
those make with ep, ...). A packing walks that tree from the whole job down and puts each
component whole into a domain with room for it, else packs its children one by one, largest
first. :func:`pack` knows one level of domains (the hosts' domain paths, every tier at once);
:func:`pack_by_tier` tries each tier innermost first, so a component too large for any rack
still goes whole into one spine, and its children then into that spine's racks.

Algorithm (:func:`pack_by_tier`): for a component of ``k`` slots, the first tier ``t`` with a
domain of ``k`` free hosts (first fit or best fit in natural order of domain names) takes it;
at the innermost level the component's slots get that domain's next hosts, above it the
component's children are packed inside that domain the same way. A component no domain of any
tier holds is split into its children. Every slot gets a host: a single slot fits any domain
with a free host.

>>> root = tree(4, [Counter({frozenset({0, 1}): 1, frozenset({2, 3}): 1})])
>>> [c.slots for c in root.children]
[(0, 1), (2, 3)]
>>> pack_by_tier(root, [[0], [2], [1], [3]], [[0, 0, 1, 1]], 4, first_fit)
(0, 2, 1, 3)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..._machine.allocation import Allocation
from ..._machine.hostlist import natural_key
from ..crossings import HostSets

__all__ = [
    "Component",
    "best_fit",
    "first_fit",
    "pack",
    "pack_by_tier",
    "packings",
    "pools",
    "tree",
]


@attrs.frozen
class Component:
    """Slots the groups of some kinds join, and the components of the level below."""

    slots: tuple[int, ...]
    children: tuple[Component, ...]


Chooser = Callable[[list[int], int], int | None]
"""Picks a domain, by its free hosts, for ``need`` slots (None when none has room)."""


def first_fit(free: list[int], need: int) -> int | None:
    """The first domain with room."""
    return next((p for p, room in enumerate(free) if room >= need), None)


def best_fit(free: list[int], need: int) -> int | None:
    """The domain with the least room that is enough (the first of those)."""
    fitting = [(room, p) for p, room in enumerate(free) if room >= need]
    return min(fitting)[1] if fitting else None


def tree(slots: int, levels: Sequence[HostSets]) -> Component:
    """The nested components the kinds' host sets join slots into, finest level first."""
    parent = list(range(slots))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    nodes: dict[int, Component] = {s: Component((s,), ()) for s in range(slots)}
    for sets in levels:
        for members in sets:
            it = iter(members)
            head = find(next(it))
            for other in it:
                root = find(other)
                if root != head:
                    parent[root] = head
        merged: dict[int, list[Component]] = {}
        for component in nodes.values():
            merged.setdefault(find(component.slots[0]), []).append(component)
        if len(merged) == len(nodes):
            continue
        nodes = {
            root: parts[0] if len(parts) == 1 else _joined(parts) for root, parts in merged.items()
        }
    top = list(nodes.values())
    return top[0] if len(top) == 1 else _joined(top)


def _joined(parts: list[Component]) -> Component:
    ordered = sorted(parts, key=lambda c: c.slots[0])
    return Component(tuple(sorted(s for c in ordered for s in c.slots)), tuple(ordered))


def pools(alloc: Allocation, labels: list[list[int]], hosts: Sequence[int]) -> list[list[int]]:
    """The hosts grouped by domain path (every tier), in natural order of outer domain names."""
    found: dict[tuple[int, ...], list[int]] = {}
    for h in hosts:
        found.setdefault(tuple(row[h] for row in labels), []).append(h)

    def path(pool: list[int]) -> tuple[Any, ...]:
        host = alloc.hosts[pool[0]]
        return tuple(natural_key(d or "") for d in reversed(host.domains))

    for pool in found.values():
        pool.sort(key=lambda h: natural_key(alloc.hosts[h].name))
    return sorted(found.values(), key=path)


def pack(root: Component, pools: list[list[int]], slots: int, choose: Chooser) -> tuple[int, ...]:
    """Slot -> host: each component whole into the pool ``choose`` picks, else its children."""
    free = [len(pool) for pool in pools]
    used = [0] * len(pools)
    result = [-1] * slots

    def put(component: Component) -> None:
        pool = choose(free, len(component.slots))
        if pool is not None:
            start = used[pool]
            for slot, host in zip(component.slots, pools[pool][start:], strict=False):
                result[slot] = host
            used[pool] += len(component.slots)
            free[pool] -= len(component.slots)
            return
        for child in sorted(component.children, key=lambda c: -len(c.slots)):
            put(child)

    put(root)
    return tuple(result)


def pack_by_tier(
    root: Component,
    pools: list[list[int]],
    labels: Sequence[Sequence[int]],
    slots: int,
    choose: Chooser,
) -> tuple[int, ...] | None:
    """Slot -> host: each component whole into a domain of the innermost tier that has room
    for it (``labels[t][host]``), its children inside that domain; else its children. None
    when the tiers do not nest (a pool's domain at one tier must fix its domain at the next)."""
    tiers = len(labels)
    # owner[t][p]: the index of pool p's domain at tier t (tier 0: the pool itself).
    owner: list[list[int]] = [list(range(len(pools)))]
    for row in labels[1:]:
        ids: dict[int, int] = {}
        owner.append([ids.setdefault(row[pool[0]], len(ids)) for pool in pools])
    outer: dict[tuple[int, int], int] = {}
    for t in range(tiers - 1):
        for p in range(len(pools)):
            if outer.setdefault((t, owner[t][p]), owner[t + 1][p]) != owner[t + 1][p]:
                return None
    free = [[0] * (max(row) + 1) for row in owner]
    for p, pool in enumerate(pools):
        for t in range(tiers):
            free[t][owner[t][p]] += len(pool)
    # inside[(t, T, D)]: the tier-t domains in the tier-T domain D, in pool order (T = tiers:
    # the whole allocation, D = 0).
    inside: dict[tuple[int, int, int], list[int]] = {}
    seen: set[tuple[int, int, int, int]] = set()
    for p in range(len(pools)):
        for big in range(1, tiers + 1):
            domain = owner[big][p] if big < tiers else 0
            for t in range(big):
                if (t, big, domain, owner[t][p]) not in seen:
                    seen.add((t, big, domain, owner[t][p]))
                    inside.setdefault((t, big, domain), []).append(owner[t][p])
    used = [0] * len(pools)
    result = [-1] * slots

    def put(component: Component, big: int, domain: int) -> None:
        need = len(component.slots)
        for t in range(big):
            candidates = inside[t, big, domain]
            chosen = choose([free[t][d] for d in candidates], need)
            if chosen is None:
                continue
            target = candidates[chosen]
            if t:
                for child in sorted(component.children, key=lambda c: -len(c.slots)):
                    put(child, t, target)
                return
            start = used[target]
            for slot, host in zip(component.slots, pools[target][start:], strict=False):
                result[slot] = host
            used[target] += need
            for level in range(tiers):
                free[level][owner[level][target]] -= need
            return
        for child in sorted(component.children, key=lambda c: -len(c.slots)):
            put(child, big, domain)

    put(root, tiers, 0)
    return tuple(result)


def packings(
    alloc: Allocation, labels: list[list[int]], roots: Sequence[Component], slots: int
) -> list[tuple[str, tuple[int, ...]]]:
    """Every packing of every tree, named: over all hosts and confined to the first domain of
    each tier that holds the job; by domain path (first fit, largest first, best fit) and tier
    by tier (first fit; nested tiers only), the second tree's named ``by weight``."""
    everyone = range(len(alloc.hosts))
    confined: list[tuple[str, Sequence[int]]] = [("", everyone)]
    for tier in range(len(alloc.tiers)):
        sizes = Counter(labels[tier])
        holding = [(n, d) for d, n in sizes.items() if n >= slots]
        if holding:
            domain = min(holding)[1]
            members = [h for h in everyone if labels[tier][h] == domain]
            confined.append((f" in one {alloc.tiers[tier].name}", members))
    found = []
    for number, root in enumerate(roots):
        prefix = "packed" if not number else "packed by weight"
        for suffix, hosts in confined:
            grouped = pools(alloc, labels, hosts)
            largest = sorted(grouped, key=len, reverse=True)
            for name, domains, choose in (
                ("", grouped, first_fit),
                (" largest first", largest, first_fit),
                (" best fit", grouped, best_fit),
            ):
                found.append((prefix + name + suffix, pack(root, domains, slots, choose)))
            if len(alloc.tiers) > 1:
                order = pack_by_tier(root, grouped, labels, slots, first_fit)
                if order is not None:
                    found.append((f"{prefix} tier by tier{suffix}", order))
    return found
