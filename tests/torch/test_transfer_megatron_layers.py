""":func:`topology.param_placement` against what Megatron's own layers hold, on gloo worlds.

Differential: on one spawned gloo world of 4 ranks, every rank builds megatron-core 0.16.1's own
``GPTModel`` (its local spec: ``ColumnParallelLinear``, ``RowParallelLinear``,
``VocabParallelEmbedding``, a fused gate-up ``linear_fc1`` with ``stride=2``, and for MoE its
``MoELayer`` with ``SequentialMLP`` experts) on the CPU (``use_cpu_initialization``), one model
chunk per virtual stage, after Megatron's own ``initialize_model_parallel`` for each layout. Every
weight's master is ``arange`` of its global shape (an ``init_method`` Megatron calls on the full
master before cutting), so each local tensor says which global elements it holds. For every
parameter a rank holds, named by Megatron's global ``layer_number`` and ``local_expert_indices``:

- the rank is in exactly one shard of ``param_placement(Topology(...), Param(...), num_layers=4)``,
  on the shard's virtual chunk, and its tensor has the shard's shape and equals ``master[ranges]``
  (biases and norms, which Megatron fills with constants, are checked by shape);
- the parent then checks that every shard's ranks are exactly the ranks holding the weight.

Layouts (4 layers, 4 experts): tp2 pp2 vpp2 with tied embeddings; tp4 untied; MoE tp2 ep2 etp1;
MoE tp2 ep2 etp2 (no biases: Megatron refuses MoE biases at etp > 1); MoE pp2 dp2 ep2; pp2 vpp2
dp2 in order tp-cp-ep-pp-dp (pp before dp). Tied embeddings across stages: Megatron all-reduces
the output copy over its embedding group (``Tensor.cuda`` is the identity on these CPU ranks).

megatron-core 0.19.2 (its oracle folder; a second world) cannot build ``GPTModel`` or its experts
here: they import triton (a GPU compiler, not installed). Its ``ColumnParallelLinear`` (QKV,
gate-up with ``stride=2``, output layer), ``RowParallelLinear`` and ``VocabParallelEmbedding`` are
built layer by layer at the layers its ``get_transformer_layer_offset`` gives each stage and
virtual chunk, on tp2 pp2 vpp2 and tp4, and checked the same way. The expert ``linear_fc2`` bias
(whole over etp, on the expert's ep coordinate) is ``expert-replicated``, the row this test
showed missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("torch.distributed")

from tests.required import missing
from tests.torch.oracle import oracle_0_19
from tests.torch.world import as_cpu_host, run_world
from topology import Param, Topology, param_placement

WORLD, LAYERS, H, HEADS, FFN, MOE_FFN, VOCAB, SEQ, EXPERTS = 4, 4, 16, 4, 32, 8, 32, 8, 4
LAYOUTS: list[dict[str, Any]] = [
    {"tp": 2, "pp": 2, "vpp": 2, "tied": True},
    {"tp": 4, "tied": False},
    {"tp": 2, "ep": 2, "etp": 1, "tied": True, "experts": EXPERTS},
    {"tp": 2, "ep": 2, "etp": 2, "tied": False, "experts": EXPERTS, "bias": False},
    {"pp": 2, "ep": 2, "etp": 1, "tied": True, "experts": EXPERTS},
    {"pp": 2, "vpp": 2, "tied": True, "order": "tp-cp-ep-pp-dp"},
]


def _megatron_0_16() -> None:
    """Skip without megatron-core 0.16.1 installed, except under ``CI``, where it must be."""
    from importlib.metadata import version

    found = importlib.util.find_spec("megatron.core") is not None
    if found and version("megatron-core") == "0.16.1":
        return
    reason = "megatron-core 0.16.1 is not installed in .venv; scripts/setup.sh installs it"
    missing("the megatron-core layer differential tests", reason)


def _topology(layout: dict[str, Any]) -> Topology:
    sizes = {k: layout[k] for k in ("tp", "pp", "vpp", "ep", "etp", "order") if k in layout}
    return Topology(WORLD, **sizes)


LAYER_WEIGHTS: dict[str, tuple[tuple[int, ...], str, tuple[int, ...] | None]] = {
    "input_layernorm.weight": ((H,), "replicated", None),
    "input_layernorm.bias": ((H,), "replicated", None),
    "self_attention.linear_qkv.weight": ((3 * H, H), "column", None),  # per-group interleaved
    "self_attention.linear_qkv.bias": ((3 * H,), "column", None),
    "self_attention.linear_proj.weight": ((H, H), "row", None),
    "self_attention.linear_proj.bias": ((H,), "replicated", None),
    "pre_mlp_layernorm.weight": ((H,), "replicated", None),
    "pre_mlp_layernorm.bias": ((H,), "replicated", None),
    "mlp.linear_fc1.weight": ((2 * FFN, H), "column", (FFN, FFN)),  # gate-up, stride 2
    "mlp.linear_fc1.bias": ((2 * FFN,), "column", (FFN, FFN)),
    "mlp.linear_fc2.weight": ((H, FFN), "row", None),
    "mlp.linear_fc2.bias": ((H,), "replicated", None),
    "mlp.router.weight": ((EXPERTS, H), "replicated", None),
    "mlp.router.bias": ((EXPERTS,), "replicated", None),
}
"""A transformer layer's weights as Megatron names them: global shape, sharding, fused parts."""

EXPERT_WEIGHTS: dict[str, tuple[tuple[int, ...], str, tuple[int, ...] | None]] = {
    "linear_fc1.weight": ((2 * MOE_FFN, H), "expert-column", (MOE_FFN, MOE_FFN)),
    "linear_fc1.bias": ((2 * MOE_FFN,), "expert-column", (MOE_FFN, MOE_FFN)),
    "linear_fc2.weight": ((H, MOE_FFN), "expert-row", None),
    "linear_fc2.bias": ((H,), "expert-replicated", None),
}


def _param(name: str, layer: int | None, expert: int | None, tied: bool) -> Param:
    """Our description of Megatron's weight ``name`` (its path inside one layer or expert, or in
    the model)."""

    def p(shape: tuple[int, ...], sharding: str, parts: Any = None, **kw: Any) -> Param:
        return Param(name, shape, 4, sharding, parts=parts, **kw)

    if expert is not None:
        ex: dict[str, Any] = {"layer": layer, "expert": expert, "num_experts": EXPERTS}
        return p(*EXPERT_WEIGHTS[name], **ex)
    if layer is not None:
        return p(*LAYER_WEIGHTS[name], layer=layer)
    word = p((VOCAB, H), "vocab", position="tied" if tied else "first")
    model = {
        "embedding.word_embeddings.weight": word,
        "embedding.position_embeddings.weight": p((SEQ, H), "replicated"),
        "decoder.final_layernorm.weight": p((H,), "replicated", position="last"),
        "decoder.final_layernorm.bias": p((H,), "replicated", position="last"),
        "output_layer.weight": word if tied else p((VOCAB, H), "column", position="last"),
    }
    # the tied output copy is the word embedding: one weight, one name
    return attrs.evolve(model[name], name="word" if model[name] is word else name)


def _arange_(weight: Any) -> Any:
    """Megatron's ``init_method`` for every master: each element is its flat index."""
    import torch

    with torch.no_grad():
        weight.copy_(torch.arange(weight.numel(), dtype=torch.float32).view_as(weight))
    return weight


def _config(layout: dict[str, Any]) -> Any:
    """Megatron's parallel state and ``TransformerConfig`` at ``layout`` (CPU, arange masters)."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.transformer.transformer_config import TransformerConfig

    sizes = {
        "tensor_model_parallel_size": layout.get("tp", 1),
        "pipeline_model_parallel_size": layout.get("pp", 1),
        "virtual_pipeline_model_parallel_size": layout.get("vpp"),
        "expert_model_parallel_size": layout.get("ep", 1),
        "expert_tensor_parallel_size": layout.get("etp"),
    }
    ps.initialize_model_parallel(**sizes, order=layout.get("order", "tp-cp-ep-dp-pp"))
    experts = layout.get("experts")
    return TransformerConfig(
        num_layers=LAYERS,
        hidden_size=H,
        num_attention_heads=HEADS,
        ffn_hidden_size=FFN,
        num_moe_experts=experts,
        moe_ffn_hidden_size=MOE_FFN if experts else None,
        gated_linear_unit=True,
        add_bias_linear=layout.get("bias", True),
        use_cpu_initialization=True,
        perform_initialization=True,
        init_method=_arange_,
        output_layer_init_method=_arange_,
        params_dtype=torch.float32,
        pipeline_dtype=torch.float32,
        **sizes,
    )


def _models(layout: dict[str, Any]) -> list[Any]:
    """Megatron's model chunks of this rank at ``layout`` (its parallel state initialised)."""
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec

    config = _config(layout)
    experts = layout.get("experts")
    spec = get_gpt_layer_local_spec(num_experts=experts)
    return [
        GPTModel(
            config,
            spec,
            vocab_size=VOCAB,
            max_sequence_length=SEQ,
            pre_process=ps.is_pipeline_first_stage(ignore_virtual=False, vp_stage=chunk),
            post_process=ps.is_pipeline_last_stage(ignore_virtual=False, vp_stage=chunk),
            share_embeddings_and_output_weights=layout["tied"],
            vp_stage=chunk,
        )
        for chunk in range(layout.get("vpp") or 1)
    ]


def _weights(model: Any) -> list[tuple[str, int | None, int | None, Any]]:
    """``(name, layer, expert, tensor)`` of every weight of one model chunk, the layer and expert
    global as Megatron numbers them (``layer_number - 1``, ``local_expert_indices``)."""
    modules = dict(model.named_modules())
    found: list[tuple[str, int | None, int | None, Any]] = []
    for path, tensor in model.named_parameters():
        match = re.fullmatch(r"(decoder\.layers\.\d+)\.(.+)", path)
        if match is None:
            found.append((path, None, None, tensor))
            continue
        layer = modules[match[1]].layer_number - 1
        rest = match[2]
        ex = re.fullmatch(r"(mlp)\.experts\.local_experts\.(\d+)\.(.+)", rest)
        if ex is None:
            found.append((rest, layer, None, tensor))
            continue
        expert = modules[f"{match[1]}.mlp"].local_expert_indices[int(ex[2])]
        found.append((ex[3], layer, expert, tensor))
    return found


def _check(rank: int, topo: Topology, param: Param, chunk: int, local: Any) -> None:
    """``local`` is the one shard ``param_placement`` gives ``rank``: chunk, shape, elements."""
    import torch

    placement = param_placement(topo, param, num_layers=LAYERS)
    mine = [s for s in placement.shards if rank in s.ranks]
    assert len(mine) == 1, (param, rank, placement.shards)
    shard, dim = mine[0], param.cut_dim
    assert shard.chunk == chunk, (param, rank, shard, chunk)
    shape = list(param.shape)
    shape[dim] = sum(hi - lo for lo, hi in shard.ranges)
    assert tuple(local.shape) == tuple(shape), (param, rank, tuple(local.shape), shard)
    if param.name.endswith("weight") and "norm" not in param.name:
        master = _arange_(torch.empty(param.shape))
        want = torch.cat([master.narrow(dim, lo, hi - lo) for lo, hi in shard.ranges], dim)
        assert torch.equal(local.detach(), want), (param, rank, shard)


def _key(param: Param) -> str:
    return f"{param.name}@{param.layer}.{param.expert}"


def _rank_main(rank: int, world_size: int, folder: str) -> None:
    import warnings

    warnings.simplefilter("ignore")
    as_cpu_host()  # Megatron's tied-embedding setup moves the output copy ``.cuda()``
    from megatron.core import parallel_state as ps

    records = []
    for layout in LAYOUTS:
        topo, held = _topology(layout), {}
        for chunk, model in enumerate(_models(layout)):
            for name, layer, expert, tensor in _weights(model):
                param = _param(name, layer, expert, layout["tied"])
                _check(rank, topo, param, chunk, tensor)
                held[_key(param)] = attrs.asdict(param)
        records.append(held)
        ps.destroy_model_parallel()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(records))


def _compare(folder: Path, layouts: list[dict[str, Any]]) -> None:
    """Every shard's ranks are exactly the ranks that recorded holding its weight."""
    records = [json.loads((folder / f"rank{r}.json").read_text()) for r in range(WORLD)]
    for index, layout in enumerate(layouts):
        topo = _topology(layout)
        holders: dict[str, set[int]] = {}
        params: dict[str, Param] = {}
        for rank in range(WORLD):
            for key, fields in records[rank][index].items():
                holders.setdefault(key, set()).add(rank)
                params[key] = Param(**fields)
        assert len(params) > 10, layout
        for key, param in params.items():
            placement = param_placement(topo, param, num_layers=LAYERS)
            ranks = {r for shard in placement.shards for r in shard.ranks}
            assert holders[key] == ranks, (layout, key, holders[key], ranks)


def test_megatron_layers_hold_our_placements(tmp_path: Path) -> None:
    """Megatron 0.16.1's own layers hold, on each rank, exactly the shards param_placement says."""
    _megatron_0_16()
    run_world(WORLD, _rank_main, str(tmp_path), timeout=300)
    _compare(tmp_path, LAYOUTS)


LAYOUTS_0_19: list[dict[str, Any]] = [
    {"tp": 2, "pp": 2, "vpp": 2, "tied": False},
    {"tp": 4, "tied": False},
]


def _layers_0_19(config: Any, ps: Any) -> list[range]:
    """This rank's layers per virtual chunk, from 0.19.2's ``get_transformer_layer_offset``
    (each model chunk runs to the next one's offset; its ``get_num_layers_to_build`` needs
    triton, and so does ``megatron.core.pipeline_parallel``'s ``__init__``: its ``utils`` module
    is loaded without it)."""
    import sys
    import types

    import megatron.core

    package = types.ModuleType("megatron.core.pipeline_parallel")
    package.__path__ = [os.path.join(os.path.dirname(megatron.core.__file__), "pipeline_parallel")]
    sys.modules.setdefault(package.__name__, package)
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    pp, vpp = config.pipeline_model_parallel_size, config.virtual_pipeline_model_parallel_size
    starts = [
        get_transformer_layer_offset(config, vp_stage=c if vpp else None, pp_rank=s)
        for c in range(vpp or 1)
        for s in range(pp)
    ] + [LAYERS]
    stage = ps.get_pipeline_model_parallel_rank()
    return [range(starts[c * pp + stage], starts[c * pp + stage + 1]) for c in range(vpp or 1)]


def _rank_main_0_19(rank: int, world_size: int, folder: str, oracle: str) -> None:
    """0.19.2's ``ColumnParallelLinear`` (QKV, gate-up with ``stride=2``, output layer),
    ``RowParallelLinear`` and ``VocabParallelEmbedding``, layer by layer (its GPTModel, experts
    and pipeline modules import triton)."""
    import sys
    import warnings

    warnings.simplefilter("ignore")
    sys.path.insert(0, oracle)
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.layers import (
        ColumnParallelLinear,
        RowParallelLinear,
        VocabParallelEmbedding,
    )

    records = []
    for layout in LAYOUTS_0_19:
        config = _config(layout)
        topo, held = _topology(layout), {}
        kw: dict[str, Any] = {"config": config, "init_method": _arange_}
        pp_first, pp_last = ps.is_pipeline_first_stage, ps.is_pipeline_last_stage
        for chunk, layers in enumerate(_layers_0_19(config, ps)):
            built: list[tuple[str, int | None, Any]] = []
            if pp_first(ignore_virtual=False, vp_stage=chunk):
                embedding = VocabParallelEmbedding(VOCAB, H, **kw)
                built.append(("embedding.word_embeddings.weight", None, embedding.weight))
            for layer in layers:
                qkv = ColumnParallelLinear(H, 3 * H, bias=True, **kw)
                row = {"bias": True, "input_is_parallel": True, "skip_bias_add": False, **kw}
                proj = RowParallelLinear(H, H, **row)
                fc1 = ColumnParallelLinear(H, 2 * FFN, bias=True, stride=2, **kw)
                fc2 = RowParallelLinear(FFN, H, **row)
                for name, module in (
                    ("self_attention.linear_qkv", qkv),
                    ("self_attention.linear_proj", proj),
                    ("mlp.linear_fc1", fc1),
                    ("mlp.linear_fc2", fc2),
                ):
                    built.append((f"{name}.weight", layer, module.weight))
                    built.append((f"{name}.bias", layer, module.bias))
            if pp_last(ignore_virtual=False, vp_stage=chunk):
                output = ColumnParallelLinear(H, VOCAB, bias=False, **kw)
                built.append(("output_layer.weight", None, output.weight))
            for name, at, tensor in built:
                param = _param(name, at, None, layout["tied"])
                _check(rank, topo, param, chunk, tensor)
                held[_key(param)] = attrs.asdict(param)
        records.append(held)
        ps.destroy_model_parallel()
    Path(folder, f"rank{rank}.json").write_text(json.dumps(records))


def test_megatron_0_19_layers_hold_our_placements(tmp_path: Path) -> None:
    """megatron-core 0.19.2's tensor-parallel layers, at its own layer offsets, hold our shards."""
    oracle = str(oracle_0_19())
    run_world(WORLD, _rank_main_0_19, str(tmp_path), oracle, timeout=300)
    _compare(tmp_path, LAYOUTS_0_19)
