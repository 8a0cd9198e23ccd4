"""A model built with our layers as a transfer's inputs: each weight's :class:`topology.Param` and
this rank's shard of it, checked against the layout (private; public as
``topology_torch.transfer.shards_of``).

A parallel layer knows its weight's global shape, the dim its group cuts and its stride (a stride
``s`` is ``s`` equal fused parts, as QKV or gate-up); the caller says where the layer lives: its
transformer ``layer`` (or ``position`` outside the layers) and, for an expert, ``expert`` and
``num_experts``. Every fact about a layer class is one row of :data:`LAYERS`. A module that is not
one of our layers (a norm) holds replicated weights.

>>> import torch
>>> from topology import Topology
>>> from topology_torch.layers import ColumnParallelLinear
>>> from topology_torch.ops import _SingleRank
>>> fc1 = ColumnParallelLinear(4, 6, stride=2, group=_SingleRank())
>>> params, tensors = shards_of(Topology(1), 0, {"fc1": (fc1, {"layer": 0})}, num_layers=1)
>>> [(p.name, p.shape, p.sharding, p.parts) for p in params]
[('fc1.weight', (6, 4), 'column', (3, 3)), ('fc1.bias', (6,), 'column', (3, 3))]
>>> tensors["fc1.weight"].data_ptr() == fc1.weight.data_ptr()
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import attrs
import torch
from torch import nn

from topology import Param, PipelineSplit, Topology, TopologyError, param_placement

from .._args import check_index, check_size
from ..layers import (
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
)
from ..ops import group_rank

__all__ = ["LAYERS", "LayerRow", "shards_of"]

WHERE = ("layer", "position", "expert", "num_experts")
"""The keys of a layer's placement: :class:`topology.Param`'s fields that say where it lives."""


@attrs.frozen
class LayerRow:
    """One layer class: the shardings of its weight and bias, dense and as an expert, and the
    attributes holding its weight's global shape, dim by dim (``None``: no such weight)."""

    weight: str
    expert_weight: str | None
    bias: str | None
    expert_bias: str | None
    shape: tuple[str, str]

    def shardings(self, expert: bool) -> tuple[str | None, str | None]:
        """``(weight, bias)`` shardings of a dense layer or an expert."""
        return (self.expert_weight, self.expert_bias) if expert else (self.weight, self.bias)


_LINEAR = ("out_features", "in_features")
_TABLE = ("num_embeddings", "embedding_dim")
LAYERS: dict[type[nn.Module], LayerRow] = {
    ColumnParallelLinear: LayerRow("column", "expert-column", "column", "expert-column", _LINEAR),
    RowParallelLinear: LayerRow("row", "expert-row", "replicated", "expert-replicated", _LINEAR),
    VocabParallelEmbedding: LayerRow("vocab", None, None, None, _TABLE),
    ParallelEmbedding: LayerRow("row", None, None, None, _TABLE),
}
"""Our parallel layers. A column layer's bias is cut like its rows; a row layer's is replicated
(for an expert: over etp, on the expert's ep coordinate, as Megatron's expert ``linear_fc2``
bias); an embedding is never an expert."""


def _check_where(name: str, where: object) -> Mapping[str, Any]:
    if not isinstance(where, Mapping) or not set(where) <= set(WHERE):
        raise TopologyError(
            f"layer {name!r} placement {where!r} must be a mapping with keys among "
            f"{', '.join(WHERE)}; give e.g. {{'layer': 3}} or {{'position': 'last'}}"
        )
    return where


def _check_module(name: str, entry: object) -> tuple[nn.Module, Mapping[str, Any]]:
    if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], nn.Module)):
        raise TopologyError(
            f"layer {name!r} entry {type(entry).__name__} must be a (module, placement) pair; "
            f"give e.g. {{{name!r}: (module, {{'layer': 0}})}}"
        )
    module, where = entry[0], _check_where(name, entry[1])
    inner = [n for n, m in module.named_modules() if n and type(m) in LAYERS]
    if type(module) not in LAYERS and inner:
        raise TopologyError(
            f"layer {name!r} ({type(module).__name__}) holds parallel layers ({inner[0]!r}); "
            "pass each parallel layer on its own, by its own name"
        )
    if getattr(module, "lora_a", None) is not None:
        raise TopologyError(
            f"layer {name!r} has a LoRA adapter of rank {module.lora_rank}, which a transfer does "
            "not move; merge it into the weight or move it separately"
        )
    row = LAYERS.get(type(module))
    if row is not None and where.get("expert") is not None:
        weight, bias = row.shardings(expert=True)
        if weight is None or (bias is None and getattr(module, "bias", None) is not None):
            raise TopologyError(
                f"layer {name!r} is an expert {type(module).__name__}"
                + (" with a bias" if weight is not None else "")
                + ", which no sharding places; "
                + ("build it with bias=False" if weight is not None else "give no expert")
            )
    return module, where


def _described(
    name: str, module: nn.Module, where: Mapping[str, Any]
) -> list[tuple[Param, torch.Tensor]]:
    """Each weight of ``module`` as a :class:`Param` with its local tensor."""
    row = LAYERS.get(type(module))
    if row is None:
        return [
            (Param(f"{name}.{key}", tuple(t.shape), t.element_size(), **where), t.detach())
            for key, t in module.named_parameters()
        ]
    weight = cast(torch.Tensor, module.weight)
    sharding, bias_sharding = row.shardings(expert=where.get("expert") is not None)
    assert sharding is not None  # refused by _check_module
    shape = tuple(getattr(module, a) for a in row.shape)
    param = Param(f"{name}.weight", shape, weight.element_size(), sharding, **where)
    stride = getattr(module, "stride", 1)
    if stride > 1:
        param = attrs.evolve(param, parts=(shape[param.cut_dim] // stride,) * stride)
    found = [(param, weight.detach())]
    bias = cast(torch.Tensor | None, getattr(module, "bias", None))
    if bias is not None and bias_sharding is not None:
        cut = Param(f"{name}.bias", shape[:1], bias.element_size(), bias_sharding, **where)
        if cut.row.dim is not None:
            cut = attrs.evolve(cut, parts=param.parts)
        found.append((cut, bias.detach()))
    return found


def _check_shard(
    topology: Topology,
    rank: int,
    param: Param,
    tensor: torch.Tensor,
    module: nn.Module,
    num_layers: int,
    pipeline_split: PipelineSplit | None,
) -> None:
    """Refuse a local tensor that is not the shard ``param_placement`` gives ``rank``."""
    placement = param_placement(
        topology, param, num_layers=num_layers, pipeline_split=pipeline_split
    )
    mine = [s for s in placement.shards if rank in s.ranks]
    if not mine:
        stages = sorted({(s.stage, s.chunk) for s in placement.shards})
        raise TopologyError(
            f"rank {rank} holds no shard of {param.name!r} in {topology}: it lives on (stage, "
            f"chunk) {stages} at ranks {sorted({r for s in placement.shards for r in s.ranks})}; "
            "build only the layers (and experts) of this rank's stage and chunks"
        )
    axis = param.row.tp_axis
    if placement.gtp > 1:
        gtp = param.row.gtp_axis
        raise TopologyError(
            f"rank {rank}'s {param.name!r} is a whole {axis} shard in our layers but {topology} "
            f"cuts dim 0 of each {axis} shard into {gtp}({placement.gtp}) blocks (Megatron's GTP "
            f"weight rematerialisation), which our layers do not hold; build the model at a "
            f"layout with {gtp} = 1"
        )
    shard = mine[0]
    width = sum(hi - lo for lo, hi in shard.ranges)
    want = tuple(width if d == param.cut_dim else n for d, n in enumerate(param.shape))
    if tuple(tensor.shape) != want:
        raise TopologyError(
            f"rank {rank}'s {param.name!r} has shape {tuple(tensor.shape)} but {topology} gives "
            f"it {want} (dim {param.cut_dim}: {param.shape[param.cut_dim]} / {axis}("
            f"{placement.split}) = {width}); build the layer with the layout's {axis} group"
        )
    if type(module) in LAYERS and placement.split > 1:
        index = group_rank(module.group)
        if index != shard.index:
            raise TopologyError(
                f"rank {rank}'s {param.name!r} is {axis} shard {index} of its group but {topology} "
                f"gives rank {rank} shard {shard.index}; build the layer with the layout's "
                f"{axis} group"
            )


def shards_of(
    topology: Topology,
    rank: int,
    layers: Mapping[str, tuple[nn.Module, Mapping[str, Any]]],
    *,
    num_layers: int,
    pipeline_split: PipelineSplit | None = None,
) -> tuple[list[Param], dict[str, torch.Tensor]]:
    """This rank's weights of a model built with our layers, as :func:`topology.transfer` and
    :func:`execute` take them, each checked against :func:`topology.param_placement`.

    Each entry ``name: (module, placement)`` gives ``name.weight`` (and ``name.bias``): a
    :class:`~topology.Param` (global shape, the tensor's item size, the row of :data:`LAYERS`
    for the sharding, made ``expert-*`` when the placement names an ``expert``, the stride as
    fused ``parts``) and the module's local tensor (sharing its storage, so that :func:`execute`
    writes a destination model's parameters in place). A module that is not one of our layers
    (a norm) gives its own parameters, replicated. The plan needs every rank's weights: pass
    :func:`topology.transfer` the same full list on every rank (these are this rank's part of it,
    and must be in it as they are: a weight listed with other ``parts`` would move the wrong rows;
    ``set(params) <= set(plan.params)`` checks it).

    Args:
        topology: the layout the model is built at.
        rank: this process's global rank (the layout's rank numbers).
        layers: by name, each module and its placement: a mapping with keys among ``layer``,
            ``position``, ``expert``, ``num_experts`` (as :class:`~topology.Param` takes them).
        num_layers: the model's transformer layers.
        pipeline_split: how Megatron's config splits them over the stages
            (:class:`~topology.PipelineSplit`; pass :func:`topology.transfer` the same one).

    Returns:
        ``(params, tensors)``: the weights in ``layers``' order, and their local tensors by name.

    Raises:
        TopologyError: an entry that is not ``(module, placement)``, a module holding parallel
            layers, a LoRA adapter, an expert embedding, a placement
            :class:`~topology.Param` refuses, a weight this rank does not hold in ``topology``, or
            a local tensor whose shape (or tensor-parallel index) is not the shard ``rank`` holds,
            or a weight Megatron's GTP axis (gtp / egtp > 1) cuts into blocks.
    """
    if not isinstance(topology, Topology):
        raise TopologyError(
            f"topology must be a topology.Topology, got {type(topology).__name__}; pass the "
            "layout the model is built at"
        )
    check_index("rank", rank)
    check_size("num_layers", num_layers)
    if pipeline_split is not None and not isinstance(pipeline_split, PipelineSplit):
        raise TopologyError(
            f"pipeline_split must be a topology.PipelineSplit or None, got "
            f"{type(pipeline_split).__name__}; give PipelineSplit(...) as Megatron's config says"
        )
    if not isinstance(layers, Mapping):
        raise TopologyError(
            f"layers must be a mapping of name to (module, placement), got "
            f"{type(layers).__name__}; give e.g. {{'decoder.0.fc1': (fc1, {{'layer': 0}})}}"
        )
    checked = {name: _check_module(name, entry) for name, entry in layers.items()}
    params, tensors = [], {}
    for name, (module, where) in checked.items():
        for param, tensor in _described(name, module, where):
            _check_shard(topology, rank, param, tensor, module, num_layers, pipeline_split)
            params.append(param)
            tensors[param.name] = tensor
    return params, tensors
