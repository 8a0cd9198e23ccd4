"""Tiers: the link each parallel dimension crosses on a real rank map, and how it splits (private).

A group of ranks runs on a set of hosts; it *crosses* a level when those hosts lie in two or more
of its domains. Level 0 is the host itself (``node``), level ``t + 1`` is ``rank_map.tiers[t]``
(a host of unknown domain shares it with no other host). Each level has a link, the one a
message takes to cross it; the *network entry* is the innermost NVLink tier (an NVL72 rack),
or the host when no tier is NVLink:

- levels inside the entry (the host, tiers inner to the NVLink tier) run on NVLink: the NVLink
  tier's own figures where it gives them, else ``hardware.intra``; they are named ``"intra"``;
- a tier outside the entry is priced on its own figures (``hardware.inter`` for a figure it
  does not give) and named by its tier's name;
- crossing the entry itself costs ``hardware.inter`` (named ``"inter"`` for the host, else the
  NVLink tier's name), unless an outer tier is crossed too: then the outer tiers' figures price
  the way out.

A set of crossed levels is priced on its *slowest* link: the lowest bandwidth, ties going to the
outermost level. A group of one host crosses nothing and runs on ``hardware.intra``.

>>> from topology import Allocation, Host, Tier, Topology
>>> from topology.cost import H100_NODE
>>> alloc = Allocation([Host(f"n{i}", 4, (f"r{i // 2}",)) for i in range(4)],
...                    [Tier("rack", nvlink=True)])
>>> tiers = Tiers.of(alloc.rank_map(16), H100_NODE)
>>> [tiers.route(Topology(16, tp=k), "tp").level.name for k in (4, 8, 16)]
['intra', 'intra', 'rack']
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import attrs

from .._machine.hosts import Tier
from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from ._collectives import ring_all_reduce, two_level_all_reduce
from ._hardware import Hardware, Link

__all__ = ["Level", "Route", "Tiers", "domain_split", "group_hosts"]

HostCounts = tuple[tuple[int, int], ...]
"""One group as ``((host, ranks on it), ...)`` sorted by host."""


@attrs.frozen
class Level:
    """One level a group may cross: its position (0 the host), the name shown, its link."""

    index: int
    name: str
    link: Link


@attrs.frozen
class Route:
    """How one dimension's groups travel: the slowest level crossed and the groups' host counts.

    ``level`` is the host level on ``hardware.intra`` when no group leaves its host; ``groups``
    counts each distinct :data:`HostCounts` with how many groups share it.
    """

    level: Level
    groups: tuple[tuple[HostCounts, int], ...]


def group_hosts(topology: Topology, kind: str, nodes: Sequence[int]) -> Counter[HostCounts]:
    """Each distinct ``((host, ranks), ...)`` of ``kind``'s groups, with how many groups share it.

    ``nodes[r]`` is the host (node rank) of global rank ``r``.

    >>> group_hosts(Topology(8, tp=4), "tp", [r // 2 for r in range(8)])
    Counter({((0, 2), (1, 2)): 1, ((2, 2), (3, 2)): 1})
    """
    found: Counter[HostCounts] = Counter()
    for group in topology.groups(kind):
        found[tuple(sorted(Counter(nodes[r] for r in group).items()))] += 1
    return found


def domain_split(hosts: HostCounts, labels: Sequence[int]) -> tuple[int, int] | None:
    """``(m, k)`` when the group spans ``k`` domains (``labels[host]``) of ``m`` ranks each.

    None when the domains hold different numbers of the group's ranks.

    >>> domain_split(((0, 2), (1, 2), (2, 2), (3, 2)), [0, 0, 1, 1])
    (4, 2)
    >>> domain_split(((0, 2), (1, 2), (2, 2)), [0, 0, 1]) is None
    True
    """
    per_domain: Counter[int] = Counter()
    for host, ranks in hosts:
        per_domain[labels[host]] += ranks
    sizes = set(per_domain.values())
    if len(sizes) != 1:
        return None
    return sizes.pop(), len(per_domain)


def _link(tier: Tier, fallback: Link) -> Link:
    latency = fallback.latency if tier.latency is None else tier.latency
    bandwidth = fallback.bandwidth if tier.bandwidth is None else tier.bandwidth
    return Link(latency=latency, bandwidth=bandwidth)


@attrs.frozen
class Tiers:
    """The levels of one rank map priced on one hardware; build it with :meth:`of`.

    ``nodes[r]`` is the host of rank ``r`` and ``labels[level][host]`` the host's domain label
    at ``level``; ``levels[level]`` prices crossing ``level`` (None at the network entry
    ``entry``, whose crossing ``leave`` prices when no outer tier is crossed too).
    """

    nodes: tuple[int, ...]
    labels: tuple[tuple[int, ...], ...]
    levels: tuple[Level | None, ...]
    entry: int
    leave: Level
    intra: Link

    @classmethod
    def of(cls, rank_map: RankMap, hardware: Hardware) -> Tiers:
        """The levels of ``rank_map`` (host, then each tier) with their links on ``hardware``."""
        tiers = rank_map.tiers
        nvlink = next((t for t, tier in enumerate(tiers) if tier.nvlink), None)
        entry = 0 if nvlink is None else nvlink + 1
        fast = hardware.intra if nvlink is None else _link(tiers[nvlink], hardware.intra)
        levels: list[Level | None] = [None] * (len(tiers) + 1)
        for index in range(entry):
            tier_fast = fast if index == 0 else _link(tiers[index - 1], fast)
            levels[index] = Level(index, "intra", tier_fast)
        for index in range(entry + 1, len(tiers) + 1):
            tier = tiers[index - 1]
            levels[index] = Level(index, tier.name, _link(tier, hardware.inter))
        name = "inter" if nvlink is None else tiers[nvlink].name
        host_count = len(rank_map.hosts)
        labels = (
            tuple(range(host_count)),
            *(rank_map.host_domain_ids(t) for t in range(len(tiers))),
        )
        return cls(
            nodes=rank_map.nodes,
            labels=labels,
            levels=tuple(levels),
            entry=entry,
            leave=Level(entry, name, hardware.inter),
            intra=hardware.intra,
        )

    def crossed(self, hosts: Iterable[int]) -> frozenset[int]:
        """The levels whose domains ``hosts`` span two or more of."""
        hosts = tuple(hosts)
        return frozenset(
            level for level, labels in enumerate(self.labels) if len({labels[h] for h in hosts}) > 1
        )

    def slowest(self, crossed: Iterable[int]) -> Level | None:
        """The slowest link of the ``crossed`` levels (lowest bandwidth, ties: outermost).

        None when nothing is crossed (the group stays on one host).
        """
        crossed = frozenset(crossed)
        found: list[Level] = []
        for index in sorted(crossed):
            level = self.levels[index]
            if level is not None:
                found.append(level)
        if self.entry in crossed and not any(i > self.entry for i in crossed):
            found.append(self.leave)
        best: Level | None = None
        for level in found:
            if best is None or level.link.bandwidth <= best.link.bandwidth:
                best = level
        return best

    def route(self, topology: Topology, kind: str) -> Route:
        """The slowest level any group of ``kind`` crosses, and the groups' host counts."""
        groups = group_hosts(topology, kind, self.nodes)
        crossed: set[int] = set()
        for hosts in groups:
            crossed |= self.crossed(h for h, _ in hosts)
        level = self.slowest(crossed)
        return Route(level or Level(0, "intra", self.intra), tuple(groups.items()))

    def all_reduce(self, route: Route, size: float, *, hierarchical: bool = True) -> float:
        """Seconds of the slowest group's all-reduce of ``size`` units on ``route``.

        Flat: a ring over the route's link. Hierarchical: a group that spans ``k`` domains of
        the route's level with ``m`` ranks in each reduces inside them over the slowest link its
        per-domain parts cross (``hardware.intra`` if none), then across over the route's link
        (``hierarchical_all_reduce``); any other group runs the flat ring.
        """
        level = route.level
        worst = 0.0
        for hosts, _ in route.groups:
            n = sum(ranks for _, ranks in hosts)
            split = domain_split(hosts, self.labels[level.index]) if hierarchical else None
            if split is None:
                seconds = ring_all_reduce(level.link, n, size)
            else:
                m, k = split
                seconds = two_level_all_reduce(self._inner(hosts, level), level.link, m, k, size)
            worst = max(worst, seconds)
        return worst

    def _inner(self, hosts: HostCounts, level: Level) -> Link:
        """The slowest link the parts of ``hosts`` inside one domain of ``level`` cross."""
        parts: dict[int, list[int]] = {}
        for host, _ in hosts:
            parts.setdefault(self.labels[level.index][host], []).append(host)
        crossed: set[int] = set()
        for part in parts.values():
            crossed |= self.crossed(part)
        inner = self.slowest(crossed)
        return self.intra if inner is None else inner.link
