"""The Hugging Face <-> Megatron name mapping against Megatron-Bridge's own (issue 32: "the mapping
agrees with Megatron-Bridge's").

Megatron-Bridge 0.6.2 (``megatron-bridge`` on PyPI) declares, per model family, which Megatron-core
parameter each Hugging Face tensor becomes: ``AutoMapping(megatron_param=..., hf_param=...)``
(one to one, also written as a ``param_mappings`` dict), ``QKVMapping(megatron_param, q, k, v)``
(q, k and v fused into ``linear_qkv``), ``GatedMLPMapping(megatron_param, gate, up)``; ``*`` in a
Megatron pattern stands for a number (a layer, an expert), filled into the Hugging Face patterns in
order. Its wheel needs Python 3.12 and imports megatron-core 0.19 at the top, so it does not import
here: ``scripts/setup.sh`` unpacks it into ``.venv/oracles/megatron-bridge-0.6.2`` and this test
reads each family's mapping table from its source with :mod:`ast` (string constants only; the
f-string MTP entries are not among our weights). Every tensor of ours, for any model of a family
Bridge has, must be one of Bridge's mappings of its Megatron parameter, under the key its role
names (q, k, v, gate, up). Mixtral has no bridge in 0.6.2 (it is checked against ``GPTModel`` and
``save_pretrained`` elsewhere). Without the oracle folder the test skips, except under ``CI`` where
it fails.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.required import missing
from tests.test_hf_weights import architectures
from topology import Architecture, HFWeight, hf_weights
from topology._architecture.families import FAMILIES
from topology._architecture.presets import ARCHITECTURES

ORACLE = (
    Path(__file__).resolve().parent.parent
    / ".venv/oracles/megatron-bridge-0.6.2/megatron/bridge/models"
)
SOURCES = {
    "llama": ("llama/llama_bridge.py", "llama/llama_bridge.py", "mapping_registry"),
    "qwen2": ("qwen/qwen2_bridge.py", "qwen/qwen2_bridge.py", "mapping_registry"),
    "qwen3": ("qwen/qwen3_bridge.py", "qwen/qwen3_bridge.py", "mapping_registry"),
    "qwen3_moe": ("qwen/qwen3_moe_bridge.py", "qwen/qwen3_moe_bridge.py", "mapping_registry"),
    "deepseek_v3": (
        "deepseek/deepseek_v3_bridge.py",
        "deepseek/common.py",
        "get_common_mapping_list",
    ),
}
"""Per family: the file registering its bridge (``model_type``), and the file and function
holding its mapping table (DeepSeek-V3's ``mapping_registry`` returns the common list)."""
KEYS = {
    "q": "q",
    "k": "k",
    "v": "v",
    "gate": "gate",
    "up": "up",
    "expert_gate": "gate",
    "expert_up": "up",
    "shared_gate": "gate",
    "shared_up": "up",
}
"""The key of Bridge's fused mappings each of our roles fills (the others: ``hf_param``)."""

Mapping = tuple[re.Pattern[str], dict[str, str]]


def _oracle() -> Path:
    if not (ORACLE / "deepseek" / "common.py").exists():
        reason = f"megatron-bridge 0.6.2 is not unpacked at {ORACLE}; scripts/setup.sh does it"
        missing("the Megatron-Bridge differential test", reason)
    return ORACLE


def _model_type(tree: ast.Module) -> str | None:
    """The ``model_type=`` of the file's ``register_bridge`` decorator."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "register_bridge":
            for kw in node.keywords:
                if kw.arg == "model_type" and isinstance(kw.value, ast.Constant):
                    return str(kw.value.value)
    return None


def _strings(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@cache
def bridge_mappings(family: str) -> list[Mapping]:
    """Bridge's mapping table of ``family``: a regex of each Megatron pattern (``*`` a number)
    and the Hugging Face patterns by key."""
    registering, holding, function = SOURCES[family]
    root = _oracle()
    assert _model_type(ast.parse((root / registering).read_text())) == family
    tree = ast.parse((root / holding).read_text())
    body = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == function
    )
    found: list[tuple[str, dict[str, str]]] = []
    for node in ast.walk(body):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and [getattr(t, "id", None) for t in node.targets] == ["param_mappings"]
        ):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                megatron, hf = _strings(key) if key else None, _strings(value)
                if megatron and hf:
                    found.append((megatron, {"hf_param": hf}))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "").endswith("Mapping"):
            named = {kw.arg: _strings(kw.value) for kw in node.keywords if kw.arg}
            megatron = named.pop("megatron_param", None)
            if megatron and named and all(named.values()):
                found.append((megatron, {k: v for k, v in named.items() if v}))
    assert len(found) >= 8, f"{holding}: only {len(found)} mappings read; has the source changed?"
    return [
        (re.compile(re.escape(megatron).replace(r"\*", r"(\d+)")), hf) for megatron, hf in found
    ]


def _fill(pattern: str, numbers: tuple[str, ...]) -> str:
    parts = pattern.split("*")
    assert len(parts) == len(numbers) + 1, (pattern, numbers)
    return "".join(p + n for p, n in zip(parts, (*numbers, ""), strict=True))


@cache
def bridge_names(family: str, megatron: str) -> set[tuple[str, str]]:
    """``(key, Hugging Face name)`` of every Bridge mapping of the Megatron parameter."""
    names = set()
    for regex, hf in bridge_mappings(family):
        match = regex.fullmatch(megatron)
        if match:
            for key, pattern in hf.items():
                if pattern.count("*") == len(match.groups()):
                    names.add((key, _fill(pattern, match.groups())))
    return names


def disagreements(family: str, listed: list[HFWeight]) -> list[str]:
    """The tensors of ``listed`` that Bridge maps otherwise (empty: the mappings agree): a fused
    tensor must be under the key its role names, any other under ``hf_param``."""
    out = []
    for w in listed:
        names = bridge_names(family, w.param.name)
        if (KEYS.get(w.role, "hf_param"), w.name) not in names and (
            "hf_param",
            w.name,
        ) not in names:
            out.append(f"{w.param.name} -> {w.name} ({w.role}): Bridge has {sorted(names)}")
    return out


def as_family(model: Architecture, family: str) -> Architecture:
    """``model`` with only what ``family``'s ``config.json`` can say (the reader's ``reads`` of
    that family): biases and q/k norms as the family has them, experts, shared experts, router
    bias and MLA only where it reads them. DeepSeek-V3 always has MLA; a Qwen3-MoE model has
    experts and no dense layers (``mlp_only_layers``, which Bridge 0.6.2 does not map)."""
    reads = {r.field: r for r in FAMILIES[family].reads}
    fixed = {f: bool(reads[f].default) if f in reads else False for f in FIXED}
    changes: dict[str, Any] = {"family": family, **fixed}
    if "experts" not in reads or (model.experts == 1 and family != "qwen3_moe"):
        changes.update(experts=1, moe_ffn=0, dense_layers=0, shared_ffn=0, router_bias=False)
    if "shared_ffn" not in reads:
        changes.update(shared_ffn=0)
    if family == "qwen3_moe":
        changes.update(dense_layers=0, experts=max(model.experts, 2), moe_ffn=model.moe_ffn or 1)
    if "mla" not in reads:
        changes.update(mla=None)
    elif model.mla is None:
        changes.update(mla=(1, 2, 1, 1, 1))
    return attrs.evolve(model, **changes)


FIXED = ("qkv_bias", "qk_norm", "router_bias")
"""Features a family has or lacks as a whole (its reader's fixed ``reads``)."""


@given(st.builds(as_family, architectures(), st.sampled_from(sorted(SOURCES))))
def test_every_tensor_maps_as_megatron_bridge_maps_it(model: Architecture) -> None:
    """Any small model of a family Bridge has: GQA with or without bias and q/k norms, tied
    embeddings, MoE with shared experts and router bias, MLA, dense first layers."""
    assert disagreements(model.family, hf_weights(model)) == []


@pytest.mark.parametrize("preset", ["llama-7b", "deepseek-v3"])
def test_the_shipped_configs_map_as_megatron_bridge_maps_them(preset: str) -> None:
    """Llama-2 7B and DeepSeek-V3 (61 layers, 3 dense, 256 routed experts) in full."""
    model = ARCHITECTURES[preset]
    assert disagreements(model.family, hf_weights(model)) == []


def test_a_wrong_mapping_is_caught() -> None:
    """Bridge's table as read, and the check failing where ours would differ (gate and up
    swapped, a norm on the wrong Megatron weight)."""
    listed = hf_weights(ARCHITECTURES["llama-7b"])
    swapped = [
        attrs.evolve(w, role={"gate": "up", "up": "gate"}.get(w.role, w.role)) for w in listed
    ]
    assert len(disagreements("llama", swapped)) == 2 * 32
    norm = next(w for w in listed if w.name == "model.layers.0.input_layernorm.weight")
    fc1 = next(w for w in listed if w.name == "model.layers.0.mlp.gate_proj.weight")
    moved = attrs.evolve(norm, param=attrs.evolve(norm.param, name=fc1.param.name))
    assert disagreements("llama", [moved]) != []
    q = bridge_names("llama", "decoder.layers.2.self_attention.linear_qkv.weight")
    assert ("q", "model.layers.2.self_attn.q_proj.weight") in q
    assert ("k", "model.layers.2.self_attn.q_proj.weight") not in q
    norms = bridge_names("qwen3_moe", "decoder.layers.0.pre_mlp_layernorm.weight")
    assert norms == {("hf_param", "model.layers.0.post_attention_layernorm.weight")}
    experts = bridge_names(
        "deepseek_v3", "decoder.layers.5.mlp.experts.local_experts.7.linear_fc1.weight"
    )
    assert experts == {
        ("gate", "model.layers.5.mlp.experts.7.gate_proj.weight"),
        ("up", "model.layers.5.mlp.experts.7.up_proj.weight"),
    }
