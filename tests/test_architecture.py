"""The one model table: its rows, their checks, and its two views (the cost and the weights)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from topology import Architecture, Param, TopologyError, weights
from topology._architecture.presets import ARCHITECTURES
from topology._cli.main import main
from topology.cost import MODELS

# Each row: preset -> its shapes (layers, hidden, vocab, ffn, heads, kv_heads, head_dim), its MoE
# facts (experts, top_k, moe_ffn, dense_layers, shared_ffn, mla), its published counts
# (parameters, expert_parameters), and the weights it lists (how many, and their elements).
# Invariant: the published counts are within 0.5% of the shapes' sums (they are not equal).
GOLDEN: dict[str, tuple[Any, ...]] = {
    "llama-7b": (
        (32, 4096, 32000, 11008, 32, 32, 128),
        (1, 1, 0, 0, 0, None),
        (6_740_000_000, 0),
        (195, 6_738_415_616),
    ),
    "llama-13b": (
        (40, 5120, 32000, 13824, 40, 40, 128),
        (1, 1, 0, 0, 0, None),
        (13_000_000_000, 0),
        (243, 13_015_864_320),
    ),
    "llama-70b": (
        (80, 8192, 32000, 28672, 64, 8, 128),
        (1, 1, 0, 0, 0, None),
        (69_000_000_000, 0),
        (483, 68_976_648_192),
    ),
    "mixtral-8x7b": (
        (32, 4096, 32000, 14336, 32, 8, 128),
        (8, 2, 14336, 0, 0, None),
        (46_700_000_000, 45_100_000_000),
        (675, 46_702_792_704),
    ),
    "deepseek-v3": (
        (61, 7168, 129280, 18432, 128, 128, 128),
        (256, 8, 2048, 3, 2048, (1536, 512, 128, 64, 128)),
        (671_000_000_000, 653_900_000_000),
        (30486, 671_026_419_200),  # 58 router biases of 256 (issue 32)
    ),
}

SHAPES = ("layers", "hidden", "vocab", "ffn", "heads", "kv_heads", "head_dim")
MOE = ("experts", "top_k", "moe_ffn", "dense_layers", "shared_ffn", "mla")


def _numel(params: list[Param]) -> int:
    return sum(p.nbytes // p.itemsize for p in params)


def _experts(params: list[Param]) -> int:
    """The routed experts a weight list holds per MoE layer (1 when it has none)."""
    return max((p.expert + 1 for p in params if p.expert is not None), default=1)


@pytest.mark.parametrize("name", list(GOLDEN))
def test_every_preset_row_is_pinned(name: str) -> None:
    """Each row holds its published shapes, MoE facts and counts, field by field."""
    shapes, moe, (parameters, expert_parameters), _ = GOLDEN[name]
    row = ARCHITECTURES[name]
    assert tuple(getattr(row, field) for field in SHAPES) == shapes
    assert tuple(getattr(row, field) for field in MOE) == moe
    assert (row.parameters, row.expert_parameters) == (parameters, expert_parameters)


@pytest.mark.parametrize("name", list(GOLDEN))
def test_every_preset_lists_its_pinned_weights(name: str) -> None:
    """A preset's weight list has the pinned length and elements, by name or by row."""
    _, _, _, (count, numel) = GOLDEN[name]
    listed = weights(name)
    assert (len(listed), _numel(listed)) == (count, numel)
    assert weights(ARCHITECTURES[name]) == listed


def test_the_table_holds_exactly_the_pinned_presets_in_order() -> None:
    """No preset is added, dropped or reordered without its golden row."""
    assert list(ARCHITECTURES) == list(GOLDEN)


def test_the_cost_presets_are_the_table_rows() -> None:
    """topology.cost.MODELS has exactly the table's keys, in the table's order."""
    assert list(MODELS) == list(ARCHITECTURES)


@pytest.mark.parametrize("name", list(GOLDEN))
def test_the_cost_model_and_the_weight_list_read_one_row(name: str) -> None:
    """A cost preset's layers, hidden and experts are its weight list's; its counts, the row's."""
    model, row, listed = MODELS[name], ARCHITECTURES[name], weights(name)
    assert model.name == name
    assert model.layers == 1 + max(p.layer for p in listed if p.layer is not None) == row.layers
    assert model.hidden == listed[0].shape[1] == row.hidden
    assert model.experts == _experts(listed) == row.experts
    assert (model.top_k, model.is_moe) == (row.top_k, row.is_moe)
    assert (model.parameters, model.expert_parameters) == (row.parameters, row.expert_parameters)


def test_the_cost_presets_keep_their_published_numbers() -> None:
    """The cost presets' counts are the published floats they always were, at 4096 x 1024."""
    published = {
        "llama-7b": (6.74e9, 0.0),
        "llama-13b": (13.0e9, 0.0),
        "llama-70b": (69.0e9, 0.0),
        "mixtral-8x7b": (46.7e9, 45.1e9),
        "deepseek-v3": (671e9, 653.9e9),
    }
    for name, counts in published.items():
        model = MODELS[name]
        assert (model.parameters, model.expert_parameters) == counts
        assert type(model.parameters) is float and type(model.expert_parameters) is float
        assert (model.sequence_length, model.global_batch, model.micro_batch) == (4096, 1024, 1)
        assert model.bytes_per_element == 2


@pytest.mark.parametrize("name", list(GOLDEN))
def test_published_counts_are_close_to_the_shapes_but_kept_as_published(name: str) -> None:
    """The shapes' sums are within 0.5% of the published counts: the row is one model."""
    row, listed = ARCHITECTURES[name], weights(name)
    assert row.parameters is not None
    assert abs(_numel(listed) - row.parameters) < 0.005 * row.parameters
    experts = _numel([p for p in listed if p.expert is not None])
    assert abs(experts - row.expert_parameters) < 0.005 * row.parameters


def test_a_row_without_a_published_count_is_not_a_cost_preset() -> None:
    """The cost view keeps the rows with a published count; every preset has one."""
    assert all(row.parameters is not None for row in ARCHITECTURES.values())
    assert Architecture(2, 8, 16, 32, 2, 2, 4).parameters is None


def test_the_transfer_command_offers_exactly_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    """`topology transfer --model` refuses a name outside the table and lists every preset."""
    args = ["transfer", "--from", "tp=2", "--to", "tp=4", "-w", "8", "--model", "gpt-5"]
    assert main(args) == 2
    error = capsys.readouterr().err
    assert f"unknown --model value 'gpt-5'; valid: {', '.join(ARCHITECTURES)}" in error


# A tiny model of each kind, listed in full: (name suffix, shape, sharding, parts, layer, expert).
TINY_DENSE = Architecture(1, 8, 16, 32, 4, 2, 2)
TINY_MOE = Architecture(
    2, 8, 16, 32, 2, 2, 4, experts=2, moe_ffn=6, dense_layers=1, shared_ffn=5, top_k=2
)
TINY_MLA = Architecture(1, 8, 16, 32, 2, 2, 4, mla=(3, 5, 2, 1, 7))


def _rows(params: list[Param]) -> list[tuple[Any, ...]]:
    return [(p.name, p.shape, p.sharding, p.parts, p.layer, p.expert) for p in params]


def test_a_dense_gqa_model_lists_megatrons_weights() -> None:
    """Embedding, fused QKV (heads + 2 kv groups), proj, fused gate-up, fc2, norm, output."""
    at, mlp = "decoder.layers.0.self_attention", "decoder.layers.0.mlp"
    assert _rows(weights(TINY_DENSE)) == [
        ("embedding.word_embeddings.weight", (16, 8), "vocab", None, None, None),
        (f"{at}.linear_qkv.layer_norm_weight", (8,), "replicated", None, 0, None),
        (f"{at}.linear_qkv.weight", ((4 + 2 * 2) * 2, 8), "column", None, 0, None),
        (f"{at}.linear_proj.weight", (8, 4 * 2), "row", None, 0, None),
        (f"{mlp}.linear_fc1.layer_norm_weight", (8,), "replicated", None, 0, None),
        (f"{mlp}.linear_fc1.weight", (64, 8), "column", (32, 32), 0, None),
        (f"{mlp}.linear_fc2.weight", (8, 32), "row", None, 0, None),
        ("decoder.final_layernorm.weight", (8,), "replicated", None, None, None),
        ("output_layer.weight", (16, 8), "vocab", None, None, None),
    ]


def test_an_moe_model_lists_dense_layers_then_router_experts_and_shared_experts() -> None:
    """The first dense_layers have a dense MLP; later ones a router, each expert, shared MLP."""
    mlp = [row for row in _rows(weights(TINY_MOE)) if ".mlp." in row[0] or "pre_mlp" in row[0]]
    first, second = "decoder.layers.0.mlp", "decoder.layers.1.mlp"
    experts = f"{second}.experts.local_experts"
    assert mlp == [
        (f"{first}.linear_fc1.layer_norm_weight", (8,), "replicated", None, 0, None),
        (f"{first}.linear_fc1.weight", (64, 8), "column", (32, 32), 0, None),
        (f"{first}.linear_fc2.weight", (8, 32), "row", None, 0, None),
        ("decoder.layers.1.pre_mlp_layernorm.weight", (8,), "replicated", None, 1, None),
        (f"{second}.router.weight", (2, 8), "replicated", None, 1, None),
        (f"{experts}.0.linear_fc1.weight", (12, 8), "expert-column", (6, 6), 1, 0),
        (f"{experts}.0.linear_fc2.weight", (8, 6), "expert-row", None, 1, 0),
        (f"{experts}.1.linear_fc1.weight", (12, 8), "expert-column", (6, 6), 1, 1),
        (f"{experts}.1.linear_fc2.weight", (8, 6), "expert-row", None, 1, 1),
        (f"{second}.shared_experts.linear_fc1.weight", (10, 8), "column", (5, 5), 1, None),
        (f"{second}.shared_experts.linear_fc2.weight", (8, 5), "row", None, 1, None),
    ]
    assert {p.num_experts for p in weights(TINY_MOE) if p.expert is not None} == {2}


def test_an_mla_model_lists_its_low_rank_projections() -> None:
    """MLA: its own input norm, replicated down-projections, column up-projections (their norms
    fused), proj over heads * v_head_dim (megatron-core's TE spec for multi-latent attention)."""
    at = "decoder.layers.0.self_attention"
    attention = [row for row in _rows(weights(TINY_MLA)) if ".mlp" not in row[0]][1:-2]
    assert attention == [
        ("decoder.layers.0.input_layernorm.weight", (8,), "replicated", None, 0, None),
        (f"{at}.linear_q_down_proj.weight", (3, 8), "replicated", None, 0, None),
        (f"{at}.linear_q_up_proj.layer_norm_weight", (3,), "replicated", None, 0, None),
        (f"{at}.linear_q_up_proj.weight", (2 * (2 + 1), 3), "column", None, 0, None),
        (f"{at}.linear_kv_down_proj.weight", (5 + 1, 8), "replicated", None, 0, None),
        (f"{at}.linear_kv_up_proj.layer_norm_weight", (5,), "replicated", None, 0, None),
        (f"{at}.linear_kv_up_proj.weight", (2 * (2 + 7), 5), "column", None, 0, None),
        (f"{at}.linear_proj.weight", (8, 2 * 7), "row", None, 0, None),
    ]


def test_itemsize_scales_every_weight() -> None:
    """weights(model, itemsize) gives the same shapes with itemsize bytes per element."""
    two, four = weights("llama-7b"), weights("llama-7b", 4)
    assert [p.shape for p in four] == [p.shape for p in two]
    assert sum(p.nbytes for p in four) == 2 * sum(p.nbytes for p in two)


def test_the_first_and_last_weights_are_placed_on_the_end_stages() -> None:
    """The embedding is on the first stage; the final norm and the output on the last."""
    listed = weights(TINY_DENSE)
    assert (listed[0].layer, listed[0].position) == (None, "first")
    assert [p.position for p in listed[-2:]] == ["last", "last"]


ROW_ERRORS = [
    ({"layers": 0}, r"Architecture.layers must be a positive int, got 0 \(int\)"),
    ({"hidden": True}, r"Architecture.hidden must be a positive int, got True \(bool\)"),
    ({"vocab": 2.0}, r"Architecture.vocab must be a positive int, got 2.0 \(float\)"),
    ({"experts": 0}, r"Architecture.experts must be a positive int, got 0 \(int\)"),
    ({"moe_ffn": -1}, r"Architecture.moe_ffn must be a non-negative int, got -1 \(int\)"),
    (
        {"parameters": 6.74e9},
        r"Architecture.parameters must be a positive int, got 6740000000.0 \(float\)",
    ),
    ({"parameters": 0}, r"Architecture.parameters must be a positive int, got 0 \(int\)"),
    (
        {"expert_parameters": -1},
        r"Architecture.expert_parameters must be a non-negative int, got -1 \(int\)",
    ),
    (
        {"mla": (1, 2, 3, 4)},
        r"Architecture.mla must be None or a tuple of 5 ints >= 1 \(q_lora_rank, kv_lora_rank, "
        r"qk_nope_head_dim, qk_rope_head_dim, v_head_dim\), got \(1, 2, 3, 4\) \(tuple\)",
    ),
    ({"mla": (1, 2, 3, 4, 0)}, r"Architecture.mla must be None or a tuple of 5 ints >= 1"),
    ({"mla": [1, 2, 3, 4, 5]}, r"got \[1, 2, 3, 4, 5\] \(list\)"),
    ({"mla": (1, 2, 3, 4, True)}, r"Architecture.mla must be None or a tuple of 5 ints >= 1"),
    ({"kv_heads": 3}, r"kv_heads \(3\) must divide heads \(4\); give the number of query groups"),
    ({"top_k": 2}, r"top_k \(2\) cannot exceed experts \(1\); use top_k <= experts"),
    (
        {"experts": 4},
        r"moe_ffn must be >= 1 when experts \(4\) > 1, got 0; give one expert's MLP width",
    ),
    (
        {"dense_layers": 3},
        r"dense_layers \(3\) cannot exceed layers \(2\); count the first layers with a dense MLP",
    ),
    (
        {"parameters": 10, "expert_parameters": 11},
        r"expert_parameters \(11\) cannot exceed parameters \(10\); give the experts' share",
    ),
    ({"expert_parameters": 1}, r"expert_parameters \(1\) cannot exceed parameters \(None\)"),
]


@pytest.mark.parametrize(("changes", "message"), ROW_ERRORS)
def test_an_invalid_row_is_refused(changes: dict[str, Any], message: str) -> None:
    """Each invalid field or contradiction raises TopologyError with its pinned message."""
    base = {"layers": 2, "hidden": 8, "vocab": 16, "ffn": 32, "heads": 4, "kv_heads": 2}
    with pytest.raises(TopologyError, match=message):
        Architecture(**{**base, "head_dim": 2, **changes})


def test_the_limits_of_a_valid_row_are_accepted() -> None:
    """Equal top_k and experts, all layers dense, expert_parameters equal to parameters."""
    row = Architecture(
        2, 8, 16, 32, 4, 4, 2, experts=2, top_k=2, moe_ffn=1, dense_layers=2, parameters=5
    )
    assert attrs.evolve(row, expert_parameters=5).expert_parameters == 5
    assert row.is_moe and not attrs.evolve(row, experts=1, top_k=1).is_moe


@pytest.mark.parametrize("model", ["gpt-5", 3, None, ["llama-7b"], MODELS["llama-7b"]])
def test_an_unknown_preset_is_named_with_the_valid_ones(model: Any) -> None:
    """weights() of anything but a preset name or an Architecture names the presets."""
    with pytest.raises(
        TopologyError, match=r"unknown model preset .* for a transfer; valid presets: "
    ):
        weights(model)
    with pytest.raises(
        TopologyError, match="llama-7b, llama-13b, llama-70b, mixtral-8x7b, deepseek"
    ):
        weights("gpt-5")


@pytest.mark.parametrize("mla", [(1, 1, 1, 1, 1), (3, 5, 2, 1, 7), (2**64,) * 5])
def test_an_mla_tuple_of_ints_from_1_to_the_limit_is_accepted(mla: tuple[int, ...]) -> None:
    """Every MLA dim from 1 up to 2**64 is valid (the bounds of the rule, built at test time)."""
    row = Architecture(1, 8, 16, 32, 2, 2, 4, mla=mla)
    assert row.mla == mla


def test_an_mla_dim_past_the_limit_is_refused() -> None:
    """One past 2**64 is out of range."""
    with pytest.raises(TopologyError, match=r"Architecture.mla must be None or a tuple of 5 ints"):
        Architecture(1, 8, 16, 32, 2, 2, 4, mla=(1, 1, 1, 1, 2**64 + 1))
