"""torch's own ``test/distributed/test_device_mesh.py`` with ``init_device_mesh`` routed to ours.

Imported at start-up of the pytest process and of every rank torch's ``MultiProcessTestCase``
spawns (``mesh_facades/sitecustomize.py`` with ``TOPOLOGY_PEER=device_mesh``), before the test
file's ``from torch.distributed.device_mesh import init_device_mesh``. With
``TOPOLOGY_PEER_IMPL=ours`` (default) ``init_device_mesh(device_type, shape,
mesh_dim_names=names)`` with dimension names is what ``world_mesh`` claims to be: a
:class:`~topology.Grid` of those axes (the last fastest, torch's row-major order), our groups for
every axis and every run of adjacent axes (``ProcessGroups.create`` over
:class:`~topology.AxisGroups`), and ``ProcessGroups.world_mesh`` over them, so slicing,
``get_group``, ``get_local_rank`` and ``_flatten`` of adjacent dims use our communicators.
Everything else is torch's own and not routed: ``init_device_mesh`` without names or with a
``backend_override`` (``world_mesh`` names every dim and takes the groups' backend), a mesh
smaller than the world (``world_mesh`` is a mesh over every rank; the test file's ``(4,)`` and
``(1, 1, 1, 1)`` meshes in an 8-rank world leave ranks outside), a
``DeviceMesh(...)`` or ``DeviceMesh.from_group(...)`` built by hand, the layout algebra.

Each routed call leaves ``$PEER_RESULTS/routed/<test id>``; ``device_mesh.sh`` tallies the tests
that built a routed mesh apart from those that never did (out of scope: torch's own meshes).
With ``TOPOLOGY_PEER_IMPL=peer`` nothing is routed, and the markers name the tests that would be.
"""

from __future__ import annotations

import inspect
import math
import os
import unittest
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.device_mesh as device_mesh
from torch.distributed.device_mesh import DeviceMesh

from topology import AxisGroups, Grid
from topology_torch import ProcessGroups

OURS = os.environ.get("TOPOLOGY_PEER_IMPL", "ours") == "ours"
torch_init_device_mesh = device_mesh.init_device_mesh


def _test_id() -> str:
    """The id of the unittest test this call runs in (found on the stack), else ``unknown``."""
    for frame in inspect.stack():
        case = frame.frame.f_locals.get("self")
        if isinstance(case, unittest.TestCase):
            return case.id()
    return "unknown"


def _mark() -> None:
    folder = os.environ.get("PEER_RESULTS")
    if folder:
        Path(folder, "routed").mkdir(parents=True, exist_ok=True)
        Path(folder, "routed", _test_id()).touch()


def _adjacent_runs(names: Sequence[str]) -> list[str]:
    """Every axis alone and every run of two or more adjacent axes, as kinds."""
    n = len(names)
    return ["-".join(names[i:j]) for i in range(n) for j in range(i + 1, n + 1)]


def routed(
    device_type: str,
    mesh_shape: tuple[int, ...],
    *,
    mesh_dim_names: Sequence[str] | None = None,
    backend_override: Any = None,
) -> DeviceMesh:
    """torch's ``init_device_mesh``, answered by our ``world_mesh`` where it claims to."""
    routable = (
        mesh_dim_names is not None
        and backend_override is None
        and dist.is_initialized()
        and math.prod(mesh_shape) == dist.get_world_size()
        and len(mesh_dim_names) == len(mesh_shape)
        and len(set(mesh_dim_names)) == len(mesh_dim_names)
        and all("-" not in name for name in mesh_dim_names)
    )
    names = None if mesh_dim_names is None else tuple(mesh_dim_names)
    if not routable:
        return torch_init_device_mesh(
            device_type, mesh_shape, mesh_dim_names=names, backend_override=backend_override
        )
    _mark()
    if not OURS or names is None:
        return torch_init_device_mesh(device_type, mesh_shape, mesh_dim_names=names)
    grid = Grid.from_sizes(**dict(zip(names, tuple(mesh_shape), strict=True)))
    groups = ProcessGroups.create(AxisGroups(grid, kinds=_adjacent_runs(names)))
    return groups.world_mesh(*names, device_type=device_type)


device_mesh.init_device_mesh = routed
dist.init_device_mesh = routed  # type: ignore[attr-defined]  # its re-export
