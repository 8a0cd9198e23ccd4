"""The Hugging Face side of the weight list against real checkpoints: for a tiny model of each
family, built by ``transformers`` on CPU and written by ``save_pretrained``, the names and shapes
of ``topology.hf_weights`` are the file's, and the mapping carries its tensors into Megatron's
fused weights and back bit for bit.

transformers 5 fuses experts in memory (``experts.gate_up_proj``) and splits them on save, so the
reference is the saved file's safetensors header, never the in-memory ``state_dict``.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import pytest
import torch

from topology import Architecture, hf_weights, read_model_config, weights


def _transformers() -> Any:
    """transformers, or a skip (a failure under CI, where it must be installed)."""
    try:
        import transformers
    except ImportError as error:
        if os.environ.get("CI"):
            pytest.fail(f"transformers must be installed in CI (the test extra): {error}")
        pytest.skip("transformers is not installed")
    return transformers


BASE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "vocab_size": 128,
    "intermediate_size": 96,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}

# Each family: its model_type and the config keys beyond BASE (a tiny model of that family).
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", {}),
    "llama-tied": ("llama", {"tie_word_embeddings": True, "num_key_value_heads": 1}),
    "qwen2-tied": ("qwen2", {"tie_word_embeddings": True}),
    "qwen3": ("qwen3", {"head_dim": 24, "num_key_value_heads": 4}),
    "qwen3-moe": (
        "qwen3_moe",
        {**MOE, "num_hidden_layers": 3, "num_experts": 4, "mlp_only_layers": [0], "head_dim": 8},
    ),
    "mixtral": ("mixtral", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    "deepseek-v3": (
        "deepseek_v3",
        {
            **MOE,
            "num_hidden_layers": 3,
            "num_key_value_heads": 4,
            "n_routed_experts": 4,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "q_lora_rank": 24,
            "kv_lora_rank": 16,
            "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 4,
            "v_head_dim": 12,
            "n_group": 1,
            "topk_group": 1,
        },
    ),
}


def _header(folder: Path) -> dict[str, Any]:
    """The safetensors header of ``folder/model.safetensors`` (8-byte length, then JSON)."""
    with open(folder / "model.safetensors", "rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header: dict[str, Any] = json.loads(file.read(length))
    header.pop("__metadata__", None)
    return header


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One saved tiny checkpoint per family (built once for the module)."""
    transformers = _transformers()
    saved = {}
    for name, (model_type, keys) in FAMILIES.items():
        config = transformers.AutoConfig.for_model(model_type, **{**BASE, **keys})
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(config)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        saved[name] = folder
    return saved


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_names_and_shapes_are_the_checkpoints(name: str, checkpoints: dict[str, Path]) -> None:
    """hf_weights of the saved config.json lists exactly the file's tensors, shapes and sizes."""
    folder = checkpoints[name]
    header = _header(folder)
    listed = hf_weights(read_model_config(folder), itemsize=4)
    assert {w.name: list(w.shape) for w in listed} == {k: v["shape"] for k, v in header.items()}
    assert len({w.name for w in listed}) == len(listed)
    assert {v["dtype"] for v in header.values()} == {"F32"}


def test_the_configs_read_as_their_families(checkpoints: dict[str, Path]) -> None:
    """Each saved config reads to its family with the features its tensors need."""
    rows = {name: read_model_config(folder) for name, folder in checkpoints.items()}
    assert {name: row.family for name, row in rows.items()} == {
        "llama": "llama",
        "llama-tied": "llama",
        "qwen2-tied": "qwen2",
        "qwen3": "qwen3",
        "qwen3-moe": "qwen3_moe",
        "mixtral": "mixtral",
        "deepseek-v3": "deepseek_v3",
    }
    assert rows["qwen2-tied"].tied_embeddings and rows["qwen2-tied"].qkv_bias
    assert rows["qwen3"].qk_norm and rows["qwen3"].head_dim == 24
    assert (rows["qwen3-moe"].dense_layers, rows["qwen3-moe"].experts) == (1, 4)
    deepseek = rows["deepseek-v3"]
    assert (deepseek.dense_layers, deepseek.shared_ffn, deepseek.router_bias) == (1, 32, True)
    assert deepseek.mla == (24, 16, 8, 4, 12)


def _to_megatron(model: Architecture, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Megatron's weights built from Hugging Face tensors by the mapping; each row set once."""
    params = {p.name: p for p in weights(model, 4)}
    built = {name: torch.empty(p.shape) for name, p in params.items()}
    filled = {name: torch.zeros(p.shape[0], dtype=torch.int64) for name, p in params.items()}
    for w in hf_weights(model, 4):
        for hf_row, param_row, rows in w.blocks:
            built[w.param.name][param_row : param_row + rows] = tensors[w.name][
                hf_row : hf_row + rows
            ]
            filled[w.param.name][param_row : param_row + rows] += 1
    assert all(bool((count == 1).all()) for count in filled.values())
    return built


def _to_hf(model: Architecture, megatron: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Hugging Face tensors cut back out of Megatron's weights by the mapping."""
    out = {}
    for w in hf_weights(model, 4):
        tensor = torch.empty(w.shape)
        for hf_row, param_row, rows in w.blocks:
            tensor[hf_row : hf_row + rows] = megatron[w.param.name][param_row : param_row + rows]
        out[w.name] = tensor
    return out


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_checkpoint_round_trips_through_megatron(
    name: str, checkpoints: dict[str, Path]
) -> None:
    """The file's tensors -> Megatron's fused weights -> Hugging Face tensors, bitwise equal."""
    from safetensors.torch import load_file

    folder = checkpoints[name]
    model = read_model_config(folder)
    tensors = load_file(folder / "model.safetensors")
    megatron = _to_megatron(model, tensors)
    assert {n: tuple(t.shape) for n, t in megatron.items()} == {
        p.name: p.shape for p in weights(model, 4)
    }
    back = _to_hf(model, megatron)
    assert back.keys() == tensors.keys()
    assert all(torch.equal(back[n], tensors[n]) for n in tensors)


def test_megatrons_qkv_interleaves_query_groups(checkpoints: dict[str, Path]) -> None:
    """linear_qkv rows of group g are [q heads of g; k_g; v_g] (heads 4, groups 2, head_dim 16)."""
    from safetensors.torch import load_file

    folder = checkpoints["llama"]
    model = read_model_config(folder)
    tensors = load_file(folder / "model.safetensors")
    qkv = _to_megatron(model, tensors)["decoder.layers.0.self_attention.linear_qkv.weight"]
    at = "model.layers.0.self_attn."
    q, k, v = (tensors[f"{at}{x}_proj.weight"] for x in "qkv")
    expected = torch.cat(
        [
            torch.cat(
                [q[g * 32 : (g + 1) * 32], k[g * 16 : (g + 1) * 16], v[g * 16 : (g + 1) * 16]]
            )
            for g in range(2)
        ]
    )
    assert torch.equal(qkv, expected)
