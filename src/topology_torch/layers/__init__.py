"""Model-parallel layers whose shards equal the single-process ``torch.nn`` layer by construction.

Each layer draws the full master weight in fp32 on the CPU from the global torch generator (seed
every rank equally with ``torch.manual_seed``) and copies only its slice, cast to the layer's
dtype, to the layer's device: building a layer costs its shard there, never the master (on
``meta`` nothing is drawn). So ``master_weight`` is the weight ``nn.Linear`` / ``nn.Embedding``
would use, drawn on the CPU with the same seed, whatever device the layer lives on.
``group=None`` means ``topology_torch.current().group("tp")``; a group of one rank costs no
collective. Embedding ids outside ``[0, num_embeddings)`` raise :class:`IdOutOfRangeError`, a
``TopologyError`` that is also an ``IndexError`` (what ``nn.Embedding`` raises), at every tp.

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
    initialize_affine_weight as initialize_affine_weight,  # fairscale's _initialize_affine_weight
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
