"""What the communicators of several modules cost together, from their creation schedule.

Every distinct rank set of two or more ranks is one communicator (a set two modules or two kinds
share is made once), so a rank's count is the number of creation calls it joins a group in, and
an NVLink domain's count is the number of those sets with two or more ranks in it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

import attrs

from ..._modules.schedule import Creation

__all__ = ["ModulesBudget", "modules_budget"]


@attrs.frozen
class ModulesBudget:
    """The communicators of all modules together (a shared communicator counted once).

    Attributes:
        per_rank_min, per_rank_max: distinct communicators one rank joins over all modules.
        communicators: distinct communicators of the whole job (every rank set once).
        calls: creation calls of the schedule (each rank takes part in every call).
        nvls_most, nvls_domain: the most communicators with two or more ranks in one NVLink
            domain (or node) and that domain's label.
    """

    per_rank_min: int
    per_rank_max: int
    communicators: int
    calls: int
    nvls_most: int
    nvls_domain: int

    def to_dict(self) -> dict[str, int]:
        """JSON-safe: every attribute by name."""
        return attrs.asdict(self)


def modules_budget(
    calls: Sequence[Creation], world_size: int, domain_of: Callable[[int], int]
) -> ModulesBudget:
    """Count, per rank and per domain, the communicators of ``calls`` (time O(ranks in groups)).

    ``domain_of(r)`` labels the NVLink domain (or node) of global rank ``r``.

    >>> from topology import Module, Modules, Topology
    >>> mods = Modules([Module("a", Topology(8, tp=2)), Module("b", Topology(8, tp=4))])
    >>> budget = modules_budget(mods.schedule(), 8, lambda rank: rank // 8)
    >>> budget.per_rank_max, budget.communicators, budget.nvls_most
    (5, 13, 13)
    """
    joined = [0] * world_size
    per_domain: Counter[int] = Counter()
    groups = 0
    for call in calls:
        for group in call.groups:
            groups += 1
            for rank in group:
                joined[rank] += 1
            held = Counter(domain_of(rank) for rank in group)
            per_domain.update(domain for domain, n in held.items() if n >= 2)
    most, domain = max(((n, -d) for d, n in per_domain.items()), default=(0, 0))
    return ModulesBudget(
        per_rank_min=min(joined, default=0),
        per_rank_max=max(joined, default=0),
        communicators=groups,
        calls=len(calls),
        nvls_most=most,
        nvls_domain=-domain,
    )
