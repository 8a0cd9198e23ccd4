"""Module: one named layout (a Topology or AxisGroups) placed on its own span of global ranks."""

from __future__ import annotations

import attrs

from .._args import check_index, show
from .._errors import TopologyError
from .._layout.axis_groups import AxisGroups
from .._layout.groups import GroupList
from .._megatron.topology import Topology

__all__ = ["Module", "span_text"]

Layout = Topology | AxisGroups


def span_text(span: range) -> str:
    """A span as the half-open interval it is: ``[8, 16)``."""
    return f"[{span.start}, {span.stop})"


def _name(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise TopologyError(
            f"a module name must be a non-empty string, got {show(value)}; name it, e.g. "
            "'vision' or 'language'"
        )
    return value


def _placed(layout: object, rank_offset: object, name: str) -> tuple[Layout, int]:
    """The layout moved to start at the module's rank_offset, and that offset (one rule)."""
    if not isinstance(layout, (Topology, AxisGroups)):
        raise TopologyError(
            f"module {name!r} needs a topology.Topology or topology.AxisGroups layout, got "
            f"{show(layout)} ({type(layout).__name__}); pass e.g. Topology(8, tp=2)"
        )
    offset = check_index("rank_offset", rank_offset)
    own = layout.rank_offset
    if offset and own and offset != own:
        raise TopologyError(
            f"module {name!r} has rank_offset={offset} but its layout starts at rank {own}; give "
            "the offset once (rank_offset=0 keeps the layout's, or a layout at rank 0)"
        )
    start = offset or own
    if start == own:
        return layout, start
    if isinstance(layout, Topology):
        return attrs.evolve(layout, rank_offset=start), start
    return AxisGroups(attrs.evolve(layout.grid, rank_offset=start), kinds=layout.kinds), start


@attrs.frozen(repr=False)
class Module:
    """A named layout over ``range(rank_offset, rank_offset + layout.world_size)``.

    ``layout`` is a :class:`~topology.Topology` (Megatron's kinds) or an
    :class:`~topology.AxisGroups` (a grid's axes under kind names). One rule places it: a layout
    whose own ``rank_offset`` is ``r > 0`` starts the module at ``r`` (``rank_offset=0``, the
    default, keeps it; any other value raises); otherwise the layout is moved to start at
    ``rank_offset``. ``module.layout`` is the layout so placed, so its groups are global ranks
    and ``module.layout.rank_offset == module.rank_offset``.

    >>> from topology import Topology
    >>> language = Module("language", Topology(8, tp=2, pp=2), rank_offset=8)
    >>> language.span, language.group_of(9, "tp"), language.groups("pp")[0]
    (range(8, 16), (8, 9), (8, 12))

    Raises:
        TopologyError: for an empty name, a layout of another type, a bad or conflicting offset.
    """

    name: str = attrs.field(converter=_name)
    """The module's name, unique within a :class:`Modules`."""
    layout: Layout
    """The layout, placed at ``rank_offset`` (its groups hold global ranks)."""
    rank_offset: int = 0
    """The module's first global rank."""

    def __attrs_post_init__(self) -> None:
        layout, start = _placed(self.layout, self.rank_offset, self.name)
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "rank_offset", start)

    @property
    def span(self) -> range:
        """The module's global ranks: ``range(rank_offset, rank_offset + world_size)``."""
        return range(self.rank_offset, self.rank_offset + self.layout.world_size)

    @property
    def world_size(self) -> int:
        """How many ranks the module holds."""
        return self.layout.world_size

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds the layout offers (``Topology.kinds`` or ``AxisGroups.kinds``)."""
        return self.layout.kinds

    def groups(self, kind: str) -> GroupList:
        """Every group of ``kind`` in global ranks, ascending (a lazy :class:`~topology.GroupList`).

        Raises:
            TopologyError: for a kind the layout does not offer.
        """
        return self.layout.groups(kind)

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The group of ``kind`` that holds global ``rank``.

        Raises:
            TopologyError: for a rank outside the span or a kind the layout does not offer.
        """
        if type(rank) is not int or rank not in self.span:
            raise TopologyError(
                f"rank {show(rank)} is not in module {self.name!r}, which spans ranks "
                f"{span_text(self.span)}; pass one of its ranks"
            )
        return self.layout.group_of(rank, kind)

    def has_group(self, rank: int, kind: str) -> bool:
        """True when global ``rank`` is in the span and in some group of ``kind``.

        Embedding kinds hold only some pipeline stages; every other kind covers the span.

        Raises:
            TopologyError: for a kind the layout does not offer.
        """
        self.layout.kind(kind)
        return type(rank) is int and rank in self.span and self.layout.has_group(rank, kind)

    def __str__(self) -> str:
        return f"{self.name} {span_text(self.span)}: {self.layout}"

    def __repr__(self) -> str:
        return f"Module({self.name!r}, {self.layout!r}, rank_offset={self.rank_offset})"
