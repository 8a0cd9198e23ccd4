"""A torch ``DeviceMesh`` whose dimension groups are a ProcessGroups' own (private).

A mesh dimension is one kind: a single axis (``"tp"``) or several folded into one (``"dp-cp"``).
The mesh holds the ranks of this rank's sub-grid: along dimension ``k`` the index is the rank's
position in its group of that kind (mixed radix over the kind's axes, innermost fastest), every
axis not named keeps this rank's coordinate. No new communicator is made: the mesh is built with
``DeviceMesh.from_group`` over the groups we already hold.
"""

from __future__ import annotations

from itertools import product
from typing import TYPE_CHECKING

import torch
from torch.distributed.device_mesh import DeviceMesh

from topology import Grid, TopologyError
from topology._megatron.kinds import DENSE_KINDS, EXPERT_KINDS, canonical_kind

if TYPE_CHECKING:
    from ._process_groups import ProcessGroups

__all__ = ["device_mesh"]

_SINGLE_AXES = {"tp", "cp", "dp", "pp", "etp", "ep", "edp"}


def _axes_of(kind: str) -> tuple[str, bool]:
    """(kind, expert grid?) for a mesh dimension name."""
    name = canonical_kind(kind)
    if name in DENSE_KINDS:
        return name, False
    if name in EXPERT_KINDS:
        return name, True
    raise TopologyError(
        f"mesh dimension {kind!r} is not an axis kind; use tp, cp, dp, pp, etp, ep, edp or a "
        "combination such as 'dp-cp'"
    )


def device_mesh(
    groups: ProcessGroups, dims: tuple[str, ...], device_type: str | None
) -> DeviceMesh:
    """A ``DeviceMesh`` over ``dims`` (outermost first) of this rank's sub-grid, from our groups.

    Raises:
        TopologyError: no dims, a repeated axis, dims mixing the dense and the expert grid
            (``pp`` belongs to both), or a kind that is not an axis kind.
    """
    if not dims:
        raise TopologyError("device_mesh needs at least one axis, e.g. device_mesh('dp', 'tp')")
    topology = groups.topology
    named = [_axes_of(d) for d in dims]
    kinds = [k for k, _ in named]
    axes = [DENSE_KINDS.get(k) or EXPERT_KINDS[k] for k in kinds]
    flat = [a for group in axes for a in group]
    if len(set(flat)) != len(flat):
        raise TopologyError(f"device_mesh dims {dims!r} repeat an axis; name each axis once")
    expert = {e for k, e in named if k != "pp"}
    if len(expert) > 1:
        raise TopologyError(
            f"device_mesh dims {dims!r} mix the dense grid (tp, cp, dp) and the expert grid "
            "(etp, ep, edp); build one mesh per grid"
        )
    grid: Grid | None = topology.expert if expert == {True} else topology.dense
    if grid is None:  # pragma: no cover - a Topology always has both grids
        raise TopologyError(f"{topology} has no grid for device_mesh dims {dims!r}")
    me = dict(grid.coord(groups.global_rank))
    inner_first = list(reversed(grid.axes))
    digits = [[a for a in inner_first if a in group] for group in axes]
    shape = [grid.size(*group) for group in axes]
    mesh = torch.empty(shape, dtype=torch.int)
    for index in product(*(range(n) for n in shape)):
        coord = dict(me)
        for position, axis_names in zip(index, digits, strict=True):
            for axis in axis_names:
                position, coord[axis] = divmod(position, grid.size(axis))
        mesh[index] = grid.rank(**coord)
    device = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    members = [groups.group(k) for k in kinds]
    names = tuple(d.replace("-", "_") for d in dims)
    if len(members) == 1:
        return DeviceMesh.from_group(members[0], device, mesh_dim_names=names)
    return DeviceMesh.from_group(members, device, mesh, mesh_dim_names=names)
