"""torch.distributed process groups and model-parallel layers for a :class:`topology.Topology`.

``ProcessGroups.create(topology)`` turns the core's groups into torch groups (deduplicated,
singletons free); ``initialize``/``current`` hold the one default that library code falls back to;
``topology_torch.ops`` and ``topology_torch.layers`` hold the model-parallel building blocks;
``topology_torch.compat`` the Megatron, ezpz and ml-starter façades; ``topology_torch.recovery``
goes on after ranks die (agree on the lost ranks, apply a ``topology.reshape``).
"""

try:  # first, so that a missing torch names the extra that installs it
    import torch as _torch  # noqa: F401
except ModuleNotFoundError as error:
    if error.name != "torch":
        raise
    raise ModuleNotFoundError(
        "topology_torch needs torch: pip install 'rank-topology[torch]'", name="torch"
    ) from error

from . import ops, recovery
from ._default import current, destroy, initialize, is_initialized
from ._process_groups import ProcessGroups
from .layers import (
    ColumnParallelLinear,
    IdOutOfRangeError,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
    initialize_model_parallel_affine_weight_,  # noqa: F401 - importable as before; lives in .layers
)
from .ops import mp_copy, mp_gather, mp_reduce, mp_scatter

__all__ = [
    "ColumnParallelLinear",
    "IdOutOfRangeError",
    "ParallelEmbedding",
    "ProcessGroups",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "current",
    "destroy",
    "initialize",
    "is_initialized",
    "mp_copy",
    "mp_gather",
    "mp_reduce",
    "mp_scatter",
    "ops",
    "recovery",
]
