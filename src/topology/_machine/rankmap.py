"""RankMap: where every rank of a launch runs, host by host and tier by tier (private).

A :class:`RankMap` is what a launcher makes of an allocation: hosts in the order it numbers them
(node rank = position), each running ``gpus`` consecutive ranks, and above each host its domain
per tier. It answers per rank (:meth:`RankMap.location`) and per tier for all ranks at once
(:meth:`RankMap.domain_ids`, integer labels a check can compare as it compares ``r // G``), in
time linear in the ranks. :meth:`RankMap.as_cluster` recognises the uniform case a
:class:`~.cluster.Cluster` describes, so checks keep their fast path there.

Algorithm: with ``start[i] = gpus[0] + ... + gpus[i-1]``, rank ``r`` runs on node
``i = max{i : start[i] <= r}`` (a bisection) as local GPU ``r - start[i]``.

>>> from topology import Allocation, Host, Tier
>>> alloc = Allocation([Host("a", 2, ("r1",)), Host("b", 2, (None,)), Host("c", 2, ("r1",))],
...                    [Tier("rack", nvlink=True)])
>>> ranks = alloc.rank_map(5)
>>> ranks.nodes, ranks.domain_ids("rack")
((0, 0, 1, 1, 2), (0, 0, 1, 1, 0))
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator
from typing import Any

import attrs

from .._args import check_size, show
from .._errors import TopologyError
from .._fields import text, tuple_of, whole
from .cluster import Cluster
from .hosts import Host, Tier, tier_index

__all__ = ["Location", "RankMap"]


@attrs.frozen
class Location:
    """Where one rank runs: node rank (host position), host name, local GPU, domain per tier."""

    rank: int = attrs.field(validator=whole(0))
    node: int = attrs.field(validator=whole(0))
    host: str = attrs.field(validator=text)
    local_gpu: int = attrs.field(validator=whole(0))
    domains: tuple[str | None, ...] = attrs.field(default=())


def _starts(hosts: tuple[Host, ...]) -> tuple[int, ...]:
    return tuple(itertools.accumulate((h.gpus for h in hosts[:-1]), initial=0))


@attrs.frozen(repr=False)
class RankMap:
    """Ranks ``0 .. world_size - 1`` on ``hosts`` in launcher order (see the module docstring).

    Every host runs at least one rank; all but the last run one rank per GPU.
    Build one with :meth:`Allocation.rank_map <topology.Allocation.rank_map>`.
    """

    hosts: tuple[Host, ...] = attrs.field(validator=tuple_of(Host))
    tiers: tuple[Tier, ...] = attrs.field(validator=tuple_of(Tier))
    world_size: int = attrs.field(validator=whole(1))
    _start: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.hosts:
            raise TopologyError("RankMap.hosts must name at least one host")
        for host in self.hosts:
            if len(host.domains) != len(self.tiers):
                raise TopologyError(
                    f"host {show(host.name)} names {len(host.domains)} domains for "
                    f"{len(self.tiers)} tiers; give one per tier, None where unknown"
                )
        start = _starts(self.hosts)
        if not start[-1] < self.world_size <= start[-1] + self.hosts[-1].gpus:
            raise TopologyError(
                f"RankMap of {len(self.hosts)} hosts with {start[-1] + self.hosts[-1].gpus} "
                f"GPUs cannot hold world_size {self.world_size}; every host must run a rank"
            )
        object.__setattr__(self, "_start", start)

    @classmethod
    def build(cls, hosts: tuple[Host, ...], tiers: tuple[Tier, ...], world_size: int) -> RankMap:
        """``world_size`` ranks on the first hosts of ``hosts`` that hold them, in that order.

        Raises:
            TopologyError: ``world_size`` is not a positive int or exceeds the GPUs of ``hosts``.
        """
        total = sum(h.gpus for h in hosts)
        check_size(
            "world_size", world_size, at_most=total, why=f"the GPUs of the {len(hosts)} hosts"
        )
        used = bisect.bisect_left(list(itertools.accumulate(h.gpus for h in hosts)), world_size)
        return cls(hosts[: used + 1], tiers, world_size)

    def __repr__(self) -> str:
        return (
            f"<RankMap of {self.world_size} ranks on {len(self.hosts)} hosts "
            f"({self.hosts[0].name} .. {self.hosts[-1].name})>"
        )

    def __len__(self) -> int:
        return self.world_size

    def __iter__(self) -> Iterator[Location]:
        return (self.location(rank) for rank in range(self.world_size))

    def __getitem__(self, rank: int) -> Location:
        return self.location(rank)

    @property
    def host_order(self) -> tuple[str, ...]:
        """Host names in launcher order: node rank ``i`` is ``host_order[i]``."""
        return tuple(h.name for h in self.hosts)

    def _check(self, rank: object) -> int:
        if type(rank) is not int or not 0 <= rank < self.world_size:
            raise TopologyError(
                f"rank {show(rank)} is out of range for {self.world_size} ranks; "
                f"valid: 0 to {self.world_size - 1}"
            )
        return rank

    def node_of(self, rank: int) -> int:
        """The node rank (position in :attr:`host_order`) that runs ``rank``."""
        return bisect.bisect_right(self._start, self._check(rank)) - 1

    def location(self, rank: int) -> Location:
        """Where ``rank`` runs."""
        node = self.node_of(rank)
        host = self.hosts[node]
        return Location(rank, node, host.name, rank - self._start[node], host.domains)

    def _counts(self) -> list[int]:
        counts = [h.gpus for h in self.hosts]
        counts[-1] = self.world_size - self._start[-1]
        return counts

    @property
    def nodes(self) -> tuple[int, ...]:
        """The node rank of every rank, ``nodes[r]``."""
        return tuple(node for node, count in enumerate(self._counts()) for _ in range(count))

    def _host_domain_ids(self, tier: str | int) -> tuple[list[int], list[str | None]]:
        index = tier_index(self.tiers, tier)
        ids: dict[str, int] = {}
        names: list[str | None] = []
        per_host: list[int] = []
        for host in self.hosts:
            domain = host.domains[index]
            if domain is None:
                per_host.append(len(names))
                names.append(None)
                continue
            if domain not in ids:
                ids[domain] = len(names)
                names.append(domain)
            per_host.append(ids[domain])
        return per_host, names

    def host_domain_ids(self, tier: str | int) -> tuple[int, ...]:
        """:meth:`domain_ids` per host (node rank) instead of per rank."""
        return tuple(self._host_domain_ids(tier)[0])

    def domain_ids(self, tier: str | int) -> tuple[int, ...]:
        """An integer label per rank for its domain of ``tier``: equal labels, same domain.

        Labels count from 0 in rank order; a host of unknown domain gets a label of its own.
        """
        per_host, _ = self._host_domain_ids(tier)
        return tuple(
            per_host[node] for node, count in enumerate(self._counts()) for _ in range(count)
        )

    def domain_names(self, tier: str | int) -> tuple[str | None, ...]:
        """The domain name of each label of :meth:`domain_ids` (``None``: unknown)."""
        return tuple(self._host_domain_ids(tier)[1])

    def as_cluster(self) -> Cluster | None:
        """The :class:`Cluster` that places every rank as this map does, if there is one.

        That is: every host runs ``G`` ranks, and the innermost NVLink tier (if any) groups
        consecutive hosts into domains of ``k`` hosts (the last may be short), so rank ``r`` is
        on node ``r // G`` and in domain ``r // (k * G)``. Outer tiers are not part of a
        :class:`Cluster`; None when the map is not uniform.

        >>> from topology import Allocation, Host
        >>> Allocation([Host(f"n{i}", 8) for i in range(4)]).rank_map(32).as_cluster()
        Cluster(gpus_per_node=8, nodes=4, nvlink_domain=None)
        """
        gpus = self.hosts[0].gpus
        if any(h.gpus != gpus for h in self.hosts) or self.world_size != gpus * len(self.hosts):
            return None
        nvlink = next((i for i, t in enumerate(self.tiers) if t.nvlink), None)
        if nvlink is None:
            return Cluster(gpus, len(self.hosts))
        per_host, _ = self._host_domain_ids(nvlink)
        runs = [len(list(group)) for _, group in itertools.groupby(per_host)]
        if len(runs) != len(set(per_host)) or any(r != runs[0] for r in runs[:-1]):
            return None
        if runs[-1] > runs[0]:
            return None
        domain = runs[0] * gpus
        return Cluster(gpus, len(self.hosts), None if domain == gpus else domain)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: tiers, and per host in launcher order its name, ranks and domains."""
        counts = self._counts()
        return {
            "world_size": self.world_size,
            "tiers": [attrs.asdict(t) for t in self.tiers],
            "hosts": [
                {
                    "name": h.name,
                    "first_rank": self._start[i],
                    "ranks": counts[i],
                    "domains": list(h.domains),
                }
                for i, h in enumerate(self.hosts)
            ],
        }
