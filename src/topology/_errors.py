"""The one exception family of rank-topology."""

from __future__ import annotations

__all__ = ["GroupIndexError", "TopologyError"]


class TopologyError(ValueError):
    """An invalid layout, rank, kind or argument; the message says what is wrong and what would do.

    It is a ``ValueError``, so code that already catches bad values keeps working:

    >>> from topology import Topology
    >>> try:
    ...     Topology(12, tp=8)
    ... except ValueError as error:
    ...     print(error)
    world_size 12 is not divisible by tp(8) * cp(1) * pp(1) = 8;
    valid world sizes are multiples of 8
    """


class GroupIndexError(TopologyError, IndexError):
    """An index outside a sequence of groups or ranks: a ``TopologyError`` and an ``IndexError``.

    Being an ``IndexError`` keeps the sequence protocol (``for``, ``list()``) working.

    >>> from topology import Topology
    >>> Topology(4, tp=2).groups("tp")[2]
    Traceback (most recent call last):
    topology._errors.GroupIndexError: group index 2 is out of range for 2 groups; valid: -2 to 1
    """
