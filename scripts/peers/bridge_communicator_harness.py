"""pytest plugin: Megatron-LM's ``tests/unit_tests/pipeline_parallel/test_bridge_communicator.py``
on CPU with gloo.

Loaded first, then ``megatron_harness`` (``$PEER_TARGET=peer``: Megatron's own modules, a gloo
default group, outcomes per rank) and ``hyper_comm_grid_harness`` (its ``WORLD_SIZE`` fixture), by
``scripts/peers/bridge_communicator.sh``. With ``$PEER_GRID=ours`` the test's and the
communicator's ``megatron.core.hyper_comm_grid`` is our façade
(``topology_torch.compat.megatron.hyper_comm_grid``); everything else stays Megatron's (its
``parallel_state`` too: its ``tensor_parallel`` layers, which the test file imports, read
``parallel_state`` internals our façade does not offer). With ``peer`` Megatron's class loads.

The test file and Megatron's ``BridgeCommunicator`` hard-code ``backend="nccl"`` for their
groups (``HyperCommGrid(..., backend="nccl")``, ``new_subgroups_by_enumeration(...,
backend='nccl')``, ``new_group(..., backend='nccl')``), which a CPU torch cannot make: here
``torch.distributed.new_group`` makes a gloo group where NCCL is asked for (for Megatron's class,
for ours and for the communicator alike). ``megatron.core.pipeline_parallel``'s ``__init__``
(which the communicator's import runs) reaches a Triton kernel module
(``transformer/moe/ops/paged_stash.py``: ``import triton`` at the top, for MoE paged stashing the
test never calls); where triton is not installed (no GPU compiler here) a stub module stands in
for that one, its kernels raising when called. The unpacked 0.19.2 wheel's
``megatron/core/__init__.py`` is reduced to ``parallel_state`` (scripts/setup.sh); the names
Megatron's modules import from it (``InferenceParams``...) are resolved on first use.
Nothing else changes; the test file runs unchanged.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d

GRID = os.environ.get("PEER_GRID", "peer")
if GRID not in ("ours", "peer"):
    raise SystemExit(f"PEER_GRID must be ours or peer, got {GRID!r}")
if GRID == "ours":
    from topology_torch.compat.megatron import hyper_comm_grid as _ours

    if "megatron.core.hyper_comm_grid" in sys.modules:  # too late: someone imported Megatron's
        raise SystemExit("load bridge_communicator_harness before any megatron module")
    sys.modules["megatron.core.hyper_comm_grid"] = _ours

_KERNELS = "megatron.core.transformer.moe.ops.paged_stash"


def _stub_kernels() -> None:
    """Megatron's Triton kernel module as a stub whose names raise when called, when triton is
    not installed (a stub ``triton`` itself would make torch think triton is there)."""
    if importlib.util.find_spec("triton") is not None:
        return

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{_KERNELS} is a stub in this harness (triton is not installed)")

    stub = types.ModuleType(_KERNELS)
    stub.GLOBAL_BLOCK_SIZE = 1024  # type: ignore[attr-defined]
    stub.paged_stash_copy_kernel = unavailable  # type: ignore[attr-defined]
    stub.paged_stash_pop_kernel = unavailable  # type: ignore[attr-defined]
    stub.__all__ = ["GLOBAL_BLOCK_SIZE", "paged_stash_copy_kernel", "paged_stash_pop_kernel"]  # type: ignore[attr-defined]
    sys.modules[_KERNELS] = stub


_stub_kernels()

# what megatron.core's own __init__ exports and Megatron's modules import from it (the unpacked
# 0.19.2 wheel's __init__ is reduced to parallel_state: scripts/setup.sh), resolved on first use
_EXPORTS = {
    "InferenceParams": "megatron.core.inference_params",
    "ModelParallelConfig": "megatron.core.model_parallel_config",
    "Timers": "megatron.core.timers",
    "DistributedDataParallel": "megatron.core.distributed",
}


def _export(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'megatron.core' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def _complete_core() -> None:
    """``from megatron.core import InferenceParams`` (and the other exports) work again."""
    core = importlib.import_module("megatron.core")
    if GRID == "ours":
        core.hyper_comm_grid = _ours  # type: ignore[attr-defined]
    if not hasattr(core, "InferenceParams"):
        core.__getattr__ = _export  # type: ignore[attr-defined]


_complete_core()
_original = distributed_c10d.new_group


def pytest_sessionstart(session: object) -> None:
    """Rank 0 writes which HyperCommGrid the run uses to ``$PEER_RESULTS/grid.txt``."""
    folder = os.environ.get("PEER_RESULTS")
    if folder and os.environ.get("RANK", "0") == "0":
        module = importlib.import_module("megatron.core.hyper_comm_grid")
        with open(os.path.join(folder, "grid.txt"), "w") as out:
            out.write(f"HyperCommGrid: {module.HyperCommGrid.__module__} ({module.__file__})\n")


def _new_group(*args: Any, **kwargs: Any) -> Any:
    """``new_group`` with gloo where NCCL is asked for (backend is its second argument)."""
    if len(args) > 1 and args[1] is not None and "nccl" in str(args[1]):
        args = (args[0], "gloo", *args[2:])
    if kwargs.get("backend") is not None and "nccl" in str(kwargs["backend"]):
        kwargs["backend"] = "gloo"
    return _original(*args, **kwargs)


# new_subgroups_by_enumeration finds new_group in distributed_c10d; our façade and the
# communicator call torch.distributed.new_group
distributed_c10d.new_group = _new_group  # type: ignore[assignment]
dist.new_group = _new_group  # type: ignore[assignment]
