"""One rank of a refit (``topology.refit_rank``) and the engine's per-tensor metadata
(``Refit.table``), and both in ``topology transfer --to engine=... --rank R`` / ``--json``.

Laws: a rank planned alone equals its part of the whole refit (operations, landing boxes, local
tensors), for every rank both sides span; the metadata table, expanded rank by rank, is what
the engine's rules (``holding``) give each rank for each Hugging Face tensor, computed here
tensor by tensor with no sharing between tensors, and its local shapes are the refit's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.test_cli_inputs import invoke
from tests.test_cli_json_schema import _assert_valid
from tests.test_refit import ENGINES, SOURCES, models
from topology import (
    Architecture,
    RankRefit,
    Refit,
    Topology,
    TopologyError,
    read_model_config,
    refit,
    refit_rank,
    weights,
)
from topology._engine.rules import holding
from topology._refit.target import engine_name


def _ranks(runs: list[list[int]]) -> list[int]:
    return [r for start, stop, step in runs for r in range(start, stop, step)]


@settings(max_examples=40, suppress_health_check=[HealthCheck.filter_too_much])
@given(models(), st.sampled_from(SOURCES), st.sampled_from(ENGINES), st.booleans())
def test_each_rank_alone_equals_its_part_of_the_whole_refit(
    model: Architecture, src: Topology, engine: str, apart: bool
) -> None:
    """refit_rank(r) == refit(...).for_rank(r) for every rank, with the same boxes for each
    receive and, on an engine rank, the same local tensors."""
    offset = src.world_size if apart else 0
    try:
        whole = refit(src, engine, model, rank_offset=offset)
    except TopologyError:
        assume(False)
        raise
    for rank in range(max(src.world_size, offset + whole.engine.world_size)):
        alone = refit_rank(src, engine, model, rank, rank_offset=offset)
        part = whole.for_rank(rank)
        assert isinstance(alone, RankRefit)
        assert alone == part and alone.rank == rank
        assert alone.sends == whole.sends(rank) and alone.recvs == whole.recvs(rank)
        assert [alone.boxes(op) for op in alone.recvs] == [whole.boxes(op) for op in part.recvs]
        if offset <= rank < offset + whole.engine.world_size:
            assert alone.tensors() == whole.tensors(rank)
        else:
            assert alone.tensors() == {}


@pytest.mark.parametrize("engine", ["engine=vllm,tp=2,dp=2", "engine=vllm,tp=2,dp=2,ep=4"])
def test_each_rank_alone_equals_its_part_of_the_relayed_refit(engine: str) -> None:
    """With the relay step (hosts of 2 GPUs: the engine's dp replicas share hosts with
    receivers of the same pieces), refit_rank(r, relay=True) is the relayed refit's for_rank(r),
    relay copies included."""
    from topology import Allocation, Host

    model = Architecture(2, 16, 64, 32, 4, 2, 4, experts=4, top_k=2, moe_ffn=16)
    src = Topology(2, tp=2)
    hosts = Allocation([Host(f"h{i}", 2) for i in range(3)])
    whole = refit(src, engine, model, rank_offset=2, allocation=hosts, relay=True)
    assert whole.plan.stats["relay_ops"] > 0
    for rank in range(6):
        alone = refit_rank(src, engine, model, rank, rank_offset=2, allocation=hosts, relay=True)
        assert alone == whole.for_rank(rank)


@settings(max_examples=40, suppress_health_check=[HealthCheck.filter_too_much])
@given(models(), st.sampled_from(ENGINES), st.integers(0, 3))
def test_the_table_lists_what_the_rules_give_every_rank(
    model: Architecture, engine: str, offset: int
) -> None:
    """Every (rank, tensor) of the table, expanded, is exactly what ``holding`` gives that rank
    for that tensor (its local tensor, the local shape the refit lists, its pieces); a rank the
    rules give nothing (another rank's expert, padding only) is in no entry."""
    try:
        plan = refit(Topology(1), engine, model, rank_offset=offset)
    except TopologyError:
        assume(False)
        raise
    table = plan.table()
    names = [t["name"] for t in table]
    assert len(names) == len(set(names))
    layout = plan.engine
    for entry, hf in zip(table, plan.target.weights, strict=True):
        assert (entry["name"], entry["shape"]) == (hf.name, list(hf.shape))
        assert entry["dtype"] == "bfloat16"
        listed: dict[int, Any] = {}
        for holder in entry["holders"]:
            for rank in _ranks(holder["ranks"]):
                assert rank not in listed
                listed[rank] = (holder["tensor"], holder["shape"], holder["pieces"])
        expected = {}
        for rank in range(layout.world_size):
            held = holding(layout, hf.role, hf.shape, model, rank, hf.expert)
            if held.pieces:
                pieces = [
                    {"from": [list(d) for d in p.source], "to": [list(d) for d in p.target]}
                    for p in held.pieces
                ]
                local = engine_name(hf.name, held.param)
                assert plan.tensors(rank + offset)[local] == held.shape
                expected[rank + offset] = (local, list(held.shape), pieces)
        assert listed == expected


SMALL_MIXTRAL = {
    "architectures": ["MixtralForCausalLM"],
    "model_type": "mixtral",
    "hidden_size": 64,
    "intermediate_size": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 100,
    "tie_word_embeddings": False,
}
"""A two-layer Mixtral config (``--model PATH``): the plans stay small."""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The CLI arguments: the small Mixtral from tp 2 x ep 2 into vLLM tp 2 x dp 2 x ep 4 on
    the next four ranks."""
    path = tmp_path_factory.mktemp("model") / "config.json"
    path.write_text(json.dumps(SMALL_MIXTRAL), encoding="utf-8")
    return [
        "--model",
        str(path),
        "--from",
        "tp=2,ep=2,etp=1",
        "-w",
        "4",
        "--to",
        "engine=vllm,tp=2,dp=2,ep=4",
        "--to-offset",
        "4",
    ]


def _whole(args: list[str]) -> Refit:
    return refit(
        Topology(4, tp=2, ep=2, etp=1),
        "engine=vllm,tp=2,dp=2,ep=4",
        read_model_config(args[1]),
        rank_offset=4,
    )


def _json(*argv: str) -> dict[str, Any]:
    code, out, err = invoke(*argv, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert isinstance(data, dict)
    _assert_valid("transfer", data)
    return data


def test_the_cli_plans_one_rank_into_an_engine(small: list[str]) -> None:
    """--rank R into an engine: R's operations as the whole refit's for_rank(R), each receive
    with the boxes it fills; the params table is the refit's; --summary counts them."""
    whole = _whole(small)
    for rank in (1, 6):
        data = _json("transfer", *small, "--rank", str(rank))
        part = whole.for_rank(rank)
        assert data["rank"] == rank and "stats" not in data
        expected = [op.to_dict() for op in part.sends] + [
            {
                **op.to_dict(),
                "into": [{"tensor": n, "box": [list(d) for d in b]} for n, b in whole.boxes(op)],
            }
            for op in part.recvs
        ]
        assert data["ops"] == expected
        assert data["params"] == whole.table()
    summary = _json("transfer", *small, "--rank", "6", "--summary")
    assert summary["ops"] == len(whole.for_rank(6).ops) > 0
    code, out, err = invoke("transfer", *small, "--rank", "6")
    assert code == 0, err
    words = " ".join(out.split())
    assert f"receives {len(whole.recvs(6)):,}" in words and "engine=vllm tp=2 dp=2" in words


def test_the_whole_refit_json_carries_the_engine_table(small: list[str]) -> None:
    """--json into an engine lists the engine's per-tensor metadata under params."""
    data = _json("transfer", *small, "--summary")
    whole = _whole(small)
    assert data["params"] == whole.table()
    w1 = next(
        t
        for t in data["params"]
        if t["name"].endswith("layers.0.block_sparse_moe.experts.0.w1.weight")
    )
    # expert 0 of 8 over ep 4: engine rank 0 (world 4) alone, slot 0, the gate half of w13
    assert w1["holders"] == [
        {
            "ranks": [[4, 5, 1]],
            "tensor": "model.layers.0.block_sparse_moe.experts.w13_weight",
            "shape": [2, 2 * 32, 64],
            "pieces": [{"from": [[0, 32], [0, 64]], "to": [[0, 1], [0, 32], [0, 64]]}],
        }
    ]


def _calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[str]:
    """From now on, each call of ``module.name`` (two arguments), by the name of its second."""
    calls: list[str] = []
    real = getattr(module, name)

    def counted(first: Any, second: Any) -> Any:
        calls.append(second.name)
        return real(first, second)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_the_table_works_out_each_class_of_tensors_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The holders of a tensor follow from its role, shape and routed expert alone: the table
    works them out once per such class (Llama's 2 layers share every layer tensor's), and two
    tensors of a class list the same holders."""
    import topology._refit.metadata as metadata

    model = Architecture(2, 16, 64, 32, 4, 2, 4)
    plan = refit(Topology(1), "engine=vllm,tp=2", model)
    calls = _calls(monkeypatch, metadata, "_holders")
    table = plan.table()
    kinds = {(hf.role, hf.shape, hf.expert) for hf in plan.target.weights}
    assert len(calls) == len(kinds) < len(table)
    by_name = {t["name"]: t["holders"] for t in table}
    for layer in ("q_proj", "k_proj", "o_proj"):
        first, second = (f"model.layers.{i}.self_attn.{layer}.weight" for i in (0, 1))
        assert [h["ranks"] for h in by_name[first]] == [h["ranks"] for h in by_name[second]]


def test_one_rank_makes_the_tensors_of_its_own_weights_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rank's refit keys every weight by its kind (``hf_kind``) and makes Hugging Face tensors
    only for one weight of each class it places (Llama's 4 layers share every layer weight's),
    then for the weights whose boxes it is asked for: never the whole list
    (``EngineTarget.weights``), which ``tensors()`` and the table read."""
    import topology._refit.target as target_module

    model = Architecture(4, 16, 64, 32, 4, 2, 4)
    made = _calls(monkeypatch, target_module, "hf_tensors")
    mine = refit_rank(Topology(2, pp=2), "engine=vllm,tp=2", model, 2, rank_offset=2)
    assert "weights" not in vars(mine.target)
    layers = {p.name: p.layer for p in weights(model)}
    assert made and {layers[name] for name in made} <= {None, 0}
    names = {op.param.name for op in mine.recvs}
    assert names == {p.name for p in weights(model)}
    for op in mine.recvs:
        mine.boxes(op)
    assert set(made) == names and "weights" not in vars(mine.target)
    assert mine.tensors() and "weights" in vars(mine.target)
