"""Model-parallel layers whose shards equal the single-process ``torch.nn`` layer by construction.

Each layer initialises the full master weight from the global torch generator (seed every rank
equally) and keeps its slice, so ``master_weight`` is the weight ``nn.Linear`` / ``nn.Embedding``
would use. ``group=None`` means ``topology_torch.current().group("tp")``; a group of one rank
costs no collective. Embedding ids outside ``[0, num_embeddings)`` raise
:class:`IdOutOfRangeError`, a ``TopologyError`` that is also an ``IndexError`` (what
``nn.Embedding`` raises), at every tp.

>>> import torch
>>> from topology_torch.ops import _SingleRank
>>> one = _SingleRank()
>>> mlp = torch.nn.Sequential(
...     ColumnParallelLinear(8, 16, gather_output=False, group=one),
...     RowParallelLinear(16, 8, input_is_parallel=True, group=one),
... )
>>> mlp(torch.ones(2, 8)).shape
torch.Size([2, 8])
"""

from ._embedding import ParallelEmbedding, VocabParallelEmbedding
from ._ids import IdOutOfRangeError
from ._init import (
    INIT_TYPES,
    InitType,
    initialize_model_parallel_affine_weight_,
)
from ._init import (
    _initialize_affine_weight as _initialize_affine_weight,  # fairscale's name
)
from ._linear import ColumnParallelLinear, RowParallelLinear

__all__ = [
    "INIT_TYPES",
    "ColumnParallelLinear",
    "IdOutOfRangeError",
    "InitType",
    "ParallelEmbedding",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "initialize_model_parallel_affine_weight_",
]
