"""Launch shim for the tensor-parallel peers' own suites (fairscale, ezpz, ml-starter).

Put this folder first on PYTHONPATH (``scripts/peers/<peer>.sh`` does) and set
``TOPOLOGY_PEER`` to ``fairscale``, ``ezpz`` or ``ml_starter``. Python imports this file at start-up
in the pytest process and in every rank the peer's tests spawn, so each process sees:

- ``TOPOLOGY_PEER_IMPL=ours`` (default): the peer's modules replaced by our façades through
  ``sys.modules`` aliases; ``TOPOLOGY_PEER_IMPL=peer``: the peer's own code, unchanged.
- ml-starter only, in both cases: torchvision and torchaudio (compiled against CUDA torch on the
  registry, so not installable beside a CPU torch) replaced, when absent, by placeholder modules:
  ml-starter imports them at module level, the parallel test never calls them, and a call
  raises ``ModuleNotFoundError``. Its pure-python deps come from ``PEER_DEPS`` (ml_starter.sh).
- CPU without device binding, in both cases: ``Tensor.cuda()`` / ``Module.cuda()`` return their
  argument when no GPU exists, and fairscale's world sizes come from ``TOPOLOGY_PEER_WORLD_SIZES``
  (default ``1,2,4``) instead of the GPU count.

Only the launch is adapted: the peers' test files run unchanged.
"""

from __future__ import annotations

import os
import sys
from typing import Any

PEER = os.environ.get("TOPOLOGY_PEER", "")
OURS = os.environ.get("TOPOLOGY_PEER_IMPL", "ours") == "ours"

ALIASES = {
    "fairscale": {
        "fairscale.nn.model_parallel.initialize": "topology_torch.compat.fairscale",
        "fairscale.nn.model_parallel.layers": "topology_torch.compat.fairscale",
    },
    "ezpz": {"ezpz.tp": "topology_torch.compat.ezpz"},
    "ml_starter": {
        "ml.utils.parallel": "topology_torch.compat.ml",
        "ml.models.parallel": "topology_torch.layers",
        "ml.models.lora": "topology_torch.compat.ml_lora",
    },
}


def _cpu_without_device_binding() -> None:
    import torch

    if torch.cuda.is_available():
        return

    def _stay(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self

    torch.Tensor.cuda = _stay  # type: ignore[method-assign]
    torch.nn.Module.cuda = _stay  # type: ignore[method-assign]


def _alias() -> None:
    import importlib

    for name, target in ALIASES.get(PEER, {}).items():
        sys.modules[name] = importlib.import_module(target)


class _Missing:
    """Stands for any attribute of an absent module; calling it says which module is missing."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> _Missing:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Missing(f"{self._name}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise ModuleNotFoundError(f"{self._name} is a placeholder: its package is not installed")


def _placeholders(*names: str) -> None:
    """Put placeholder modules for ``names`` (and their parents) where no real package exists."""
    import importlib.util
    import types

    absent = {n.split(".")[0] for n in names if importlib.util.find_spec(n.split(".")[0]) is None}
    for name in names:
        if name.split(".")[0] not in absent:
            continue
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            full = ".".join(parts[:i])
            if full not in sys.modules:
                module = types.ModuleType(full)
                module.__path__ = []  # a package, so submodules resolve from sys.modules
                module.__getattr__ = _Missing(full).__getattr__  # type: ignore[method-assign]
                sys.modules[full] = module
            if i > 1:
                setattr(sys.modules[".".join(parts[: i - 1])], parts[i - 1], sys.modules[full])


def _fairscale_world_sizes() -> None:
    from fairscale.fair_dev.testing import testing

    sizes = [int(s) for s in os.environ.get("TOPOLOGY_PEER_WORLD_SIZES", "1,2,4").split(",")]
    testing.get_world_sizes = lambda: list(sizes)
    defaults = list(testing.spawn_for_all_world_sizes.__defaults__ or ())
    defaults[0] = sizes
    testing.spawn_for_all_world_sizes.__defaults__ = tuple(defaults)


if PEER:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _cpu_without_device_binding()
    if OURS:
        _alias()
    if PEER == "fairscale":
        _fairscale_world_sizes()
    if PEER == "ml_starter":
        _placeholders(
            "torchvision.transforms.functional",
            "torchvision.datasets.utils",
            "torchaudio.functional",
            "torchaudio.transforms",
        )
