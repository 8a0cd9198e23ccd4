"""A torch ``DeviceMesh`` whose dimension groups are a ProcessGroups' own (private).

A mesh dimension is one kind: a single axis (``"tp"``) or several folded into one (``"dp-cp"``).
The mesh holds the ranks of this rank's sub-grid: along dimension ``k`` the index is the rank's
position in its group of that kind (mixed radix over the kind's axes, innermost fastest), every
axis not named keeps this rank's coordinate. No new communicator is made: the mesh is built with
``DeviceMesh.from_group`` over the groups we already hold.

What a dimension spans is the core's ``kind`` (:meth:`topology.Topology.kind` or
:meth:`topology.AxisGroups.kind`): its grid and its axes. This
module needs only what :class:`Groups` describes, so it does not import ``_process_groups``
(which imports it).
"""

from __future__ import annotations

from itertools import product
from typing import Any, Protocol

import torch
from torch.distributed.device_mesh import DeviceMesh

from topology import AxisGroups, Grid, Kind, Topology, TopologyError

from ._device import collective_device

__all__ = ["Groups", "device_mesh"]


class Groups(Protocol):
    """What a mesh needs of a :class:`~topology_torch.ProcessGroups`."""

    @property
    def topology(self) -> Topology | AxisGroups: ...

    @property
    def global_rank(self) -> int: ...

    def group(self, kind: str) -> Any: ...


def _kind_of(topology: Topology | AxisGroups, dim: str) -> Kind:
    """The kind of a mesh dimension; only kinds that are a set of grid axes qualify."""
    try:
        kind = topology.kind(dim)
    except TopologyError:
        kind = None
    if kind is None or kind.grid is None:
        if isinstance(topology, AxisGroups):
            hint = f"one of {', '.join(topology.kinds)}"
        else:
            hint = "tp, cp, dp, pp, etp, ep, edp or a combination such as 'dp-cp'"
        raise TopologyError(f"mesh dimension {dim!r} is not an axis kind; use {hint}")
    return kind


def _fits(kind: Kind, grid: Grid) -> bool:
    """Whether ``kind``'s groups are lines of ``grid`` (``pp`` is an axis of both grids)."""
    return kind.grid == grid or (bool(kind.axes) and set(kind.axes) <= set(grid.axes))


def device_mesh(groups: Groups, dims: tuple[str, ...], device_type: str | None) -> DeviceMesh:
    """A ``DeviceMesh`` over ``dims`` (outermost first) of this rank's sub-grid, from our groups.

    Raises:
        TopologyError: no dims, a repeated axis, dims mixing the dense and the expert grid
            (``pp`` belongs to both), or a kind that is not an axis kind.
    """
    if not dims:
        raise TopologyError("device_mesh needs at least one axis, e.g. device_mesh('dp', 'tp')")
    topology = groups.topology
    kinds = [_kind_of(topology, d) for d in dims]
    flat = [a for kind in kinds for a in kind.axes]
    if len(set(flat)) != len(flat):
        raise TopologyError(f"device_mesh dims {dims!r} repeat an axis; name each axis once")
    grids = dict.fromkeys(kind.grid for kind in kinds if kind.grid is not None)
    grid = next((g for g in grids if all(_fits(kind, g) for kind in kinds)), None)
    if grid is None:
        raise TopologyError(
            f"device_mesh dims {dims!r} mix the dense grid (tp, cp, dp) and the expert grid "
            "(etp, ep, edp); build one mesh per grid"
        )
    me = dict(grid.coord(groups.global_rank))
    inner_first = list(reversed(grid.axes))
    digits = [[a for a in inner_first if a in kind.axes] for kind in kinds]
    shape = [grid.size(*kind.axes) for kind in kinds]
    mesh = torch.empty(shape, dtype=torch.int)
    for index in product(*(range(n) for n in shape)):
        coord = dict(me)
        for position, axis_names in zip(index, digits, strict=True):
            for axis in axis_names:
                position, coord[axis] = divmod(position, grid.size(axis))
        mesh[index] = grid.rank(**coord)
    device = device_type or collective_device().type
    members = [groups.group(kind.name) for kind in kinds]
    names = tuple(d.replace("-", "_") for d in dims)
    if len(members) == 1:
        return DeviceMesh.from_group(members[0], device, mesh_dim_names=names)
    return DeviceMesh.from_group(members, device, mesh, mesh_dim_names=names)
