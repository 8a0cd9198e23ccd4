"""Modules: named layouts that are colocated (one span) or disjoint (tiling the world).

Validated as Megatron's MIMO validates its module grids (``_validate_grid_layout`` in
``examples/mimo/training/topology.py`` and ``RankRole.build``): the spans are either all the same
(colocated) or pairwise disjoint, and together they cover ``[0, world_size)`` with no gap.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .bridge import Bridge, bridge
from .module import Module, span_text
from .schedule import Creation, schedule

__all__ = ["Modules"]


def _modules(value: object) -> tuple[Module, ...]:
    if isinstance(value, Module) or not isinstance(value, Iterable) or isinstance(value, str):
        raise TopologyError(
            f"modules must be a sequence of topology.Module, got {show(value)}; pass e.g. "
            "[Module('vision', Topology(8)), Module('language', Topology(8, tp=2), rank_offset=8)]"
        )
    modules = tuple(value)
    if not modules:
        raise TopologyError("modules must hold at least one topology.Module, got none; add one")
    for item in modules:
        if not isinstance(item, Module):
            raise TopologyError(
                f"modules must hold only topology.Module values, got {show(item)} "
                f"({type(item).__name__}); wrap a layout as Module('name', layout)"
            )
    return modules


def _check_names(modules: tuple[Module, ...]) -> None:
    seen: set[str] = set()
    for module in modules:
        if module.name in seen:
            raise TopologyError(
                f"module name {module.name!r} is used twice in {[m.name for m in modules]}; give "
                "each module its own name"
            )
        seen.add(module.name)


def _check_spans(modules: tuple[Module, ...]) -> None:
    """Spans all equal or pairwise disjoint (Megatron's rule), then tiling ``[0, world)``."""
    first = modules[0].span
    if all(m.span == first for m in modules):
        if first.start:
            raise TopologyError(
                f"colocated modules span {span_text(first)}, which leaves ranks "
                f"{span_text(range(first.start))} in no module; start them at rank_offset=0"
            )
        return
    ordered = sorted(modules, key=lambda m: (m.span.start, m.span.stop))
    for a, b in pairwise(ordered):
        if b.span.start < a.span.stop:
            raise TopologyError(
                f"modules {a.name!r} {span_text(a.span)} and {b.name!r} {span_text(b.span)} "
                "overlap without sharing their span; give colocated modules the same rank_offset "
                "and world size, or make every span disjoint"
            )
    expected = 0
    for module in ordered:
        if module.span.start != expected:
            raise TopologyError(
                f"ranks {span_text(range(expected, module.span.start))} are in no module (the "
                f"next, {module.name!r}, starts at rank {module.span.start}); disjoint modules "
                f"must tile [0, world_size): set {module.name!r}'s rank_offset={expected}"
            )
        expected = module.span.stop


@attrs.frozen(repr=False)
class Modules:
    """Named modules that share one span (colocated) or tile ``[0, world_size)`` disjointly.

    >>> from topology import Module, Topology
    >>> mods = Modules([
    ...     Module("vision", Topology(8)),
    ...     Module("language", Topology(8, tp=2, pp=2), rank_offset=8),
    ... ])
    >>> mods.world_size, mods.colocated, mods.serves(9), mods.group_of(9, "language", "tp")
    (16, False, ('language',), (8, 9))

    Raises:
        TopologyError: for no module, a repeated name, spans that overlap without being equal,
            or ranks of ``[0, world_size)`` in no module.
    """

    modules: tuple[Module, ...] = attrs.field(converter=_modules)
    """The modules, in the order given (the order of :meth:`schedule`'s uses)."""

    def __attrs_post_init__(self) -> None:
        _check_names(self.modules)
        _check_spans(self.modules)

    @property
    def world_size(self) -> int:
        """How many global ranks the modules cover together."""
        return max(m.span.stop for m in self.modules)

    @property
    def colocated(self) -> bool:
        """True when every module spans the same ranks (one module alone is colocated)."""
        return all(m.span == self.modules[0].span for m in self.modules)

    @property
    def names(self) -> tuple[str, ...]:
        """The modules' names, in order."""
        return tuple(m.name for m in self.modules)

    def module(self, name: str) -> Module:
        """The module called ``name``.

        Raises:
            TopologyError: for a name no module has.
        """
        for module in self.modules:
            if module.name == name:
                return module
        raise TopologyError(
            f"no module is called {show(name)}; the modules are {', '.join(self.names)}"
        )

    def serves(self, rank: int) -> tuple[str, ...]:
        """The names of the modules whose span holds global ``rank``, in order.

        Raises:
            TopologyError: for a rank outside ``[0, world_size)``.
        """
        if type(rank) is not int or not 0 <= rank < self.world_size:
            raise TopologyError(
                f"rank {show(rank)} is outside the modules' world [0, {self.world_size}); pass a "
                f"rank from 0 to {self.world_size - 1}"
            )
        return tuple(m.name for m in self.modules if rank in m.span)

    def group_of(self, rank: int, module: str, kind: str) -> tuple[int, ...]:
        """The group of ``kind`` of module ``module`` that holds global ``rank``.

        Raises:
            TopologyError: for an unknown module or kind, or a rank outside that module.
        """
        return self.module(module).group_of(rank, kind)

    def schedule(self, spans: bool = False) -> tuple[Creation, ...]:
        """The communicators every module needs, as creation calls in one global order.

        See :func:`topology._modules.schedule.schedule` for the algorithm and its bounds.
        """
        return schedule(self.modules, spans=spans)

    def bridge(self, sender: str, receiver: str, **options: Any) -> Bridge:
        """The bridge from module ``sender``'s last stage to module ``receiver``'s first.

        ``options`` are :func:`topology._modules.bridge.bridge`'s keywords (``zigzag``, ...).

        Raises:
            TopologyError: for a name no module has.
        """
        return bridge(self.module(sender), self.module(receiver), **options)

    def __str__(self) -> str:
        shape = "colocated" if self.colocated else "disjoint"
        return f"{len(self.modules)} {shape} modules over {self.world_size} ranks: " + "; ".join(
            f"{m.name} {span_text(m.span)}" for m in self.modules
        )

    def __repr__(self) -> str:
        return f"Modules({list(self.modules)!r})"
