"""A Megatron-core model's own parameters as a plan's source shards (private; public as
``topology_torch.transfer.megatron_shards``).

A plan names each weight as :func:`topology.weights` does: Megatron's names with the model's
global layer and expert numbers (``decoder.layers.5.mlp.experts.local_experts.6.linear_fc1
.weight``). A pipeline stage's model numbers its modules locally: ``decoder.layers.<i>`` counts
the layers of its own virtual chunk from 0 (a chunk is one model of the stage's list under vpp),
``local_experts.<j>`` the experts of its own ep coordinate from 0. The core says which stage and
chunk hold a weight (:func:`topology.param_placement`) and which layers a chunk holds
(:meth:`topology.Topology.layers`); a global name becomes the chunk's local one by the layer's
position in its chunk and the expert's in its ep coordinate.

Norms follow Megatron's Transformer Engine spec (``self_attention.linear_qkv.layer_norm_weight``);
a model built with the local spec (``input_layernorm.weight``) is read through
:data:`LOCAL_SPEC`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from topology import Param, ParamShard, Refit, TopologyError, Transfer, param_placement

from .._args import check_index

__all__ = ["LOCAL_SPEC", "TIED", "local_name", "megatron_shards"]

LOCAL_SPEC = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
    "self_attention.linear_q_up_proj.layer_norm_weight": "self_attention.q_layernorm.weight",
    "self_attention.linear_kv_up_proj.layer_norm_weight": "self_attention.kv_layernorm.weight",
}
"""A layer's norm under the Transformer Engine spec's name (fused into the linear it feeds) and
under the local spec's (a module of its own): megatron-core 0.16.1's local spec maps the first
two so in its ``sharded_state_dict_keys_map`` (``gpt_layer_specs.py``); MLA's q and kv LoRA
norms are its ``q_layernorm`` and ``kv_layernorm`` modules there (``qk_layernorm=True``), as
Megatron-Bridge's DeepSeek mapping lists them for the local spec."""

TIED = {"embedding.word_embeddings.weight": "output_layer.weight"}
"""A weight outside the layers and its name on a stage that holds it under another: with tied
embeddings and pp > 1, megatron-core's last stage holds the word embeddings as its
``output_layer.weight`` (``LanguageModule.setup_embeddings_and_output_layer``)."""

_LAYERS = "decoder.layers."
_EXPERTS = ".local_experts."

Model = nn.Module | Mapping[str, torch.Tensor]
"""One model chunk: a module, or its tensors by local name (``state_dict()``)."""


def _tensors(chunk: object, index: int) -> dict[str, torch.Tensor]:
    """A chunk's tensors by local name (a wrapper's ``module.`` prefixes dropped)."""
    if isinstance(chunk, nn.Module):
        found = dict(chunk.named_parameters())
        found.update((n, b) for n, b in chunk.named_buffers() if b is not None)
    elif isinstance(chunk, Mapping):
        found = dict(chunk)
    else:
        raise TopologyError(
            f"model chunk {index} is a {type(chunk).__name__}; give a torch.nn.Module or a "
            "mapping of name to tensor (model.state_dict())"
        )
    return {_unwrapped(name): t for name, t in found.items()}


def _unwrapped(name: str) -> str:
    while name.startswith("module."):
        name = name[len("module.") :]
    return name


def _held(plan: Transfer, param: Param, rank: int) -> ParamShard | None:
    """``rank``'s shard of ``param`` in the plan's source layout (None: it holds none)."""
    placement = param_placement(
        plan.src, param, num_layers=plan.num_layers, pipeline_split=plan.src_pipeline_split
    )
    return next((s for s in placement.shards if rank in s.ranks), None)


def local_name(plan: Transfer, param: Param, shard: ParamShard) -> str:
    """``param``'s name in the model chunk holding ``shard`` of it: its layer renumbered within
    the chunk, its expert within the ep coordinate."""
    src, name = plan.src, param.name
    head = f"{_LAYERS}{param.layer}."
    if param.layer is not None and name.startswith(head):
        layers = src.layers(shard.stage, plan.num_layers, plan.src_pipeline_split)[shard.chunk]
        name = f"{_LAYERS}{layers.index(param.layer)}.{name[len(head) :]}"
    if param.expert is not None and param.num_experts is not None:
        held = param.num_experts // src.ep
        name = name.replace(f"{_EXPERTS}{param.expert}.", f"{_EXPERTS}{param.expert % held}.")
    return name


def _alias(name: str) -> str:
    """``name`` under the local spec's norm names (:data:`LOCAL_SPEC`) or a tied stage's
    (:data:`TIED`); ``name`` itself when neither renames it."""
    if name.startswith(_LAYERS):
        index, _, key = name[len(_LAYERS) :].partition(".")
        return f"{_LAYERS}{index}.{LOCAL_SPEC.get(key, key)}"
    return TIED.get(name, name)


def _shape(param: Param, shard: ParamShard) -> tuple[int, ...]:
    """The shape of a holder's local tensor of ``shard``."""
    width = sum(hi - lo for lo, hi in shard.ranges)
    shape = [width if d == param.cut_dim else n for d, n in enumerate(param.shape)]
    if shard.rows is not None:
        shape[0] = shard.rows[1] - shard.rows[0]
    return tuple(shape)


def megatron_shards(
    plan: Transfer | Refit,
    rank: int,
    model: Model | Sequence[Model] | None,
) -> dict[str, torch.Tensor]:
    """This rank's source shards of ``plan``'s weights, read from its Megatron-core model by
    Megatron's local names, keyed by the plan's names (what :func:`execute` and
    :func:`execute_refit` take as ``src``).

    A Megatron-core trainer holds, on each rank, the layers of its pipeline stage numbered from 0
    (``decoder.layers.0`` is the stage's first layer; under vpp, each virtual chunk is a model of
    its own, numbered from 0) and the experts of its ep coordinate numbered from 0
    (``mlp.experts.local_experts.0``). The plan names every weight by the whole model's numbers
    (:func:`topology.weights`); each weight this rank holds in the plan's source layout is found
    in the chunk that holds it under its local name (:func:`topology.param_placement` and
    :meth:`topology.Topology.layers` give the stage, chunk and the chunk's layers). Norms are
    found under the Transformer Engine spec's names or the local spec's (:data:`LOCAL_SPEC`), tied
    word embeddings on the last stage as its ``output_layer.weight`` (:data:`TIED`); a wrapper's
    ``module.`` prefixes are dropped. The tensors are the model's own (no copy): a
    source is only read.

    Args:
        plan: the plan (:func:`topology.refit` or :func:`topology.transfer` with Megatron's
            weight names, the trainer's layout as its source).
        rank: this process's global rank (the plan's rank numbers).
        model: this rank's model: a ``GPTModel`` (any ``torch.nn.Module``: its parameters and
            buffers, as the router's ``expert_bias``), or its tensors by name
            (``model.state_dict()``); under vpp a list of them, one per virtual chunk, as
            Megatron builds them. ``None`` (or ``[]``) on a rank outside the source layout.

    Returns:
        The plan's name -> this rank's local tensor, for every weight the rank holds.

    Raises:
        TopologyError: a chunk that is neither a module nor a mapping, a chunk count other than
            the layout's virtual chunks, a weight the rank holds missing from its chunk (the
            message names the local name looked for), or a tensor whose shape is not the shard
            the layout gives the rank.
    """
    inner = plan.plan if isinstance(plan, Refit) else plan
    if not isinstance(inner, Transfer):
        raise TopologyError(
            f"plan must be a topology.Transfer or topology.Refit, got {type(plan).__name__}; "
            "give what topology.transfer or topology.refit returned"
        )
    check_index("rank", rank)
    src = inner.src
    if model is None:
        chunks: list[dict[str, torch.Tensor]] = []
    elif isinstance(model, list | tuple):
        chunks = [_tensors(chunk, i) for i, chunk in enumerate(model)]
    else:
        chunks = [_tensors(model, 0)]
    if not src.rank_offset <= rank < src.rank_offset + src.world_size:
        return {}
    if len(chunks) != (src.vpp or 1):
        raise TopologyError(
            f"rank {rank} passed {len(chunks)} model chunks but {src} holds "
            f"{src.vpp or 1} per rank; pass one model per virtual pipeline chunk"
        )
    found = {}
    for param in inner.params:
        shard = _held(inner, param, rank)
        if shard is None:
            continue
        chunk, name = shard.chunk, local_name(inner, param, shard)
        tensors = chunks[chunk]
        names = list(dict.fromkeys((name, _alias(name))))
        name = next((n for n in names if n in tensors), "")
        if not name:
            raise TopologyError(
                f"rank {rank}'s model chunk {chunk} has no {' or '.join(map(repr, names))} (the "
                f"plan's {param.name!r}); pass the model built at {src} with Megatron's names"
            )
        tensor = tensors[name].detach()
        want = _shape(param, shard)
        if tuple(tensor.shape) != want:
            raise TopologyError(
                f"rank {rank}'s {name!r} has shape {tuple(tensor.shape)} but {src} gives it "
                f"{want}; pass the model built at the plan's source layout"
            )
        found[param.name] = tensor
    return found
