"""The creation schedule of a set of modules: every communicator once, in few collective calls.

A communicator is a set of ranks. Two modules (or two kinds of one module) that need the same
set share one communicator, made once. A *creation call* makes pairwise-disjoint groups at once
(torch's ``split_group`` or ``new_subgroups_by_enumeration``): every rank takes part in every
call, in the same order, and joins at most one group of each.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import attrs

from .._args import show
from .._errors import TopologyError
from .module import Module

__all__ = ["SPAN_USE", "Creation", "schedule"]

SPAN_USE = "span"
"""The use name of a module's whole span (``spans=True``; Megatron's MIMO ``intra_dist_opt``)."""

Use = tuple[str, str]


@attrs.frozen(repr=False)
class Creation:
    """One creation call: pairwise-disjoint groups of global ranks, and whom each serves.

    ``groups`` are sorted (each ascending, then by first rank); ``served[i]`` lists the
    ``(module, kind)`` pairs that use ``groups[i]`` (several when modules or kinds share it).

    >>> call = Creation(((0, 1), (2, 3)), ((("a", "tp"),), (("a", "tp"), ("b", "dp"))))
    >>> call.uses, call.group_of(3), call.group_of(5)
    ((('a', 'tp'), ('b', 'dp')), (2, 3), None)
    """

    groups: tuple[tuple[int, ...], ...]
    """The groups this call makes: pairwise disjoint, each of at least two ranks, sorted."""
    served: tuple[tuple[Use, ...], ...]
    """For each group, the ``(module, kind)`` pairs it serves, in schedule order."""

    @property
    def uses(self) -> tuple[Use, ...]:
        """Every ``(module, kind)`` pair some group of this call serves, each once."""
        return tuple(dict.fromkeys(use for uses in self.served for use in uses))

    def group_of(self, rank: int) -> tuple[int, ...] | None:
        """The group of this call that holds ``rank``, or None (the rank joins no group)."""
        for group in self.groups:
            if rank in group:
                return group
        return None

    def uses_of(self, group: Iterable[int]) -> tuple[Use, ...]:
        """The ``(module, kind)`` pairs that use ``group``.

        Raises:
            TopologyError: for a group this call does not make.
        """
        wanted = tuple(group)
        for made, uses in zip(self.groups, self.served, strict=True):
            if made == wanted:
                return uses
        raise TopologyError(
            f"group {show(wanted)} is not made by this call; pass one of its {len(self.groups)} "
            "groups"
        )

    def __str__(self) -> str:
        uses = ", ".join(f"{m}:{k}" for m, k in self.uses)
        return f"{len(self.groups)} groups for {uses}"

    def __repr__(self) -> str:
        return f"Creation(<{len(self.groups)} groups>, uses={self.uses!r})"


def _families(
    modules: tuple[Module, ...], spans: bool
) -> Iterator[tuple[Use, Iterable[tuple[int, ...]]]]:
    """``((module, kind), groups)`` in schedule order: kinds by first appearance, then modules."""
    order = dict.fromkeys(kind for module in modules for kind in module.kinds)
    for kind in order:
        for module in modules:
            if kind in module.kinds:
                yield (module.name, kind), module.groups(kind)
    if spans:
        for module in modules:
            yield (module.name, SPAN_USE), (tuple(module.span),)


def schedule(modules: Iterable[Module], *, spans: bool = False) -> tuple[Creation, ...]:
    """Every group of size >= 2 of every module and kind, made once, in as few calls as it takes.

    Algorithm: walk the ``(module, kind)`` pairs with the kinds in order of first appearance
    (the first module's kinds, then new kinds of the next) and, for each kind, the modules in
    order; ``spans=True`` adds each module's whole span last. A group already made gains one
    more use; a new one goes to the first call whose groups it does not meet (first fit), or
    opens a call. Every rank walks the same values, so every rank gets the same calls.

    Bound: for disjoint modules, the ``j``-th pair of module ``m`` lands in call ``j`` or earlier
    (the calls without a group of ``m`` are free to it, and its first ``j`` pairs fill at most
    ``j`` calls), so there are at most ``max over m of (number of m's pairs)`` calls, not the
    sum. Colocated modules share ranks; their calls are bounded by the distinct pairs.

    >>> from topology import Module, Topology
    >>> mods = [Module("a", Topology(4, tp=2)), Module("b", Topology(4, tp=2), rank_offset=4)]
    >>> calls = schedule(mods)
    >>> len(calls), calls[1].groups, calls[1].uses[:2]
    (3, ((0, 1), (2, 3), (4, 5), (6, 7)), (('a', 'tp-pp'), ('a', 'tp')))
    """
    modules = tuple(modules)
    where: dict[tuple[int, ...], int] = {}  # group -> call index
    calls: list[dict[tuple[int, ...], list[Use]]] = []
    taken: list[set[int]] = []
    for use, groups in _families(modules, spans):
        for group in groups:
            if len(group) < 2:
                continue
            key = tuple(group)
            if key in where:
                uses = calls[where[key]][key]
                if use not in uses:
                    uses.append(use)
                continue
            index = next((i for i, busy in enumerate(taken) if busy.isdisjoint(key)), len(calls))
            if index == len(calls):
                calls.append({})
                taken.append(set())
            calls[index][key] = [use]
            taken[index].update(key)
            where[key] = index
    return tuple(
        Creation(tuple(sorted(call)), tuple(tuple(call[g]) for g in sorted(call))) for call in calls
    )
