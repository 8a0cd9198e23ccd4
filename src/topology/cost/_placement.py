"""Which parallel groups leave a node: decided from the grid's strides, not by listing groups."""

from __future__ import annotations

from .._layout.grid import Grid
from .._megatron.topology import Topology
from .._preflight.cluster import Cluster

__all__ = ["crosses", "group_axes"]

_DENSE = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp",), "dp-cp": ("dp", "cp"), "pp": ("pp",)}
_EXPERT = {"ep": ("ep",), "etp": ("etp",), "edp": ("edp",)}
_EXPERT_AS_DENSE = {"ep": (), "etp": ("tp",), "edp": ("dp", "cp")}


def group_axes(topology: Topology, kind: str) -> tuple[Grid, tuple[str, ...]]:
    """The grid and axes whose groups are the ``kind`` groups (tp, cp, dp, dp-cp, pp, ep, etp, edp).

    >>> group_axes(Topology(8, tp=2), "dp-cp")[1]
    ('dp', 'cp')
    """
    if kind in _DENSE:
        return topology.dense, _DENSE[kind]
    if topology.expert is None:
        return topology.dense, _EXPERT_AS_DENSE[kind]
    return topology.expert, _EXPERT[kind]


def crosses(topology: Topology, kind: str, cluster: Cluster) -> bool:
    """True if some group of ``kind`` holds ranks of two NVLink domains (nodes by default).

    Algorithm: a group is ``base + sum(c_a * stride_a)`` over its axes ``a``; it spans
    ``[base, base + span]`` with ``span = sum((size_a - 1) * stride_a)`` and stays in one domain
    of ``D`` GPUs iff ``base mod D + span < D``. The bases are ``rank_offset`` plus every
    combination of the other axes' strides, so their residues mod ``D`` are built one axis at a
    time as a set of at most ``D`` values: O(axes * D * min(size, D)), independent of W.

    >>> from topology import Cluster
    >>> crosses(Topology(16, tp=2), "tp", Cluster(8)), crosses(Topology(16, tp=2), "dp", Cluster(8))
    (False, True)
    """
    grid, axes = group_axes(topology, kind)
    domain = cluster.domain_size
    span = sum((grid.shape[i] - 1) * grid.strides[i] for i, a in enumerate(grid.axes) if a in axes)
    if span == 0:
        return False
    if span >= domain:
        return True
    residues = {grid.rank_offset % domain}
    for i, axis in enumerate(grid.axes):
        if axis in axes:
            continue
        steps = {c * grid.strides[i] % domain for c in range(min(grid.shape[i], domain))}
        residues = {(r + s) % domain for r in residues for s in steps}
    return any(r + span >= domain for r in residues)
