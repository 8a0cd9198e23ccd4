"""pytest plugin: Megatron-LM's ``tests/unit_tests/test_hyper_comm_grid.py`` against our class.

Loaded after ``megatron_harness`` (gloo instead of NCCL, outcomes per rank; see that module) by
``scripts/peers/hyper_comm_grid.sh`` and ``tests/torch/test_hyper_comm_grid_peer.py``. With
``$PEER_TARGET=ours`` it makes ``megatron.core.hyper_comm_grid`` our
``topology_torch.compat.megatron.hyper_comm_grid`` (the test file's one import of Megatron); with
``peer`` Megatron's own module loads (megatron-core 0.19.2 on ``PYTHONPATH``). The test file runs
unchanged; a fixture puts back the ``WORLD_SIZE`` a failing test leaves behind.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterator

import pytest

if os.environ.get("PEER_TARGET", "ours") == "ours":
    from topology_torch.compat.megatron import hyper_comm_grid as _ours

    # megatron_harness made ``megatron.core`` a bare package for "ours"; hang our module on it
    _core = sys.modules.get("megatron.core") or types.ModuleType("megatron.core")
    _core.hyper_comm_grid = _ours  # type: ignore[attr-defined]
    sys.modules["megatron.core.hyper_comm_grid"] = _ours


@pytest.fixture(autouse=True)
def _keep_world_size() -> Iterator[None]:
    """``test_complex_grid_scenario`` sets ``WORLD_SIZE=120`` and puts 8 back only when it
    passes; a failing run would leave 120 for the next ``init_process_group`` (which then waits
    for 120 ranks). Restore it after every test."""
    saved = os.environ.get("WORLD_SIZE")
    yield
    if saved is not None:
        os.environ["WORLD_SIZE"] = saved
