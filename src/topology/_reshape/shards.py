"""Shard coordinates: every grid coordinate except the replica axes (dp, edp) (private)."""

from __future__ import annotations

from itertools import chain, repeat
from operator import add, mul

from .._layout.grid import Grid
from .._megatron.kinds import data_parallel_role
from .._megatron.topology import Topology

__all__ = ["Digits", "digit_values", "replica_axis", "shard_codes", "shard_digits", "shard_key"]

Digits = tuple[tuple[int, int], ...]
"""``(size, stride)`` of each shard coordinate, over both grids."""


def _replica_axes(topo: Topology) -> list[tuple[Grid, str]]:
    """Each grid with its replica axis, from the kinds the table marks ``"replica"``."""
    found = []
    for name in topo.kinds:
        if data_parallel_role(name) == "replica":
            kind = topo.kind(name)
            if kind.grid is not None and len(kind.axes) == 1:
                found.append((kind.grid, kind.axes[0]))
    return found


def replica_axis(topo: Topology) -> str:
    """The dense grid's replica axis (the data-parallel one)."""
    for grid, axis in _replica_axes(topo):
        if grid == topo.dense:
            return axis
    raise AssertionError("every layout has a dense replica kind")  # pragma: no cover


def shard_digits(topo: Topology, *, dense: bool = True, expert: bool = True) -> Digits:
    """The shard coordinates of ``topo`` as ``(size, stride)`` digits of the local rank
    (with ``dense=False``, those of the expert grid only; ``expert=False``, the dense grid's)."""
    replicas = _replica_axes(topo)
    digits: list[tuple[int, int]] = []
    grids = [topo.dense] if dense else []
    if expert and topo.expert is not None:
        grids.append(topo.expert)
    for grid in grids:
        skip = {axis for g, axis in replicas if g == grid}
        for axis, size, stride in zip(grid.axes, grid.shape, grid.strides, strict=True):
            if axis not in skip and size > 1:
                digits.append((size, stride))
    return tuple(digits)


def shard_key(digits: Digits, local: int) -> tuple[int, ...]:
    """The shard coordinates of the rank ``rank_offset + local``."""
    return tuple((local // stride) % size for size, stride in digits)


def digit_values(world: int, size: int, stride: int) -> list[int]:
    """The digit ``(local // stride) % size`` of every local rank ``0..world-1`` (``size *
    stride`` divides ``world``, as for every digit of a grid)."""
    block = list(chain.from_iterable(repeat(c, stride) for c in range(size)))
    return block * (world // (size * stride))


def shard_codes(
    old: Topology, new: Topology, *, dense: bool = True, expert: bool = True
) -> tuple[list[int], list[int]]:
    """Every local rank's shard coordinates in ``old`` and in ``new`` read as one number each:
    two ranks' codes are equal iff their :func:`shard_key` tuples are.

    Algorithm: digit ``i`` weighs the product of the radices ``max(old size, new size)`` of
    the digits before it; when the layouts have different numbers of digits no key is equal,
    and the new codes are made negative.
    """
    a = shard_digits(old, dense=dense, expert=expert)
    b = shard_digits(new, dense=dense, expert=expert)
    if len(a) != len(b):
        apart = _codes(new.world_size, b, [size for size, _ in b])
        return _codes(old.world_size, a, [size for size, _ in a]), [-1 - c for c in apart]
    radices = [max(x, y) for (x, _), (y, _) in zip(a, b, strict=True)]
    return _codes(old.world_size, a, radices), _codes(new.world_size, b, radices)


def _codes(world: int, digits: Digits, radices: list[int]) -> list[int]:
    found = [0] * world
    weight = 1
    for (size, stride), radix in zip(digits, radices, strict=True):
        values = digit_values(world, size, stride)
        found = list(map(add, found, map(mul, values, repeat(weight))))
        weight *= radix
    return found
