"""pytest plugin: Megatron-LM's ``tests/unit_tests/test_mimo_hetero_topology.py`` (main) on CPU
with gloo.

Loaded after ``bridge_communicator_harness`` (``$PEER_GRID=ours``: our ``HyperCommGrid``; NCCL
groups made as gloo ones; megatron-core's exports) and ``megatron_harness`` (``$PEER_TARGET=peer``:
Megatron's own ``parallel_state``, a gloo default group, outcomes per rank) by
``scripts/peers/mimo_hetero_topology.sh``. With ``$PEER_GRID=ours`` the test's
``examples.mimo.training.topology`` is our ``topology_torch.compat.megatron.mimo``; with ``peer``
Megatron's example module loads from the extracted tree.

``TestHeteroTopology`` skips below 8 GPUs (``torch.cuda.device_count() < 8``, read when the file
is imported); its tests only build process groups (gloo here) and read their sizes and ranks, so
``torch.cuda.device_count`` answers the world size: they run on 8 gloo ranks. The file's
``mock_nccl_options`` fixture replaces ``torch.distributed.ProcessGroupNCCL``, which a CPU-only
torch lacks (``monkeypatch.setattr`` refuses a missing attribute): a stand-in whose ``Options``
raises is put there first, for the fixture to replace. Nothing else changes; the test file runs
unchanged.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import torch
import torch.distributed as dist

GRID = os.environ.get("PEER_GRID", "peer")
EXAMPLE = "examples.mimo.training.topology"

if GRID == "ours":
    from topology_torch.compat.megatron import mimo as _ours

    if EXAMPLE in sys.modules:  # too late: someone imported Megatron's
        raise SystemExit("load mimo_hetero_topology_harness before the example module")
    _parent = importlib.import_module(EXAMPLE.rsplit(".", 1)[0])  # the tree's own packages
    _parent.topology = _ours  # type: ignore[attr-defined]
    sys.modules[EXAMPLE] = _ours

if not torch.cuda.is_available():
    _world = int(os.environ.get("WORLD_SIZE", "1"))
    torch.cuda.device_count = lambda: _world  # type: ignore[assignment]


class _NoNccl:
    """``torch.distributed.ProcessGroupNCCL`` on a CPU-only torch, for the fixture to replace."""

    @staticmethod
    def Options(**kwargs: Any) -> Any:
        raise RuntimeError("this torch has no NCCL; the harness's ProcessGroupNCCL is a stand-in")


if not hasattr(dist, "ProcessGroupNCCL"):
    dist.ProcessGroupNCCL = _NoNccl  # type: ignore[attr-defined,misc]
