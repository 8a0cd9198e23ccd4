"""A lower bound on the groups that must cross a tier, whatever the host order (private).

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
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .._megatron.topology import Topology
from .allocation.model import Allocation
from .crossings import distinct_kinds, slot_sets

__all__ = ["lower_bound"]


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
