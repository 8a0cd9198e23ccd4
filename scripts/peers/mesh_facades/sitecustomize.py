"""Launch shim for the mesh peers' own suites (torchtitan's ``ParallelDims``, torch's DeviceMesh).

Put this folder first on PYTHONPATH (``scripts/peers/torchtitan.sh`` and ``device_mesh.sh`` do)
and set ``TOPOLOGY_PEER`` to ``torchtitan`` or ``device_mesh``. Python imports this file at
start-up in the pytest process and in every rank the suites spawn (torch's
``MultiProcessTestCase`` starts its ranks with ``spawn``, which loads no pytest plugin), so each
process sees the same routing:

- ``torchtitan``, ``TOPOLOGY_PEER_IMPL=ours`` (default): ``torchtitan.distributed.parallel_dims``
  is our ``topology_torch.compat.torchtitan`` (the module itself, so the tests'
  ``patch("torchtitan.distributed.parallel_dims.device_type", "cpu")`` reaches our meshes).
  torchtitan's module also exports names our façade does not claim (``MeshAxisName``,
  ``SpmdLayout``, ``unfold_dp_axes``, ...: the SPMD layout classes of the test file, listed out of
  scope by ``torchtitan.sh``); they are torchtitan's own objects, set on the aliased module so that
  the test file and torchtitan's other modules import. ``TOPOLOGY_PEER_IMPL=peer``: torchtitan's
  own module, unchanged.
- ``torchtitan``, both: where triton is not installed (no GPU compiler here), torchtitan's Triton
  kernel module (``torchtitan.distributed.minimal_async_ep.kernels``, imported by its MoE code that
  the test file's model imports pull in and never call) is a stub whose names raise when called.
- ``device_mesh``: see ``device_mesh_harness.py`` (the routing of ``init_device_mesh``).

Only the launch is adapted: the peers' test files run unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from typing import Any

PEER = os.environ.get("TOPOLOGY_PEER", "")
OURS = os.environ.get("TOPOLOGY_PEER_IMPL", "ours") == "ours"

TORCHTITAN_KERNELS = "torchtitan.distributed.minimal_async_ep.kernels"


def _stub_torchtitan_kernels() -> None:
    """torchtitan's Triton kernels as a stub module whose every name raises when called (a stub
    ``triton`` itself would make torch believe triton is there)."""
    if importlib.util.find_spec("triton") is not None:
        return

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{TORCHTITAN_KERNELS} is a stub in this shim (triton is absent)")

    def name(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return unavailable

    stub = types.ModuleType(TORCHTITAN_KERNELS)
    stub.__getattr__ = name  # type: ignore[method-assign]
    sys.modules[TORCHTITAN_KERNELS] = stub


def _alias_torchtitan() -> None:
    """``torchtitan.distributed.parallel_dims`` becomes our façade module."""
    peer = importlib.import_module("torchtitan.distributed.parallel_dims")
    ours = importlib.import_module("topology_torch.compat.torchtitan")
    borrowed = [
        name
        for name in vars(peer)
        if not name.startswith("_") and not hasattr(ours, name) and name != "annotations"
    ]
    for name in borrowed:  # torchtitan's own, for what our façade does not claim
        setattr(ours, name, getattr(peer, name))
    package = sys.modules["torchtitan.distributed"]
    package.parallel_dims = ours  # type: ignore[attr-defined]
    package.ParallelDims = ours.ParallelDims  # type: ignore[attr-defined]
    sys.modules["torchtitan.distributed.parallel_dims"] = ours
    os.environ["TOPOLOGY_PEER_BORROWED"] = ",".join(sorted(borrowed))


if PEER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
if PEER == "torchtitan":
    _stub_torchtitan_kernels()
    if OURS:
        _alias_torchtitan()
if PEER == "device_mesh":
    importlib.import_module("device_mesh_harness")
