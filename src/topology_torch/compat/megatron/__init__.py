"""Megatron-core's ``parallel_state`` API over a :class:`topology.Topology` (a façade).

``initialize_model_parallel`` builds the same groups as megatron-core 0.16.1 to 0.19.2 (same
ranks, same group order; 0.19's GTP axes included), but each rank only creates the distinct
groups it belongs to and nothing leaks on ``destroy_model_parallel``. The getters are the union
of those versions' API (:mod:`.parallel_state`); :func:`install` puts our groups under
Megatron's own ``parallel_state`` instead, following the installed version (:mod:`._install`);
:func:`process_group_collection` fills Megatron's ``ProcessGroupCollection``; :class:`HyperCommGrid`
is 0.19's class of that name (:mod:`.hyper_comm_grid`). SPMD contract:
call ``initialize_model_parallel`` and ``destroy_model_parallel`` on every rank, with equal
arguments, in the same order.

>>> from topology_torch.compat import megatron as mpu  # doctest: +SKIP
>>> mpu.initialize_model_parallel(2, 4)  # doctest: +SKIP
>>> mpu.get_pipeline_model_parallel_next_rank()  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from ... import _default
from . import parallel_state
from ._globals import GLOBALS
from ._install import install, is_installed, uninstall
from ._state import OWNER, overrides
from .hyper_comm_grid import HyperCommGrid
from .parallel_state import *  # noqa: F403 (the package is parallel_state's API and more)
from .process_groups_config import process_group_collection

__all__ = ["HyperCommGrid", "install", "is_installed", "process_group_collection", "uninstall"]
__all__ += parallel_state.__all__
__all__.sort()
"""``parallel_state``'s API, plus installing under Megatron, its process-group collection and
its ``HyperCommGrid``."""


def __getattr__(name: str) -> Any:
    """Megatron's module globals (``_MODEL_PARALLEL_GROUP`` ...), read from our state.

    Read-only views for code and tests that inspect them; None when Megatron's would be None.
    """
    view = GLOBALS.get(name)
    if view is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return view(_default.held_by(OWNER), overrides)
