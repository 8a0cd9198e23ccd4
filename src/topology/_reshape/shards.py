"""Shard coordinates: every grid coordinate except the replica axes (dp, edp) (private)."""

from __future__ import annotations

from .._layout.grid import Grid
from .._megatron.kinds import data_parallel_role
from .._megatron.topology import Topology

__all__ = ["Digits", "replica_axis", "shard_digits", "shard_key"]

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


def shard_digits(topo: Topology, *, dense: bool = True) -> Digits:
    """The shard coordinates of ``topo`` as ``(size, stride)`` digits of the local rank
    (with ``dense=False``, those of the expert grid only)."""
    replicas = _replica_axes(topo)
    digits: list[tuple[int, int]] = []
    grids = [topo.dense] if dense else []
    if topo.expert is not None:
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
