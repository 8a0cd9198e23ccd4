"""pytest plugin: the launch harness for Megatron-LM's unit tests on CPU with gloo.

Loaded by ``scripts/peers/megatron.sh`` with ``-p megatron_harness`` (its folder on PYTHONPATH)
in every torchrun worker. It adapts only the launch, never the peer's test files:

- ``$PEER_TARGET=ours`` makes ``megatron.core.parallel_state`` our façade
  (``topology_torch.compat.megatron``); Megatron's other modules the test file imports
  (``megatron.core.process_groups_config`` from 0.18) load from the installed megatron-core and
  see the façade as their ``parallel_state``. ``$PEER_TARGET=peer`` leaves Megatron's own
  module in place; ``$PEER_TARGET=installed`` too, with ``topology_torch.compat.megatron.install()``
  called before the tests (Megatron's ``initialize_model_parallel`` builds our groups).
- a module the tag's ``tests/unit_tests/test_utilities.py`` imports but the test file never uses
  (0.19's ``megatron.training.argument_utils``, which pulls Megatron's training stack) is
  replaced by a stub whose functions raise, when the real one does not import here.
- ``init_process_group`` uses gloo where NCCL is asked for and binds no device;
  ``torch.cuda.set_device`` and ``torch.cuda.synchronize`` do nothing and
  ``torch.cuda.device_count`` answers at least 1 (Megatron's ``Utils`` takes
  ``rank % device_count()``); tests that need 8 GPUs still skip.
- it replaces the peer's conftest (run with ``--noconftest``: that one downloads test data) by
  its one fixture that matters here: the default group is destroyed at the end of the session.
- every rank writes its outcomes to ``$PEER_RESULTS/rank<RANK>.json`` after each test.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.distributed as dist

TARGET = os.environ.get("PEER_TARGET", "ours")
TARGETS = ("ours", "peer", "installed")


def _alias_facade() -> None:
    """Make ``import megatron.core.parallel_state`` give our façade; other megatron.core modules
    still load from the installed megatron-core (without running its ``__init__``)."""
    from topology_torch.compat import megatron as facade

    found = importlib.util.find_spec("megatron")
    roots = list(found.submodule_search_locations or []) if found else []
    package = types.ModuleType("megatron")
    package.__path__ = roots
    core = types.ModuleType("megatron.core")
    core.__path__ = [os.path.join(root, "core") for root in roots]
    package.core = core  # type: ignore[attr-defined]
    core.parallel_state = facade  # type: ignore[attr-defined]
    sys.modules.update(
        {"megatron": package, "megatron.core": core, "megatron.core.parallel_state": facade}
    )


def _stub_training() -> None:
    """0.19's test_utilities imports three config builders from Megatron's training stack that
    test_parallel_state.py never calls: a stub stands in when the real module fails to import."""
    name = "megatron.training.argument_utils"
    try:
        importlib.import_module(name)
        return
    except Exception:  # the training stack needs packages this venv does not have
        sys.modules.pop(name, None)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{name} is a stub in this harness (Megatron's training stack)")

    stub = types.ModuleType(name)
    for function in ("gpt_config_from_args", "hybrid_config_from_args"):
        setattr(stub, function, unavailable)
    stub.pretrain_cfg_container_from_args = unavailable  # type: ignore[attr-defined]
    training = sys.modules.get("megatron.training") or types.ModuleType("megatron.training")
    training.__path__ = getattr(training, "__path__", [])
    training.argument_utils = stub  # type: ignore[attr-defined]
    sys.modules.setdefault("megatron.training", training)
    sys.modules[name] = stub


def _force_gloo() -> None:
    """NCCL requests become gloo ones, with no device binding."""
    original = dist.init_process_group

    def init_process_group(backend: Any = None, *args: Any, **kwargs: Any) -> Any:
        if backend is None or "nccl" in str(backend):
            backend = "gloo"
        kwargs.pop("device_id", None)
        return original(backend, *args, **kwargs)

    dist.init_process_group = init_process_group  # type: ignore[assignment]
    if not torch.cuda.is_available():
        count = torch.cuda.device_count
        torch.cuda.set_device = lambda device: None  # type: ignore[assignment]
        torch.cuda.synchronize = lambda device=None: None  # type: ignore[assignment]
        torch.cuda.device_count = lambda: max(1, count())  # type: ignore[assignment]


if TARGET not in TARGETS:
    raise SystemExit(f"PEER_TARGET must be one of {', '.join(TARGETS)}, got {TARGET!r}")
if TARGET == "ours":
    _alias_facade()
_stub_training()
if TARGET == "installed":
    importlib.import_module("megatron.core.parallel_state")
    from topology_torch.compat import megatron as _facade

    _facade.install()
_force_gloo()


@pytest.fixture(scope="session", autouse=True)
def _destroy_default_group() -> Iterator[None]:
    yield
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


# One outcome per test for tally.py, as every peer harness writes it (scripts/peers on the path).
from peer_outcomes import pytest_runtest_logreport  # noqa: E402, F401
