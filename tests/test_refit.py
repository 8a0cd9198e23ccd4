"""Refit into an engine (``topology.refit``): laws over generated models and engine layouts.

Every element is followed symbolically: an element of a Megatron weight is labelled by the
Hugging Face tensor element it holds (``hf_weights``' blocks); each engine rank's local tensors
must receive (or hold already, colocated) exactly the labels the engine's rules
(``topology._engine.rules.holding``) put there, each once, padding nothing; every sender holds what
it sends; the bounds hold. Then goldens and the CLI."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from topology import (
    Architecture,
    EngineLayout,
    Param,
    Refit,
    Topology,
    TopologyError,
    TransferOp,
    hf_weights,
    param_placement,
    refit,
)
from topology._architecture.families import FAMILIES
from topology._cli.main import main
from topology._engine.rules import holding
from topology._refit.target import EngineTarget, engine_name

SOURCES = (
    Topology(1),
    Topology(2, tp=2),
    Topology(4, tp=2, pp=2),
    Topology(4, pp=2, vpp=2),
    Topology(4, tp=2, ep=2),
    Topology(4, tp=2, ep=2, etp=1),
    Topology(8, tp=2, pp=2, ep=2),
    Topology(4, tp=2, gtp=2),
    Topology(4, tp=2, egtp=2),
)
"""Training layouts: tp, pp, vpp, experts (with and without expert tp) and Megatron's GTP."""

ENGINES = (
    "engine=vllm,tp=1",
    "engine=vllm,tp=2",
    "engine=vllm,tp=4",
    "engine=vllm,tp=2,dp=2",
    "engine=vllm,tp=2,dp=2,ep=4",
    "engine=vllm,tp=4,dp=2,ep=8",
    "engine=vllm,tp=4,ep=4,placement=round_robin",
    "engine=sglang,tp=4,ep=2",
    "engine=sglang,tp=2,dp=2",
    "engine=sglang,tp=4,dp=2,dp_attention=true",
    "engine=hf",
    "engine=hf,dp=2",
)
"""Engine layouts: vLLM with tp above the KV heads, dp, expert parallelism (more ranks than
experts, round robin), SGLang's ep inside tp and dp attention, and whole tensors."""


@st.composite
def models(draw: st.DrawFn) -> Architecture:
    """A small model every layout above can cut (heads, widths and experts multiples of the tp
    sizes): GQA (bias, q/k norms, ties) or MLA, dense or MoE (shared experts, router bias)."""
    kv = draw(st.sampled_from((1, 2, 4)))
    moe = draw(st.booleans())
    mla = draw(st.none() | st.tuples(*[st.integers(1, 3)] * 5))
    layers = draw(st.integers(1, 3))
    return Architecture(
        layers,
        draw(st.integers(1, 3)),
        2 * draw(st.integers(1, 5)),
        4 * draw(st.integers(1, 2)),
        4 * kv if draw(st.booleans()) else max(kv, 4),
        kv,
        draw(st.integers(1, 2)),
        experts=draw(st.sampled_from((2, 4, 8))) if moe else 1,
        moe_ffn=8 if moe else 0,
        dense_layers=draw(st.integers(0, layers)) if moe else 0,
        shared_ffn=draw(st.sampled_from((0, 4))) if moe else 0,
        mla=mla,
        tied_embeddings=draw(st.booleans()),
        qkv_bias=mla is None and draw(st.booleans()),
        qk_norm=mla is None and draw(st.booleans()),
        router_bias=moe and draw(st.booleans()),
        family=draw(st.sampled_from(list(FAMILIES))),
    )


Index = tuple[int, ...]


def _box(box: tuple[tuple[int, int], ...]) -> Iterator[Index]:
    return itertools.product(*(range(a, z) for a, z in box))


def _labels(plan: Refit) -> dict[str, dict[Index, tuple[str, Index]]]:
    """Each Megatron weight's elements, labelled by the Hugging Face element each holds."""
    found: dict[str, dict[Index, tuple[str, Index]]] = {}
    for h in hf_weights(plan.model):
        mine = found.setdefault(h.param.name, {})
        for hf_row, row, rows in h.blocks:
            for i in range(rows):
                for rest in itertools.product(*(range(n) for n in h.shape[1:])):
                    mine[(row + i, *rest)] = (h.name, (hf_row + i, *rest))
    return found


def _expected(plan: Refit, rank: int) -> dict[tuple[str, Index], tuple[str, Index]]:
    """What the rules put in engine rank ``rank``'s local tensors, each element once."""
    layout, found = plan.engine, {}
    shapes = plan.tensors(rank + plan.rank_offset)
    for h in hf_weights(plan.model):
        held = holding(layout, h.role, h.shape, plan.model, rank, h.expert)
        name = engine_name(h.name, held.param)
        if held.pieces:
            assert shapes[name] == held.shape
        for piece in held.pieces:
            for a, b in zip(_box(piece.source), _box(piece.target), strict=True):
                assert (name, b) not in found
                assert all(i < n for i, n in zip(b, held.shape, strict=True))
                found[name, b] = (h.name, a)
    return found


def _region(op: TransferOp) -> Iterator[Index]:
    """The weight's elements ``op`` moves, cut-dim index first."""
    param, cut = op.param, op.param.cut_dim
    spans = [range(n) for n in param.shape]
    spans[cut] = range(op.start, op.stop)
    if op.rows is not None:
        spans[0] = range(op.rows[0], op.rows[1])
    return itertools.product(*spans)


def _sender_holds(plan: Refit, op: TransferOp) -> None:
    """``op.src`` holds ``[start, stop)`` at ``src_start`` of its shard (and the rows)."""
    placement = param_placement(plan.plan.src, op.param, num_layers=plan.model.layers)
    shard = next(s for s in placement.shards if op.src in s.ranks)
    local = [g for lo, hi in shard.ranges for g in range(lo, hi)]
    n = op.stop - op.start
    assert local[op.src_start : op.src_start + n] == list(range(op.start, op.stop))
    if op.rows is not None:
        top = shard.rows[0] if shard.rows is not None else 0
        assert op.rows[2] == op.rows[0] - top
        assert shard.rows is None or op.rows[1] <= shard.rows[1]


def _received(
    plan: Refit, rank: int, labels: dict[str, dict[Index, tuple[str, Index]]]
) -> tuple[dict[tuple[str, Index], tuple[str, Index]], int]:
    """What engine rank ``rank`` gets from the plan (and holds, colocated), each element once,
    and the bytes it receives from others."""
    world = rank + plan.rank_offset
    found: dict[tuple[str, Index], tuple[str, Index]] = {}
    nbytes = 0
    for op in (*plan.recvs(world), *plan.held(world)):
        assert op.dst == world
        _sender_holds(plan, op)
        param, cut = op.param, op.param.cut_dim
        runs = plan.landing(param, world)
        if op.src != op.dst:
            nbytes += op.nbytes
        moved = set()
        for index in _region(op):
            p = op.dst_start + index[cut] - op.start
            run = next(r for r in runs if r.start <= p < r.stop)
            lead = run.dim - cut
            at = [box[0] for box in run.box[:lead]]
            for q, i in enumerate(index):
                at.append(run.box[lead + q][0] + (p - run.start if q == cut else i))
            key = (run.name, tuple(at))
            assert key not in found, key
            found[key] = labels[param.name][index]
            moved.add(key)
        boxes = {(name, i) for name, box in plan.boxes(op) for i in _box(box)}
        assert boxes == moved
        assert op.nbytes == len(moved) * param.itemsize
    return found, nbytes


@settings(max_examples=200, suppress_health_check=[HealthCheck.filter_too_much])
@given(
    models(),
    st.sampled_from(SOURCES),
    st.sampled_from(ENGINES),
    st.booleans(),
)
def test_every_engine_element_arrives_exactly_once_from_a_holder(
    model: Architecture, src: Topology, engine: str, apart: bool
) -> None:
    """Each engine rank's local tensors receive (or hold) exactly what the rules put there, the
    right Hugging Face element at each place, padding nothing; senders hold what they send; the
    totals add up and the bounds hold."""
    try:
        plan = refit(src, engine, model, rank_offset=src.world_size if apart else 0)
    except TopologyError:
        assume(False)
        raise
    labels = _labels(plan)
    total = 0
    for rank in range(plan.engine.world_size):
        found, nbytes = _received(plan, rank, labels)
        assert found == _expected(plan, rank)
        total += nbytes
    stats = plan.plan.stats
    assert stats["bytes_total"] == total == sum(op.nbytes for op in plan.plan.ops)
    assert stats["max_send_bytes"] >= stats["max_send_bound"]
    assert stats["max_recv_bytes"] >= stats["max_recv_bound"]
    assert stats["max_send_peers"] >= stats["max_send_peers_bound"]
    assert stats["max_recv_peers"] >= stats["max_recv_peers_bound"]
    if apart:
        assert not any(plan.held(r) for r in range(src.world_size))


LLAMA = Architecture(2, 16, 64, 32, 4, 2, 4)
MIXTRAL = Architecture(1, 8, 64, 16, 4, 2, 2, experts=8, top_k=2, moe_ffn=16, family="mixtral")


@settings(max_examples=30, suppress_health_check=[HealthCheck.filter_too_much])
@given(models(), st.sampled_from(ENGINES), st.integers(0, 3))
def test_the_ranks_of_a_class_hold_alike(model: Architecture, engine: str, offset: int) -> None:
    """The engine target asks the rules once per class of ranks (``rank_classes``): the classes
    of a tensor partition the ranks that may hold it (every rank; a routed expert's holders),
    each ascending, in the order of their first rank, and what the class holds
    (``EngineTarget.held``) is what ``holding`` gives each of its ranks."""
    layout = EngineLayout.from_string(engine)
    target = EngineTarget(layout, model, rank_offset=offset)
    for hf in target.weights:
        classes = target.rank_classes(hf)
        ranks = [world for _, _, members in classes for world in members]
        firsts = [members[0] for _, _, members in classes]
        assert firsts == sorted(firsts)
        assert len(set(ranks)) == len(ranks)
        if not target.routed(hf):
            assert sorted(ranks) == list(range(offset, offset + layout.world_size))
        signatures = target.routed_signatures if target.routed(hf) else target.dense_signatures
        for of, rank, members in classes:
            assert list(members) == sorted(members) and members[0] == rank + offset
            assert members == signatures.ranks[of]  # a class holds all or none of an expert
            for world in members:
                try:
                    held = holding(layout, hf.role, hf.shape, model, world - offset, hf.expert)
                except TopologyError:
                    assume(False)
                    raise
                assert target.held(hf, world - offset) == held
                if target.routed(hf):
                    assert held.pieces


def test_vllm_replicates_a_kv_head_over_the_ranks_beyond_the_kv_heads() -> None:
    """tp 4 over 2 KV heads: ranks 0 and 1 hold KV head 0, each its own q heads (one shard
    each), the fused qkv_proj laid q, k, v (Megatron's group 0 is q rows 0..8, then k 8..12
    and v 12..16: k and v adjacent in both, one run)."""
    plan = refit(Topology(2, tp=2), "engine=vllm,tp=4", LLAMA, rank_offset=2)
    qkv = plan.plan.params[2]
    placement = plan.target.placement(qkv, 2)
    assert [(s.ranks, s.ranges) for s in placement.shards] == [
        ((2,), ((0, 4), (8, 16))),
        ((3,), ((4, 16),)),
        ((4,), ((16, 20), (24, 32))),
        ((5,), ((20, 32),)),
    ]
    assert plan.tensors(3)["model.layers.0.self_attn.qkv_proj.weight"] == (12, 16)


def test_vllm_pads_the_vocabulary_and_the_padding_receives_nothing() -> None:
    """A 100-row vocabulary on tp 4 pads to 128: rank 3 holds rows 96..99 at the top of 32."""
    model = Architecture(1, 8, 100, 16, 4, 2, 2)
    plan = refit(Topology(2, tp=2), "engine=vllm,tp=4", model, rank_offset=2)
    assert plan.tensors(5)["model.embed_tokens.weight"] == (32, 8)
    boxes = [b for op in plan.recvs(5) for b in plan.boxes(op)]
    assert [b for name, b in boxes if name == "model.embed_tokens.weight"] == [((0, 4), (0, 8))]


def test_fused_moe_puts_each_expert_in_its_slot_of_w13_and_w2() -> None:
    """vLLM ep 4 over 8 experts: rank 1 holds experts 2 and 3 in slots 0 and 1; the gate rows
    first, then up."""
    plan = refit(Topology(2, ep=2), "engine=vllm,tp=2,dp=2,ep=4", MIXTRAL, rank_offset=2)
    fc1 = next(p for p in plan.plan.params if p.name.endswith("local_experts.3.linear_fc1.weight"))
    (run,) = plan.landing(fc1, 3)
    assert (run.name, run.shape, run.box) == (
        "model.layers.0.block_sparse_moe.experts.w13_weight",
        (2, 32, 8),
        ((1, 2), (0, 32), (0, 8)),
    )
    assert plan.landing(fc1, 2) == ()


def test_a_cut_megatron_does_not_make_is_refused() -> None:
    """An engine rule cutting rows of a weight Megatron cuts along columns: one line, no plan."""
    target = EngineTarget(EngineLayout("vllm", tp=2), LLAMA)
    fc1 = next(h.param for h in target.tensors(_fc1()))
    wrong = Param(fc1.name, fc1.shape, sharding="row", layer=0)
    with pytest.raises(TopologyError, match=r"cuts model\.layers\.0\.mlp\.gate_proj\.weight"):
        target.placement(wrong, 2)


def _fc1() -> Param:
    return Param("decoder.layers.0.mlp.linear_fc1.weight", (64, 16), sharding="column", layer=0)


def test_hf_holds_whole_tensors_and_qkv_splits_into_q_k_v() -> None:
    """engine=hf: Megatron's interleaved linear_qkv lands in q_proj, k_proj and v_proj whole."""
    plan = refit(Topology(2, tp=2), "engine=hf", LLAMA, rank_offset=2)
    names = Counter(name for op in plan.recvs(2) for name, _ in plan.boxes(op))
    assert {n for n in names if "layers.0.self_attn" in n} == {
        f"model.layers.0.self_attn.{x}_proj.weight" for x in "qkvo"
    }
    assert plan.tensors(2)["model.layers.0.self_attn.k_proj.weight"] == (8, 16)


def test_bad_arguments_are_one_line() -> None:
    with pytest.raises(TopologyError, match="engine must be an EngineLayout"):
        refit(Topology(2), 3, LLAMA)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="names no engine"):
        refit(Topology(2), "tp=2", LLAMA)
    plan = refit(Topology(2), "engine=vllm,tp=2", LLAMA, rank_offset=2)
    with pytest.raises(TopologyError, match="before the engine's first rank 2"):
        plan.tensors(1)
    with pytest.raises(TopologyError, match="op must be a TransferOp"):
        plan.boxes("op")  # type: ignore[arg-type]


def test_the_cli_plans_into_an_engine(capsys: pytest.CaptureFixture[str]) -> None:
    """``--to engine=...``: the summary names the engine; ``--json`` gives its layout."""
    argv = ["transfer", "--from", "tp=2,pp=2", "--to", "engine=vllm,tp=4", "--model", "llama-7b"]
    assert main([*argv, "-w", "4"]) == 0
    out = capsys.readouterr().out
    assert "-> engine=vllm tp=4 dp=1 ep=1 weights 195," in " ".join(out.split())
    assert main([*argv, "-w", "4", "--to-offset", "4", "--json", "--summary"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["to"] == {
        "engine": "vllm",
        "tp": 4,
        "dp": 1,
        "ep": 1,
        "placement": "linear",
        "dp_attention": False,
        "rank_offset": 4,
    }
    plan = refit(Topology(4, tp=2, pp=2), "engine=vllm,tp=4", "llama-7b", rank_offset=4)
    assert data["stats"] == json.loads(json.dumps(plan.plan.stats))
    assert main([*argv, "-w", "4", "--to-world-size", "8"]) == 2
    assert "contradicts --to engine=vllm,tp=4" in capsys.readouterr().err
