"""place_modules(): one host order for several modules (private).

Disjoint modules own whole hosts: each module, in rank order, is placed by
:func:`~topology.place` on the hosts the earlier modules left (a grid module takes the next
hosts as listed), and the job's order is their orders one after another. Colocated modules share
every rank: each Topology module's own best order is a candidate, the launcher's order is the
baseline, and the order whose crossings summed over the modules are fewest wins (the launcher's
on ties).
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ..._args import show
from ..._errors import TopologyError
from ..._machine.allocation import Allocation, host_slots
from ..._machine.hosts import gpu_counts
from ..._megatron.topology import Topology
from ..._modules.modules import Modules
from ..crossings import Crossings, crossings
from ..place.place import place

__all__ = ["ModulesArrangement", "place_modules"]


@attrs.frozen(repr=False)
class ModulesArrangement:
    """What :func:`~topology.place_modules` chose: one host order for every module.

    ``hosts`` are the hosts in launcher order (node rank = index); ``before[i]`` and
    ``after[i]`` count the crossings of ``modules.modules[i]`` (None for a grid module) in the
    launcher's ``baseline`` order and in ``hosts``.
    """

    modules: Modules
    allocation: Allocation
    baseline: str
    hosts: tuple[str, ...]
    before: tuple[Crossings | None, ...]
    after: tuple[Crossings | None, ...]

    @property
    def improved(self) -> bool:
        """True when ``hosts`` crosses fewer groups, summed over the modules, than the baseline."""
        return _total(self.after) < _total(self.before)

    def hostfile(self) -> str:
        """:attr:`hosts`, one per line."""
        return "".join(f"{name}\n" for name in self.hosts)

    def slots(self) -> tuple[int, ...]:
        """The ranks each host of :attr:`hosts` runs (its GPUs, filled in order)."""
        return host_slots(self.allocation, self.hosts, self.modules.world_size)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the hosts, baseline, and per module its crossings before and after."""
        return {
            "hosts": list(self.hosts),
            "baseline": self.baseline,
            "improved": self.improved,
            "modules": [
                {
                    "name": module.name,
                    "rank_offset": module.rank_offset,
                    "world_size": module.world_size,
                    "before": None if before is None else before.to_dict(),
                    "after": None if after is None else after.to_dict(),
                }
                for module, before, after in zip(
                    self.modules.modules, self.before, self.after, strict=True
                )
            ],
        }

    def __repr__(self) -> str:
        return f"ModulesArrangement(modules={self.modules.names}, hosts=<{len(self.hosts)}>)"


def _total(found: tuple[Crossings | None, ...]) -> tuple[int, ...]:
    """The crossings of all modules, summed class by class and tier by tier."""
    keys = [c.key() for c in found if c is not None]
    return tuple(map(sum, zip(*keys, strict=True))) if keys else ()


def place_modules(
    modules: Modules, allocation: Allocation, *, order: str = "listed"
) -> ModulesArrangement:
    """Choose the hosts and their launcher order for every module of ``modules`` at once.

    Args:
        modules: the modules; disjoint ones must start on a host boundary.
        allocation: the hosts (all with the same GPU count) and tiers the job got.
        order: the launcher order to compare against (as for :func:`~topology.place`).

    Returns:
        A :class:`ModulesArrangement`.

    Raises:
        TopologyError: wrong types, hosts with different GPU counts, a disjoint module that
            starts inside a host, or fewer GPUs than ranks.

    >>> from topology import Allocation, Host, Module, Modules, Tier, Topology
    >>> racks = {"n1": "r1", "n2": "r2", "n3": "r1", "n4": "r2"}
    >>> alloc = Allocation([Host(n, 4, (r,)) for n, r in racks.items()],
    ...                    [Tier("rack", nvlink=True)])
    >>> mods = Modules([Module("vision", Topology(8, tp=8)),
    ...                 Module("language", Topology(8, tp=8), rank_offset=8)])
    >>> found = place_modules(mods, alloc)
    >>> found.hosts, found.improved
    (('n1', 'n3', 'n2', 'n4'), True)
    """
    gpus = _checked(modules, allocation)
    slots = math.ceil(modules.world_size / gpus)
    if slots > len(allocation.hosts):
        raise TopologyError(
            f"the modules need {modules.world_size} ranks = {slots} hosts of {gpus} GPUs but the "
            f"allocation has {len(allocation.hosts)}; add hosts or shrink the modules"
        )
    launcher = allocation.ordered(order) if order != "listed" else allocation
    baseline = tuple(h.name for h in launcher.hosts[:slots])
    if modules.colocated:
        hosts = _colocated(modules, allocation, baseline, order)
    else:
        hosts = _disjoint(modules, allocation, launcher, gpus)
    return ModulesArrangement(
        modules,
        allocation,
        order,
        hosts,
        _crossings(modules, allocation, baseline),
        _crossings(modules, allocation, hosts),
    )


def _checked(modules: object, allocation: object) -> int:
    if not isinstance(modules, Modules):
        raise TopologyError(
            f"modules must be a topology.Modules, got {show(modules)} ({type(modules).__name__})"
        )
    if not isinstance(allocation, Allocation):
        raise TopologyError(
            f"allocation must be an Allocation, got {type(allocation).__name__}; read one with "
            "read_allocation(path)"
        )
    gpus = {h.gpus for h in allocation.hosts}
    if len(gpus) > 1:
        raise TopologyError(
            f"place_modules needs hosts with equal GPU counts (modules start on host "
            f"boundaries), got {gpu_counts(allocation.hosts)}; place on the hosts of one count"
        )
    (count,) = gpus
    if not modules.colocated:
        for module in modules.modules:
            if module.rank_offset % count:
                raise TopologyError(
                    f"module {module.name!r} starts at rank {module.rank_offset}, inside a host of "
                    f"{count} GPUs ({module.rank_offset} % {count} = {module.rank_offset % count});"
                    f" start disjoint modules on host boundaries (multiples of {count})"
                )
    return count


def _at_zero(layout: Topology) -> Topology:
    return attrs.evolve(layout, rank_offset=0)


def _crossings(
    modules: Modules, allocation: Allocation, hosts: tuple[str, ...]
) -> tuple[Crossings | None, ...]:
    rank_map = allocation.with_order(hosts).rank_map(modules.world_size)
    return tuple(
        crossings(m.layout, rank_map) if isinstance(m.layout, Topology) else None
        for m in modules.modules
    )


def _colocated(
    modules: Modules, allocation: Allocation, baseline: tuple[str, ...], order: str
) -> tuple[str, ...]:
    candidates = [baseline]
    for module in modules.modules:
        if isinstance(module.layout, Topology):
            candidates.append(place(module.layout, allocation, order=order).hosts)
    scored = [(_total(_crossings(modules, allocation, c)), i) for i, c in enumerate(candidates)]
    return candidates[min(scored)[1]]


def _disjoint(
    modules: Modules, allocation: Allocation, launcher: Allocation, gpus: int
) -> tuple[str, ...]:
    left = list(launcher.hosts)
    hosts: list[str] = []
    for module in sorted(modules.modules, key=lambda m: m.rank_offset):
        need = math.ceil(module.world_size / gpus)
        if isinstance(module.layout, Topology):
            pool = attrs.evolve(allocation, hosts=left)
            chosen = list(place(_at_zero(module.layout), pool).hosts)
        else:
            chosen = [h.name for h in left[:need]]
        hosts += chosen
        left = [h for h in left if h.name not in set(chosen)]
    return tuple(hosts)
