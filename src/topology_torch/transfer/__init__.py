"""Weight transfer between two layouts on torch: a model built with our layers as the plan's
inputs (:func:`shards_of`), and one rank's part of a :func:`topology.transfer` plan, point to point
(:func:`execute`). Into a generation engine: a Megatron-core model's own parameters as the
sources (:func:`megatron_shards`) and one rank's part of a :func:`topology.refit` plan, landing in
the engine's local tensors (:func:`execute_refit`).

A trainer model at one layout moves its weights into a generation model at another: each rank
describes its layers on both sides, every rank plans with the full list of weights, and each rank
runs its part. SPMD contract of :func:`execute`: call on every rank of the plan (both layouts),
with the same plan, in the same order as any other collective.

>>> import torch
>>> from topology import Topology, transfer
>>> from topology_torch.layers import RowParallelLinear
>>> from topology_torch.ops import _SingleRank
>>> torch.manual_seed(0)  # doctest: +ELLIPSIS
<torch._C.Generator object at ...>
>>> trainer, generator = (RowParallelLinear(4, 2, group=_SingleRank()) for _ in range(2))
>>> params, src = shards_of(Topology(1), 0, {"proj": (trainer, {"layer": 0})}, num_layers=1)
>>> _, dst = shards_of(Topology(1), 0, {"proj": (generator, {"layer": 0})}, num_layers=1)
>>> execute(transfer(Topology(1), Topology(1), params, num_layers=1), 0, src, dst)
0
>>> torch.equal(generator.weight, trainer.weight)
True
"""

from ._execute import execute
from ._megatron import megatron_shards
from ._refit import execute_refit
from ._shards import shards_of

__all__ = ["execute", "execute_refit", "megatron_shards", "shards_of"]
