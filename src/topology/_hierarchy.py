"""Megatron's hierarchical sub-groups of one group of ranks."""

from __future__ import annotations

from collections.abc import Sequence

from ._checks import check_size
from ._errors import TopologyError
from ._grid import Grid

__all__ = ["hierarchical_groups", "level_grid"]


def level_grid(sizes: Sequence[int]) -> Grid:
    """A grid over positions ``0 .. prod(sizes) - 1`` with one axis per level, level 0 fastest."""
    if not isinstance(sizes, Sequence) or isinstance(sizes, str) or not sizes:
        raise TopologyError(f"sizes must be a non-empty list of positive ints, got {sizes!r}")
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
        ranks: the group to split (any ranks, in the order their positions mean).
        sizes: the sub-group size of each level; their product must be ``len(ranks)``.

    Returns:
        One tuple of groups per level, in Megatron's creation order.

    Raises:
        TopologyError: if a size is not a positive int or the product is not ``len(ranks)``.

    >>> levels = hierarchical_groups(range(16), [2, 2, 4])
    >>> levels[0][:3], levels[1][:3], levels[2][0]
    (((0, 1), (2, 3), (4, 5)), ((0, 2), (1, 3), (4, 6)), (0, 4, 8, 12))
    """
    grid = level_grid(sizes)
    members = tuple(ranks)
    if grid.world_size != len(members):
        raise TopologyError(
            f"sizes {tuple(sizes)} multiply to {grid.world_size} but {len(members)} ranks were "
            f"given; give sizes whose product is {len(members)}"
        )
    return tuple(
        tuple(tuple(members[p] for p in group) for group in grid.groups(f"l{level}"))
        for level in range(len(sizes))
    )
