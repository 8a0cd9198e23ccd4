"""A kind's groups as the translates of one offset set, read from the kind table (private).

Every regular kind's groups are ``base + X`` for one :class:`~topology._layout.spans.Shape`
``X``; placement, crossings, communicator counts and re-layouts measure that shape instead of
the groups, in time independent of the world size.
"""

from __future__ import annotations

from .._layout.spans import Shape
from .kinds import spec_of
from .topology import Topology

__all__ = ["shape_of"]


def shape_of(topo: Topology, kind: str) -> Shape | None:
    """The translate structure of ``kind``'s groups (from the kind table), or None if irregular.

    >>> shape_of(Topology(16, tp=2, pp=4), "dp")
    Shape(inner=((2, 2),), explicit=(), outer=((2, 1), (4, 4)), offset=0)
    """
    name = topo.kind(kind).name
    return spec_of(name).shape(topo, name)
