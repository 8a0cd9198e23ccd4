"""Allocation: the hosts a job really got, the network tiers above them, and the launcher's order.

An :class:`Allocation` lists hosts (name, GPU count) and, for each :class:`Tier` of the hierarchy
above them (innermost first: NVLink domain or rack, leaf switch, spine, pod...), the domain each
host sits in. Ragged racks, missing nodes, hosts whose domain is unknown (``None``) and any host
naming are ordinary inputs. Tiers need not nest (a rail-optimised rack can reach several leaves):
two ranks share tier ``t`` when their hosts name the same domain of ``t``; a host of unknown domain
shares it with no other host, so a group that holds it and another host counts as crossing.

Launchers number hosts in an order of their own; :data:`LAUNCHER_ORDERS` names the ones modelled
and :meth:`Allocation.rank_map` gives the resulting rank -> (host, local GPU, domains) map:

- ``listed``: as the allocation lists them (a hostfile, ``SLURM_HOSTFILE`` with
  ``--distribution=arbitrary``, ``torchrun --node-rank`` set by hand).
- ``lexicographic``: plain string sort of the names, the order torchrun's rendezvous assigns
  node ranks in (``node66 < node7``; pytorch/pytorch#191190).
- ``natural``: digit runs compared as numbers (``node7 < node66``).
- ``slurm``: Slurm's default ``block`` distribution numbers tasks in the job's node order, the
  index order of slurmctld's node table (the order of ``NodeName`` lines in ``slurm.conf``, see
  ``slurm.conf(5)`` "nodes will be considered consecutive in the order defined"); a step's node
  list is built from that bitmap (``bitmap2node_name_sortable(nodeset, false)`` in
  SchedMD/slurm ``src/stepmgr/stepmgr.c``), and ``SLURM_JOB_NODELIST`` is the same set sorted by
  ``hostlist_sort`` (``src/common/hostlist.c``: name without trailing number compared naturally,
  then the number). We model it as that sort, exact on the usual ``slurm.conf`` that defines
  nodes in name order. Not modelled: since Slurm 26.x (SchedMD/slurm commit 1488cac01b, "Add
  topology_[g|p]_get_rank()", 2026) a configured topology plugin ranks nodes by leaf switch or
  block first unless ``SelectTypeParameters=CR_NO_DIST_TOPO_BLOCK`` (``srun(1)``,
  ``--distribution``); give that order as ``listed``.

Units follow :class:`topology.cost.Link`: ``bandwidth`` in bytes per second per GPU and
direction, ``latency`` in seconds; ``None`` when not known.

>>> alloc = Allocation(
...     hosts=(Host("node8", 4, ("rack1",)), Host("node10", 4, ("rack2",)),
...            Host("node9", 4, ("rack1",))),
...     tiers=(Tier("nvlink", nvlink=True),),
... )
>>> [h.name for h in alloc.ordered("lexicographic").hosts]
['node10', 'node8', 'node9']
>>> alloc.rank_map(12, order="natural")[5]
Location(rank=5, node=1, host='node9', local_gpu=1, domains=('rack1',))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import attrs

from .._args import format_choices, show
from .._errors import TopologyError
from .hosts import LAUNCHER_ORDERS, Host, LauncherOrder, Tier, as_tuple, launcher_order, tier_index
from .rankmap import Location, RankMap
from .textfile import host_names

__all__ = [
    "LAUNCHER_ORDERS",
    "Allocation",
    "Host",
    "LauncherOrder",
    "Location",
    "RankMap",
    "Tier",
    "host_slots",
    "launcher_order",
]


def _hosts(owner: Allocation, attribute: Any, value: Any) -> None:
    if not isinstance(value, tuple) or not value or not all(isinstance(h, Host) for h in value):
        raise TopologyError(
            f"Allocation.hosts must be a non-empty tuple of Host, got {show(value)}"
        )


def _tiers(owner: Allocation, attribute: Any, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(t, Tier) for t in value):
        raise TopologyError(f"Allocation.tiers must be a tuple of Tier, got {show(value)}")
    repeated = sorted(n for n, k in Counter(t.name for t in value).items() if k > 1)
    if repeated:
        raise TopologyError(f"tier names must differ; {', '.join(repeated)} appears twice")


@attrs.frozen
class Allocation:
    """Hosts in the order the allocation lists them, and the tiers above them (innermost first).

    Every host names one domain (or ``None``) per tier; host names are unique.

    Raises:
        TopologyError: a repeated host or tier name, or a host whose ``domains`` does not have
            one entry per tier.
    """

    hosts: tuple[Host, ...] = attrs.field(converter=as_tuple, validator=_hosts)
    tiers: tuple[Tier, ...] = attrs.field(default=(), converter=as_tuple, validator=_tiers)

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        for index, host in enumerate(self.hosts):
            if host.name in seen:
                raise TopologyError(
                    f"host {show(host.name)} is listed twice (again at position {index}); "
                    "list each host once with its GPU count"
                )
            seen.add(host.name)
            if len(host.domains) != len(self.tiers):
                raise TopologyError(
                    f"host {show(host.name)} names {len(host.domains)} domains for "
                    f"{len(self.tiers)} tiers ({', '.join(t.name for t in self.tiers) or 'none'}); "
                    "give one per tier, None where unknown"
                )

    def __repr__(self) -> str:
        tiers = ", ".join(t.name for t in self.tiers) or "no tiers"
        return f"<Allocation of {len(self.hosts)} hosts, {self.gpus} GPUs; tiers: {tiers}>"

    @property
    def gpus(self) -> int:
        """GPUs on all hosts together."""
        return sum(host.gpus for host in self.hosts)

    def tier_index(self, tier: str | int) -> int:
        """The position of ``tier`` (a name or an index) in :attr:`tiers`."""
        return tier_index(self.tiers, tier)

    def ordered(self, order: str) -> Allocation:
        """The same allocation with hosts in launcher ``order`` (see :data:`LAUNCHER_ORDERS`)."""
        return attrs.evolve(self, hosts=launcher_order(self.hosts, order))

    def with_order(self, names: tuple[str, ...] | list[str]) -> Allocation:
        """The allocation with hosts in the order of ``names``: a host order handed to the
        launcher (every name once; hosts left out are dropped).

        >>> alloc = Allocation((Host("a", 2), Host("b", 2)))
        >>> [h.name for h in alloc.with_order(["b", "a"]).hosts]
        ['b', 'a']
        """
        names = host_names(names, "host order")
        by_name = {host.name: host for host in self.hosts}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise TopologyError(
                f"host order names {show(missing[0])}, which is not in the allocation; "
                f"hosts: {format_choices(by_name, limit=8)}"
            )
        return attrs.evolve(self, hosts=tuple(by_name[n] for n in names))

    def rank_map(self, world_size: int, *, order: str = "listed") -> RankMap:
        """Where each of ``world_size`` ranks runs when the launcher numbers hosts in ``order``.

        Ranks fill the hosts in that order, ``gpus`` ranks per host (local GPU ``0 .. gpus-1``);
        the last host used may run fewer ranks than it has GPUs.

        Raises:
            TopologyError: ``world_size`` is not a positive int or exceeds the GPUs.
        """
        return RankMap.build(self.ordered(order).hosts, self.tiers, world_size)


def host_slots(allocation: Allocation, hosts: Sequence[str], ranks: int) -> tuple[int, ...]:
    """The ranks each of ``hosts`` (names of ``allocation``'s hosts, in node order) runs when
    ``ranks`` ranks fill their GPUs in that order; hosts past the last used one are left out.

    >>> alloc = Allocation([Host("a", 4), Host("b", 2), Host("c", 4)])
    >>> host_slots(alloc, ["c", "a", "b"], 7)
    (4, 3)
    """
    gpus = {h.name: h.gpus for h in allocation.hosts}
    left, found = ranks, []
    for name in hosts:
        if left <= 0:
            break
        found.append(min(gpus[name], left))
        left -= found[-1]
    return tuple(found)
