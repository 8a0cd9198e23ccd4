"""Megatron's hierarchical sub-groups of one group of ranks."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .._args import check_index, check_size, show
from .._errors import TopologyError
from .grid import Grid

__all__ = ["hierarchical_groups", "level_grid"]


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray))


def level_grid(sizes: Sequence[int]) -> Grid:
    """A grid over positions ``0 .. prod(sizes) - 1`` with one axis per level, level 0 fastest."""
    if not _is_list(sizes) or not sizes:
        raise TopologyError(f"sizes must be a non-empty list of positive ints, got {show(sizes)}")
    named = {f"l{level}": check_size(f"sizes[{level}]", size) for level, size in enumerate(sizes)}
    return Grid.from_order("-".join(named), **named)


def hierarchical_groups(
    ranks: Sequence[int], sizes: Sequence[int]
) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Split ``ranks`` into levels of sub-groups, as Megatron's ``create_hierarchical_groups``.

    Level ``k`` groups the positions that differ only in digit ``k`` of the mixed-radix number
    whose digits have sizes ``sizes`` (digit 0 fastest). Positions index into ``ranks``.

    Algorithm: position ``p = l * (s * u) + i * u + j`` with ``u = prod(sizes[:k])`` and
    ``s = sizes[k]``; a level-``k`` group fixes ``l`` and ``j`` and runs over ``i``.

    Args:
        ranks: the group to split (distinct non-negative ints, in the order their positions
            mean); any sequence, a ``range`` included.
        sizes: the sub-group size of each level; their product must be ``len(ranks)``.

    Returns:
        One tuple of groups per level, in Megatron's creation order.

    Raises:
        TopologyError: if ``ranks`` is not a sequence of distinct non-negative ints, a size is
            not a positive int, or the sizes' product is not ``len(ranks)``.

    >>> levels = hierarchical_groups(range(16), [2, 2, 4])
    >>> levels[0][:3], levels[1][:3], levels[2][0]
    (((0, 1), (2, 3), (4, 5)), ((0, 2), (1, 3), (4, 6)), (0, 4, 8, 12))
    """
    if not _is_list(ranks):
        raise TopologyError(
            f"ranks must be a list of ints (e.g. range(8)), got {show(ranks)} "
            f"({type(ranks).__name__})"
        )
    grid = level_grid(sizes)
    try:
        count = len(ranks)
    except OverflowError:
        raise TopologyError(
            f"ranks holds more than {sys.maxsize} items; give a real group"
        ) from None
    if grid.world_size != count:
        raise TopologyError(
            f"sizes {show(tuple(sizes))} multiply to {grid.world_size} but {count} ranks were "
            f"given; give sizes whose product is {count}"
        )
    members = tuple(ranks)
    seen: set[int] = set()
    for position, rank in enumerate(members):
        if check_index(f"ranks[{position}]", rank, at_most=None) in seen:
            raise TopologyError(
                f"ranks[{position}] = {rank} repeats an earlier rank; "
                "give distinct non-negative ints"
            )
        seen.add(rank)
    return tuple(
        tuple(tuple(members[p] for p in group) for group in grid.groups(f"l{level}"))
        for level in range(len(sizes))
    )
