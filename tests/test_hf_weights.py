"""Any model from its config.json: the reader's families and errors, the Hugging Face weight
list and its mapping onto Megatron's weights (laws over generated models, then goldens).

The checkpoints ``save_pretrained`` writes are the reference in
``tests/torch/test_hf_checkpoints.py``; here the mapping's laws hold for any model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Architecture, HFWeight, TopologyError, hf_weights, read_model_config, weights
from topology._architecture.families import FAMILIES
from topology._architecture.presets import ARCHITECTURES, CONFIGS
from topology._architecture.roles import ROLES
from topology._cli.main import main
from topology._transfer.hf_weights import hf_kind, hf_tensors


@st.composite
def architectures(draw: st.DrawFn) -> Architecture:
    """A small model of any family: GQA with or without bias / q-k norm and ties, MoE, MLA."""
    groups = draw(st.integers(1, 3))
    heads = groups * draw(st.integers(1, 3))
    moe = draw(st.booleans())
    mla = draw(st.none() | st.tuples(*[st.integers(1, 4)] * 5))
    family = draw(st.sampled_from(list(FAMILIES)))
    layers = draw(st.integers(1, 3))
    return Architecture(
        layers,
        draw(st.integers(1, 6)),
        draw(st.integers(1, 9)),
        draw(st.integers(1, 5)),
        heads,
        groups,
        draw(st.integers(1, 4)),
        experts=draw(st.integers(2, 4)) if moe else 1,
        moe_ffn=draw(st.integers(1, 4)) if moe else 0,
        dense_layers=draw(st.integers(0, layers)) if moe else 0,
        shared_ffn=draw(st.integers(0, 3)) if moe else 0,
        mla=mla,
        tied_embeddings=draw(st.booleans()),
        qkv_bias=mla is None and draw(st.booleans()),
        qk_norm=mla is None and draw(st.booleans()),
        router_bias=moe and draw(st.booleans()),
        family=family,
    )


def _rows(shape: tuple[int, ...]) -> int:
    return shape[0]


@given(architectures())
def test_every_hf_row_maps_to_exactly_one_megatron_row_and_back(model: Architecture) -> None:
    """The blocks cover each HF tensor's rows once and each Megatron weight's rows once."""
    params = {p.name: p for p in weights(model)}
    hf_cover: dict[str, list[int]] = {}
    megatron_cover = {name: [0] * p.shape[0] for name, p in params.items()}
    for w in hf_weights(model):
        assert w.shape[1:] == w.param.shape[1:] and w.param == params[w.param.name]
        cover = hf_cover.setdefault(w.name, [0] * w.shape[0])
        for hf_row, param_row, rows in w.blocks:
            for i in range(rows):
                cover[hf_row + i] += 1
                megatron_cover[w.param.name][param_row + i] += 1
    assert all(c == [1] * len(c) for c in hf_cover.values())
    assert all(c == [1] * len(c) for c in megatron_cover.values())


@given(architectures())
def test_the_two_vocabularies_hold_the_same_elements(model: Architecture) -> None:
    """Names are unique, roles are ROLES, and both lists hold the same number of elements."""
    listed = hf_weights(model, itemsize=3)
    assert len({w.name for w in listed}) == len(listed)
    assert {w.role for w in listed} <= set(ROLES)
    assert sum(w.nbytes for w in listed) == sum(p.nbytes for p in weights(model, 3))
    assert ("lm_head.weight" in {w.name for w in listed}) is not model.tied_embeddings


@given(architectures())
def test_every_listed_record_equals_its_checked_construction(model: Architecture) -> None:
    """Most weights and tensors are made as siblings of a checked one (``params.sibling``) and
    the lists once per model: each record equals (and hashes as) the one its fields make with
    every check, and each call returns a list of its own."""
    listed, tensors = weights(model), hf_weights(model)
    for record in [*listed, *tensors]:
        checked = attrs.evolve(record)
        assert checked == record
        assert hash(checked) == hash(record)
        assert repr(checked) == repr(record)
    assert len({w.name for w in listed}) == len(listed)
    listed.clear()
    tensors.clear()
    assert weights(model) and hf_weights(model)


@given(architectures(), st.sampled_from([1, 2, 4]))
def test_one_weights_tensors_alone_are_its_part_of_the_list(
    model: Architecture, itemsize: int
) -> None:
    """``hf_tensors`` of each weight, made alone (in any order: here last weight first), is that
    weight's run of ``hf_weights``; ``hf_kind`` is their roles, shapes and blocks."""
    listed = hf_weights(model, itemsize)
    alone = {p.name: hf_tensors(model, p) for p in reversed(weights(model, itemsize))}
    assert [w for p in weights(model, itemsize) for w in alone[p.name]] == listed
    for param in weights(model, itemsize):
        kind = tuple((w.role, w.shape, w.blocks) for w in alone[param.name])
        assert hf_kind(model, param) == kind


def test_the_roles_are_the_shared_list() -> None:
    """ROLES is exactly the vocabulary every helper of issue 32 shares, in order."""
    assert ROLES == (
        "embedding", "lm_head", "norm", "q", "k", "v", "o", "gate", "up", "down", "router",
        "router_bias", "expert_gate", "expert_up", "expert_down", "shared_gate", "shared_up",
        "shared_down", "q_a", "q_b", "kv_a", "kv_b",
    )  # fmt: skip


def _names(model: Architecture) -> list[tuple[str, tuple[int, ...], str]]:
    return [(w.name, w.shape, w.role) for w in hf_weights(model)]


def test_a_mixtral_layer_names_its_experts_w1_w3_w2() -> None:
    """Mixtral's MoE block is block_sparse_moe with w1 (gate), w3 (up), w2 (down) experts."""
    model = Architecture(1, 8, 16, 6, 2, 1, 4, experts=2, moe_ffn=6, family="mixtral")
    moe = [row for row in _names(model) if "block_sparse_moe" in row[0]]
    at = "model.layers.0.block_sparse_moe"
    assert moe == [
        (f"{at}.gate.weight", (2, 8), "router"),
        (f"{at}.experts.0.w1.weight", (6, 8), "expert_gate"),
        (f"{at}.experts.0.w3.weight", (6, 8), "expert_up"),
        (f"{at}.experts.0.w2.weight", (8, 6), "expert_down"),
        (f"{at}.experts.1.w1.weight", (6, 8), "expert_gate"),
        (f"{at}.experts.1.w3.weight", (6, 8), "expert_up"),
        (f"{at}.experts.1.w2.weight", (8, 6), "expert_down"),
    ]


def test_a_deepseek_moe_layer_names_router_bias_experts_and_shared_experts() -> None:
    """DeepSeek-V3: router, its e_score_correction_bias, routed experts, then shared experts."""
    model = Architecture(
        2, 8, 16, 6, 2, 2, 4, experts=2, moe_ffn=3, dense_layers=1, shared_ffn=5,
        mla=(3, 5, 2, 1, 7), router_bias=True, family="deepseek_v3",
    )  # fmt: skip
    at = "model.layers.1.mlp"
    mlp = [row for row in _names(model) if row[0].startswith(at)]
    assert [row for row in mlp if "experts.1" not in row[0]] == [
        (f"{at}.gate.weight", (2, 8), "router"),
        (f"{at}.gate.e_score_correction_bias", (2,), "router_bias"),
        (f"{at}.experts.0.gate_proj.weight", (3, 8), "expert_gate"),
        (f"{at}.experts.0.up_proj.weight", (3, 8), "expert_up"),
        (f"{at}.experts.0.down_proj.weight", (8, 3), "expert_down"),
        (f"{at}.shared_experts.gate_proj.weight", (5, 8), "shared_gate"),
        (f"{at}.shared_experts.up_proj.weight", (5, 8), "shared_up"),
        (f"{at}.shared_experts.down_proj.weight", (8, 5), "shared_down"),
    ]
    bias = next(w for w in hf_weights(model) if w.role == "router_bias")
    assert bias.param.name == "decoder.layers.1.mlp.router.expert_bias"
    dense = [row for row in _names(model) if row[0].startswith("model.layers.0.mlp")]
    assert [role for _, _, role in dense] == ["gate", "up", "down"]


def test_the_fused_fc1_is_gate_then_up() -> None:
    """linear_fc1 rows [0, ffn) are gate_proj and [ffn, 2 ffn) are up_proj."""
    fc1 = [w for w in hf_weights(Architecture(1, 8, 16, 6, 2, 1, 4)) if w.role in ("gate", "up")]
    assert [(w.role, w.blocks) for w in fc1] == [("gate", ((0, 0, 6),)), ("up", ((0, 6, 6),))]
    assert {w.param.name for w in fc1} == {"decoder.layers.0.mlp.linear_fc1.weight"}


def test_a_tied_model_has_one_embedding_on_the_embedding_stages() -> None:
    """Tied embeddings: no lm_head / output_layer; the embedding's position is 'tied'."""
    model = Architecture(1, 8, 16, 6, 2, 1, 4, tied_embeddings=True)
    names = [w.name for w in hf_weights(model)]
    assert "lm_head.weight" not in names and names[-1] == "model.norm.weight"
    megatron = weights(model)
    assert megatron[0].position == "tied"
    assert "output_layer.weight" not in [p.name for p in megatron]


def test_qkv_bias_and_qk_norm_are_listed_in_both_vocabularies() -> None:
    """A q/k/v bias is cut like its weight; q_norm / k_norm are Megatron's q/k_layernorm."""
    model = Architecture(1, 8, 16, 6, 4, 2, 2, qkv_bias=True, qk_norm=True)
    listed = {w.name.removeprefix("model.layers.0.self_attn."): w for w in hf_weights(model)}
    assert listed["k_proj.bias"].blocks == ((0, 4, 2), (2, 12, 2))
    assert listed["k_proj.bias"].param.name.endswith("linear_qkv.bias")
    assert (listed["q_norm.weight"].shape, listed["q_norm.weight"].role) == ((2,), "norm")
    assert listed["k_norm.weight"].param.name.endswith("k_layernorm.weight")


KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "kimi_k2",
    "first_k_dense_replace": 1,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_routed_experts": 384,
    "n_shared_experts": 1,
    "num_attention_heads": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 64,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "tie_word_embeddings": False,
    "v_head_dim": 128,
    "vocab_size": 163840,
}
"""Kimi-K2's config.json (moonshotai/Kimi-K2-Instruct), the keys the reader uses."""


def _write(folder: Path, config: dict[str, Any]) -> Path:
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_kimi_k2_reads_as_a_deepseek_v3_of_about_a_trillion_weights(tmp_path: Path) -> None:
    """Kimi-K2: 384 experts, 1 dense layer, 64 heads; its shapes hold 1.03e12 weights."""
    model = read_model_config(_write(tmp_path, KIMI_K2))
    assert (model.family, model.experts, model.dense_layers, model.heads) == (
        "deepseek_v3", 384, 1, 64,
    )  # fmt: skip
    assert (model.shared_ffn, model.router_bias, model.mla) == (
        2048,
        True,
        (1536, 512, 128, 64, 128),
    )
    total = sum(w.nbytes for w in hf_weights(model, 1))
    assert 1.02e12 < total < 1.04e12


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_every_preset_is_its_shipped_config_plus_its_published_counts(name: str) -> None:
    """A preset row is read from configs/<name>.json; only the published counts are added."""
    row = read_model_config(Path(CONFIGS) / f"{name}.json")
    assert attrs.evolve(row, parameters=None, expert_parameters=0) == attrs.evolve(
        ARCHITECTURES[name], parameters=None, expert_parameters=0
    )


LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "vocab_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 96,
}

CONFIG_ERRORS = [
    ({"architectures": ["GPT2LMHeadModel"]}, r"names architecture 'GPT2LMHeadModel', not a "
     r"family this reads; families read: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
     r"Qwen3MoeForCausalLM, MixtralForCausalLM, DeepseekV3ForCausalLM$"),
    ({"architectures": None}, r"key 'architectures' must be a list naming the model class, got "
     r"None; families read: LlamaForCausalLM"),
    ({"hidden_size": None}, r"lacks key 'hidden_size'|key 'hidden_size' must be a positive int, "
     r"got None \(families read: LlamaForCausalLM"),
    ({"hidden_size": "64"}, r"key 'hidden_size' must be a positive int, got '64'"),
    ({"num_attention_heads": True}, r"key 'num_attention_heads' must be a positive int, got True"),
    ({"tie_word_embeddings": 1}, r"key 'tie_word_embeddings' must be true or false, got 1"),
    ({"attention_bias": True}, r"key 'attention_bias' must be False for LlamaForCausalLM, got "
     r"True"),
    ({"num_key_value_heads": 3}, r"config.json '.*': kv_heads \(3\) must divide heads \(4\)"),
    ({"hidden_size": 66}, r"key 'head_dim' must be given when num_attention_heads \(4\) does not "
     r"divide hidden_size \(66\)"),
]  # fmt: skip


@pytest.mark.parametrize(("changes", "message"), CONFIG_ERRORS)
def test_a_bad_config_is_one_line_naming_the_key(
    changes: dict[str, Any], message: str, tmp_path: Path
) -> None:
    """Each unsupported family, missing or invalid key raises one line with its pinned text."""
    config = {key: value for key, value in {**LLAMA, **changes}.items() if value is not None}
    if "architectures" in changes and changes["architectures"] is None:
        config["architectures"] = None
    with pytest.raises(TopologyError, match=message) as error:
        read_model_config(_write(tmp_path, config))
    assert "\n" not in str(error.value)


def test_a_missing_key_is_named() -> None:
    """A required key that is absent is named with the families read."""
    from topology._architecture.config import model_from_config

    config = {k: v for k, v in LLAMA.items() if k != "vocab_size"}
    with pytest.raises(TopologyError, match=r"^config lacks key 'vocab_size'; give it \(families"):
        model_from_config(config)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mlp_only_layers": [1]}, r"key 'mlp_only_layers' must be a list of the first layers"),
        ({"decoder_sparse_step": 2}, r"key 'decoder_sparse_step' must be 1 for Qwen3MoeFor"),
        ({"num_experts": 0}, r"key 'num_experts' must be a positive int, got 0"),
        ({"num_experts": 1}, r"key 'num_experts' must be an int >= 2 \(a mixture of experts\)"),
    ],
)
def test_a_qwen3_moe_config_the_weight_list_cannot_follow_is_refused(
    changes: dict[str, Any], message: str, tmp_path: Path
) -> None:
    """Qwen3-MoE: dense layers only first, MoE in every other layer, experts >= 1."""
    config = {**LLAMA, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4,
              "num_experts_per_tok": 2, "moe_intermediate_size": 8, **changes}  # fmt: skip
    with pytest.raises(TopologyError, match=message):
        read_model_config(_write(tmp_path, config))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"q_lora_rank": None}, r"key 'q_lora_rank' must be a positive int, got None"),
        ({"moe_layer_freq": 2}, r"key 'moe_layer_freq' must be 1 for DeepseekV3ForCausalLM"),
    ],
)
def test_a_deepseek_config_the_weight_list_cannot_follow_is_refused(
    changes: dict[str, Any], message: str, tmp_path: Path
) -> None:
    """DeepSeek-V3 without q_lora_rank (V2-Lite's q_proj) or with sparse MoE layers is refused."""
    with pytest.raises(TopologyError, match=message):
        read_model_config(_write(tmp_path, {**KIMI_K2, **changes}))


def test_a_folder_reads_its_config_json(tmp_path: Path) -> None:
    """A folder holding config.json reads as the file; a file that is not JSON is refused."""
    _write(tmp_path, LLAMA)
    assert read_model_config(tmp_path) == read_model_config(tmp_path / "config.json")
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(TopologyError, match=r"config.json '.*' is not valid JSON"):
        read_model_config(str(tmp_path))


def test_hf_weight_roles_are_checked() -> None:
    """An HFWeight with a role outside ROLES is refused, naming the roles."""
    param = weights(Architecture(1, 8, 16, 6, 2, 1, 4))[0]
    with pytest.raises(TopologyError, match=r"HFWeight.role must be one of embedding, lm_head"):
        HFWeight("x", (16, 8), 2, "qkv", param, ((0, 0, 16),))
    with pytest.raises(TopologyError, match=r"kv_b, got 'qkv'$"):
        HFWeight("x", (16, 8), 2, "qkv", param, ((0, 0, 16),))


@pytest.mark.parametrize("itemsize", [0, "2", 2.0])
def test_a_bad_itemsize_is_named(itemsize: object) -> None:
    with pytest.raises(TopologyError, match=r"^itemsize must be a positive int, got "):
        hf_weights("llama-7b", itemsize)  # type: ignore[arg-type]


def test_models_whose_weights_share_a_shape_keep_their_own_blocks() -> None:
    """Two models whose fused q/k/v weights have one shape but different head groups (4 query
    heads in 2 groups, 6 in 1; head_dim 2): each weight's tensors and kind are its own model's,
    whichever model was asked first."""
    first, second = Architecture(1, 8, 16, 6, 4, 2, 2), Architecture(1, 8, 16, 6, 6, 1, 2)
    qkv = [weights(model)[2] for model in (first, second)]
    assert qkv[0].shape == qkv[1].shape and qkv[0].name == qkv[1].name
    for model, param in zip((first, second), qkv, strict=True):
        listed = [w for w in hf_weights(model) if w.param.name == param.name]
        assert hf_tensors(model, param) == listed
        assert hf_kind(model, param) == tuple((w.role, w.shape, w.blocks) for w in listed)
    assert hf_kind(first, qkv[0]) != hf_kind(second, qkv[1])


def test_a_kind_is_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tensors of the first weight of a kind are made checked, once; every later weight of
    that kind (another layer's) takes them as siblings, and its kind is the first's, the same
    object: a model's tens of thousands of weights cost a few checked records."""
    import topology._transfer.hf_weights as module

    model = Architecture(3, 8, 16, 6, 4, 2, 2)  # used by no other test: its memos are empty
    made: list[str] = []
    real = module.HFWeight

    def counted(name: str, *args: Any) -> Any:
        made.append(name)
        return real(name, *args)

    monkeypatch.setattr(module, "HFWeight", counted)
    qkv = [p for p in weights(model) if p.name.endswith("linear_qkv.weight")]
    assert hf_tensors(model, qkv[0]) and len(made) == 3  # q, k and v
    assert hf_kind(model, qkv[1]) is hf_kind(model, qkv[2])
    third = hf_tensors(model, qkv[2])[0]
    assert third.name == "model.layers.2.self_attn.q_proj.weight" and third.param == qkv[2]
    assert len(made) == 3


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"family": "gpt2"}, r"Architecture.family must be one of llama, qwen2, qwen3, "),
        ({"qkv_bias": 1}, r"Architecture.qkv_bias must be True or False, got 1 \(int\)"),
        ({"router_bias": True}, r"router_bias needs experts > 1, got experts \(1\)"),
        ({"qk_norm": True, "mla": (1, 1, 1, 1, 1)}, r"qkv_bias and qk_norm need grouped-query"),
    ],
)
def test_an_invalid_new_field_is_refused(changes: dict[str, Any], message: str) -> None:
    """The fields the weight lists need are checked like the others."""
    with pytest.raises(TopologyError, match=message):
        Architecture(1, 8, 16, 6, 2, 1, 4, **changes)


def test_transfer_takes_a_config_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`transfer --model DIR` plans the config's model; a bad config is exit 2, one line."""
    _write(tmp_path, {**LLAMA, "tie_word_embeddings": True})
    args = ["transfer", "--from", "tp=2", "--to", "tp=4", "-w", "8", "--model", str(tmp_path)]
    assert main(args) == 0
    assert "weights 14," in capsys.readouterr().out  # 1 + 2 layers * 6 + final norm
    _write(tmp_path, {**LLAMA, "num_key_value_heads": 3})
    assert main(args) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "kv_heads (3) must divide heads (4)" in error
    missing = [*args[:-1], str(tmp_path / "nope.json")]
    assert main(missing) == 2
    assert "cannot read config.json" in capsys.readouterr().err


def test_the_cost_commands_take_a_config_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`simulate --model DIR` costs the config's model with its shapes' sum as its count."""
    from topology._cli.common import cost_model_from_arg

    _write(tmp_path, {**LLAMA, "architectures": ["MixtralForCausalLM"], "num_local_experts": 4,
                      "num_experts_per_tok": 2})  # fmt: skip
    model = cost_model_from_arg(str(tmp_path))
    listed = weights(read_model_config(tmp_path))
    assert model.parameters == sum(p.nbytes // p.itemsize for p in listed)
    assert model.expert_parameters == sum(
        p.nbytes // p.itemsize for p in listed if p.expert is not None
    )
    assert (model.experts, model.top_k, model.layers) == (4, 2, 2)
    assert (
        attrs.evolve(cost_model_from_arg(str(tmp_path / "config.json")), name=model.name) == model
    )
    args = ["simulate", "-w", "8", "--tp", "2", "--gpus-per-node", "8", "--model", str(tmp_path)]
    assert main(args) == 0
    assert " ".join(capsys.readouterr().out.split()).startswith(f"{tmp_path} on h100")  # folded
    _write(tmp_path, {"architectures": ["BertModel"]})
    assert main(args) == 2
    assert "not a family this reads" in capsys.readouterr().err


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """A small config.json of any family, with its optional keys present or absent."""
    family = draw(st.sampled_from(list(FAMILIES.values())))
    groups = draw(st.integers(1, 3))
    heads = groups * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 3))
    config: dict[str, Any] = {
        "architectures": [family.hf_class],
        "num_hidden_layers": layers,
        "hidden_size": heads * draw(st.integers(1, 4)),
        "vocab_size": draw(st.integers(1, 9)),
        "num_attention_heads": heads,
        "num_key_value_heads": groups,
        "intermediate_size": draw(st.integers(1, 5)),
        "num_experts_per_tok": 1,
        "moe_intermediate_size": draw(st.integers(1, 4)),
        "n_routed_experts": draw(st.integers(2, 4)),
        "num_local_experts": draw(st.integers(2, 4)),
        "first_k_dense_replace": draw(st.integers(0, layers)),
        "n_shared_experts": draw(st.none() | st.integers(0, 2)),
        "mlp_only_layers": list(range(draw(st.integers(0, layers)))),
        **{key: draw(st.integers(1, 4)) for key in ("q_lora_rank", "kv_lora_rank")},
        **{key: draw(st.integers(1, 4)) for key in ("qk_nope_head_dim", "qk_rope_head_dim")},
        "v_head_dim": draw(st.integers(1, 4)),
    }
    if draw(st.booleans()):
        config["tie_word_embeddings"] = draw(st.booleans())
    if draw(st.booleans()):
        config["head_dim"] = draw(st.integers(1, 4))
    return config


@given(configs())
def test_every_generated_config_reads_and_maps_row_for_row(config: dict[str, Any]) -> None:
    """A config of any family reads to its family; its HF list covers Megatron's rows once."""
    from topology._architecture.config import model_from_config

    model = model_from_config(config)
    family = next(f for f in FAMILIES.values() if f.hf_class == config["architectures"][0])
    assert model.family == family.name
    assert model.tied_embeddings is config.get("tie_word_embeddings", False)
    assert (model.layers, model.vocab, model.heads) == (
        config["num_hidden_layers"], config["vocab_size"], config["num_attention_heads"],
    )  # fmt: skip
    if family.name == "deepseek_v3":
        shared = (config["n_shared_experts"] or 0) * config["moe_intermediate_size"]
        assert (model.shared_ffn, model.dense_layers) == (shared, config["first_k_dense_replace"])
    elif family.name == "qwen2":
        assert model.head_dim == config.get("head_dim", config["hidden_size"] // model.heads)
    covered = {p.name: [0] * p.shape[0] for p in weights(model)}
    for w in hf_weights(model):
        for _, param_row, rows in w.blocks:
            for i in range(param_row, param_row + rows):
                covered[w.param.name][i] += 1
    assert all(c == [1] * len(c) for c in covered.values())


def test_absent_optional_keys_take_their_defaults() -> None:
    """No tie key: untied; no first_k_dense_replace, null n_shared_experts: 0; either spelling
    of Qwen3-MoE's expert count."""
    from topology._architecture.config import model_from_config

    deepseek = {k: v for k, v in KIMI_K2.items() if k not in ("first_k_dense_replace",)}
    row = model_from_config({**deepseek, "n_shared_experts": None})
    assert (row.dense_layers, row.shared_ffn, row.tied_embeddings) == (0, 0, False)
    qwen = {**LLAMA, "architectures": ["Qwen3MoeForCausalLM"], "num_experts_per_tok": 2,
            "moe_intermediate_size": 8}  # fmt: skip
    assert model_from_config({**qwen, "num_experts": 4}) == model_from_config(
        {**qwen, "num_local_experts": 4}
    )
    assert model_from_config({**qwen, "num_experts": 4}).experts == 4
