"""``topology_torch.transfer.shards_of`` in one process (groups of one rank): a golden table of the
weights each of our layer classes gives, and the refusals, each message pinned. The real worlds are
in ``test_transfer_layers.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from topology import Topology, TopologyError  # noqa: E402


def _one() -> Any:
    from topology_torch.ops import _SingleRank

    return _SingleRank()


def _described(layers: dict[str, Any], topo: Topology | None = None) -> list[tuple[Any, ...]]:
    from topology_torch.transfer import shards_of

    params, tensors = shards_of(topo or Topology(1), 0, layers, num_layers=2)
    assert [p.name for p in params] == list(tensors)
    return [(p.name, p.shape, p.itemsize, p.sharding, p.parts, p.layer, p.position) for p in params]


def test_each_layer_class_gives_its_weights_as_params() -> None:
    """Golden table: each class's weight and bias, sharding, fused parts from the stride."""
    from topology_torch.layers import (
        ColumnParallelLinear,
        ParallelEmbedding,
        RowParallelLinear,
        VocabParallelEmbedding,
    )

    one = _one()
    layers = {
        "qkv": (ColumnParallelLinear(4, 12, stride=3, group=one), {"layer": 1}),
        "proj": (RowParallelLinear(6, 4, stride=2, group=one, dtype=torch.bfloat16), {"layer": 1}),
        "embed": (VocabParallelEmbedding(16, 4, group=one), {"position": "tied"}),
        "pos": (ParallelEmbedding(16, 4, group=one), {}),
        "norm": (torch.nn.LayerNorm(4), {"position": "last"}),
    }
    assert _described(layers) == [
        ("qkv.weight", (12, 4), 4, "column", (4, 4, 4), 1, "first"),
        ("qkv.bias", (12,), 4, "column", (4, 4, 4), 1, "first"),
        ("proj.weight", (4, 6), 2, "row", (3, 3), 1, "first"),
        ("proj.bias", (4,), 2, "replicated", None, 1, "first"),
        ("embed.weight", (16, 4), 4, "vocab", None, None, "tied"),
        ("pos.weight", (16, 4), 4, "row", None, None, "first"),
        ("norm.weight", (4,), 4, "replicated", None, None, "last"),
        ("norm.bias", (4,), 4, "replicated", None, None, "last"),
    ]


def test_an_expert_layer_gives_expert_shardings() -> None:
    """A placement naming an expert turns column / row into expert-column / expert-row (a row
    layer's bias: expert-replicated)."""
    from topology_torch.layers import ColumnParallelLinear, RowParallelLinear

    ex = {"layer": 0, "expert": 3, "num_experts": 4}
    layers = {
        "fc1": (ColumnParallelLinear(4, 8, stride=2, group=_one()), ex),
        "fc2": (RowParallelLinear(4, 4, group=_one()), ex),
    }
    assert [(row[0], row[3]) for row in _described(layers)] == [
        ("fc1.weight", "expert-column"),
        ("fc1.bias", "expert-column"),
        ("fc2.weight", "expert-row"),
        ("fc2.bias", "expert-replicated"),
    ]


def test_a_shard_of_the_wrong_shape_is_refused() -> None:
    """A layer cut by a group of one where the layout has tp 2 holds the wrong shape."""
    from topology_torch.layers import ColumnParallelLinear

    layers = {"fc": (ColumnParallelLinear(4, 8, group=_one()), {"layer": 0})}
    with pytest.raises(
        TopologyError,
        match=r"rank 0's 'fc.weight' has shape \(8, 4\) but .* gives it \(4, 4\) "
        r"\(dim 0: 8 / tp\(2\) = 4\); build the layer with the layout's tp group",
    ):
        _described(layers, Topology(2, tp=2))


def test_a_weight_gtp_cuts_into_blocks_is_refused() -> None:
    """Our layers hold whole tp shards; a layout whose GTP axis cuts them is refused."""
    from topology_torch.layers import ColumnParallelLinear

    layers = {"fc": (ColumnParallelLinear(4, 64, group=_one()), {"layer": 0})}
    with pytest.raises(
        TopologyError,
        match=r"rank 0's 'fc.weight' is a whole tp shard in our layers but .* cuts dim 0 of each "
        r"tp shard into gtp\(2\) blocks \(Megatron's GTP weight rematerialisation\), which our "
        r"layers do not hold; build the model at a layout with gtp = 1",
    ):
        _described(layers, Topology(2, gtp=2))


@pytest.mark.parametrize(
    ("topo", "where"),
    [
        (Topology(2, pp=2), {"layer": 1}),
        (Topology(2, ep=2), {"layer": 0, "expert": 3, "num_experts": 4}),
    ],
)
def test_a_layer_this_rank_does_not_hold_is_refused(topo: Topology, where: Any) -> None:
    """A layer of another stage, or an expert of another ep rank, is refused on rank 0."""
    from topology_torch.layers import RowParallelLinear

    layers = {"fc": (RowParallelLinear(4, 4, bias=False, group=_one()), where)}
    with pytest.raises(TopologyError, match=r"rank 0 holds no shard of 'fc.weight' in .* build"):
        _described(layers, topo)


def test_a_layer_is_checked_on_the_stage_of_the_pipeline_split() -> None:
    """Layer 1 of 3 sits on stage 1 of pp 2 under first_stage_layers=1 (stage 0 without it)."""
    from topology import PipelineSplit
    from topology_torch.layers import RowParallelLinear
    from topology_torch.transfer import shards_of

    layers = {"fc": (RowParallelLinear(4, 4, bias=False, group=_one()), {"layer": 1})}
    split = PipelineSplit(first_stage_layers=1)
    params, _ = shards_of(Topology(2, pp=2), 1, layers, num_layers=3, pipeline_split=split)
    assert [p.layer for p in params] == [1]
    with pytest.raises(TopologyError, match=r"rank 1 holds no shard of 'fc.weight'"):
        shards_of(Topology(2, pp=2), 1, layers, num_layers=3)
    with pytest.raises(TopologyError, match=r"pipeline_split must be a topology.PipelineSplit"):
        shards_of(Topology(2, pp=2), 1, layers, num_layers=3, pipeline_split=1)


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ("fc", r"layer 'x' entry str must be a \(module, placement\) pair"),
        ("placement", r"layer 'x' placement \{'stage': 0\} must be a mapping with keys among"),
        ("wrapper", r"layer 'x' \(Sequential\) holds parallel layers \('0'\); pass each"),
        ("lora", r"layer 'x' has a LoRA adapter of rank 2, which a transfer does not move"),
        (
            "expert-table",
            r"layer 'x' is an expert VocabParallelEmbedding, which no sharding "
            r"places; give no expert",
        ),
        ("dense-expert", r"Param 'x.weight' with sharding 'replicated' takes expert and"),
    ],
)
def test_a_mis_described_layer_is_refused(entry: str, match: str) -> None:
    """Entries that are not (module, placement), or that no sharding places, are refused."""
    from topology_torch.layers import (
        ColumnParallelLinear,
        VocabParallelEmbedding,
    )

    fc = ColumnParallelLinear(4, 4, group=_one())
    ex = {"layer": 0, "expert": 0, "num_experts": 1}
    entries = {
        "fc": "fc",
        "placement": (fc, {"stage": 0}),
        "wrapper": (torch.nn.Sequential(fc), {}),
        "lora": (ColumnParallelLinear(4, 4, lora_rank=2, group=_one()), {}),
        "expert-table": (VocabParallelEmbedding(4, 4, group=_one()), ex),
        "dense-expert": (torch.nn.LayerNorm(4), ex),
    }
    with pytest.raises(TopologyError, match=match):
        _described({"x": entries[entry]})


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("tp2", 0, {}, 1), r"topology must be a topology.Topology, got str"),
        ((Topology(1), -1, {}, 1), r"rank must be a non-negative int, got -1 \(int\)"),
        ((Topology(1), 0, [], 1), r"layers must be a mapping of name to \(module, placement\)"),
        ((Topology(1), 0, {}, 0), r"num_layers must be a positive int, got 0 \(int\)"),
    ],
)
def test_bad_arguments_are_refused(args: tuple[Any, ...], match: str) -> None:
    """shards_of checks its arguments before describing any layer."""
    from topology_torch.transfer import shards_of

    topo, rank, layers, num_layers = args
    with pytest.raises(TopologyError, match=match):
        shards_of(topo, rank, layers, num_layers=num_layers)
