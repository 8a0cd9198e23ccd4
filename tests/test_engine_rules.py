"""The engines' sharding rules: laws over generated models and layouts, then goldens.

Laws (every engine, every role of a generated model, every rank): each element of a Hugging Face
tensor is held by at least one rank and every element by the same number of ranks; a piece's
target has its source's extents and lies inside the local tensor; the pieces landing in one local
tensor of a rank never overlap and fill it, padding rows aside; ranks with equal coordinates in the
groups a rule cuts over hold the same; a data-parallel replica holds what replica 0 holds (vLLM's
experts aside: vLLM cuts them over every rank).

Goldens transcribe the engines' code, read from the released wheels: vLLM 0.33.0 (commit
g4ba787ec9) and SGLang 0.5.23; each golden's docstring cites the file and lines.
"""

from __future__ import annotations

import doctest
import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology._architecture.architecture import Architecture
from topology._architecture.roles import ROLES
from topology._engine.layout import EngineLayout
from topology._engine.rules import RULES, Holding, holding, padded_vocab, rule_of
from topology._errors import TopologyError

Tensor = tuple[str, tuple[int, ...], int | None]
"""A Hugging Face tensor: its role, global shape and expert index."""


def tensors(model: Architecture) -> Iterator[Tensor]:
    """Every tensor of one layer of ``model`` (and the embedding, output layer and norms), with
    the biases of q/k/v and o, in the shapes a Hugging Face checkpoint holds."""
    hidden, vocab, heads = model.hidden, model.vocab, model.heads
    yield from [("embedding", (vocab, hidden), None), ("lm_head", (vocab, hidden), None)]
    yield ("norm", (hidden,), None)
    if model.mla is None:
        q, kv = heads * model.head_dim, model.kv_heads * model.head_dim
        for role, rows in (("q", q), ("k", kv), ("v", kv)):
            yield from [(role, (rows, hidden), None), (role, (rows,), None)]
        yield from [("o", (hidden, q), None), ("o", (hidden,), None)]
    else:
        q_lora, kv_lora, nope, rope, v = model.mla
        yield from [("q_a", (q_lora, hidden), None), ("kv_a", (kv_lora + rope, hidden), None)]
        yield from [("q_b", (heads * (nope + rope), q_lora), None)]
        yield from [("kv_b", (heads * (nope + v), kv_lora), None), ("o", (hidden, heads * v), None)]
    ffn = model.ffn
    yield from [("gate", (ffn, hidden), None), ("up", (ffn, hidden), None)]
    yield ("down", (hidden, ffn), None)
    if model.is_moe:
        yield from [
            ("router", (model.experts, hidden), None),
            ("router_bias", (model.experts,), None),
        ]
        moe = model.moe_ffn
        for e in range(model.experts):
            yield from [("expert_gate", (moe, hidden), e), ("expert_up", (moe, hidden), e)]
            yield ("expert_down", (hidden, moe), e)
    if model.shared_ffn:
        shared = model.shared_ffn
        yield from [("shared_gate", (shared, hidden), None), ("shared_up", (shared, hidden), None)]
        yield ("shared_down", (hidden, shared), None)


@st.composite
def cases(draw: st.DrawFn) -> tuple[EngineLayout, Architecture]:
    """A valid engine layout and a small model it can cut (built from the layout's sizes)."""
    engine = draw(st.sampled_from(["vllm", "sglang", "hf"]))
    tp = 1 if engine == "hf" else draw(st.sampled_from([1, 2, 4]))
    dp = draw(st.sampled_from([1, 2]))
    attention_dp = False
    if engine == "vllm":
        ep = draw(st.sampled_from([1, tp * dp]))
        placement = draw(st.sampled_from(["linear", "round_robin"])) if ep > 1 else "linear"
        layout = EngineLayout(engine, tp=tp, dp=dp, ep=ep, placement=placement)
    elif engine == "sglang":
        ep = draw(st.sampled_from([d for d in (1, 2, 4) if tp % d == 0]))
        attention_dp = draw(st.booleans()) and tp % dp == 0
        layout = EngineLayout(engine, tp=tp, dp=dp, ep=ep, dp_attention=attention_dp)
    else:
        layout = EngineLayout(engine, dp=dp)
    moe_ways = tp * dp if engine == "vllm" else tp
    experts = draw(st.sampled_from([1, 2, 3, 4, 5, 8]))
    if engine == "sglang" and experts > 1:
        experts = layout.ep * draw(st.integers(1, 2))
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    heads = max(kv_heads, tp) * draw(st.integers(1, 2))
    mla = draw(st.booleans())
    model = Architecture(
        layers=1,
        hidden=draw(st.integers(1, 3)),
        vocab=draw(st.integers(1, 140)),
        ffn=tp * draw(st.integers(1, 2)),
        heads=heads,
        kv_heads=heads if mla else kv_heads,
        head_dim=draw(st.integers(1, 2)),
        experts=experts,
        moe_ffn=moe_ways * draw(st.integers(1, 2)) if experts > 1 else 0,
        shared_ffn=tp * draw(st.integers(0, 1)),
        mla=(2, 3, 1, 1, 2) if mla else None,
        top_k=1,
    )
    return layout, model


def _holdings(layout: EngineLayout, model: Architecture, tensor: Tensor) -> list[Holding]:
    role, shape, expert = tensor
    return [holding(layout, role, shape, model, r, expert) for r in range(layout.world_size)]


def _cells(box: tuple[tuple[int, int], ...]) -> Iterator[tuple[int, ...]]:
    return itertools.product(*(range(start, stop) for start, stop in box))


@settings(max_examples=60)
@given(cases())
def test_every_element_is_held_by_the_same_number_of_ranks(
    case: tuple[EngineLayout, Architecture],
) -> None:
    """Each element of each tensor is held by at least one rank, all by equally many."""
    layout, model = case
    for tensor in tensors(model):
        counts: Counter[tuple[int, ...]] = Counter()
        for held in _holdings(layout, model, tensor):
            for piece in held.pieces:
                counts.update(_cells(piece.source))
        everything = list(_cells(tuple((0, n) for n in tensor[1])))
        assert set(counts) == set(everything), tensor
        assert len(set(counts.values())) == 1, tensor


@settings(max_examples=60)
@given(cases())
def test_pieces_fill_each_local_tensor_without_overlap(
    case: tuple[EngineLayout, Architecture],
) -> None:
    """Targets have their sources' extents, lie inside the local tensor, never overlap, and
    fill it (an embedding or output layer: all but the rows past the vocabulary)."""
    layout, model = case
    for rank in range(layout.world_size):
        filled: dict[str, Counter[tuple[int, ...]]] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        for role, shape, expert in tensors(model):
            held = holding(layout, role, shape, model, rank, expert)
            key = f"{held.param or f'{role}.{expert}'}{len(shape)}"
            assert shapes.setdefault(key, held.shape) == held.shape
            cells = filled.setdefault(key, Counter())
            for piece in held.pieces:
                extents = tuple(stop - start for start, stop in piece.target)
                lead = len(extents) - len(piece.shape)
                assert extents == (1,) * lead + piece.shape
                assert all(
                    0 <= a < b <= n for (a, b), n in zip(piece.target, held.shape, strict=True)
                )
                cells.update(_cells(piece.target))
        for key, cells in filled.items():
            assert set(cells.values()) <= {1}, key
            total = 1
            for n in shapes[key]:
                total *= n
            if key.startswith(("embed_tokens", "lm_head")) and layout.engine != "hf":
                assert len(cells) <= total
            else:
                assert len(cells) == total, (key, rank)


@settings(max_examples=60)
@given(cases())
def test_ranks_alike_in_a_rules_groups_hold_the_same(
    case: tuple[EngineLayout, Architecture],
) -> None:
    """A holding depends only on the rank's place in the groups its rule (and its fused
    siblings, and the expert placement) cuts over."""
    layout, model = case
    for role, shape, expert in tensors(model):
        rule = rule_of(layout, model, role)
        groups = {rule_of(layout, model, part).group for part in rule.parts or (role,)}
        groups |= {"expert_ep"} if rule.expert else set()
        named = sorted(g for g in groups if g is not None)
        seen: dict[tuple[tuple[int, int], ...], Holding] = {}
        for rank in range(layout.world_size):
            key = tuple(layout.group(g, rank) for g in named)
            held = holding(layout, role, shape, model, rank, expert)
            assert seen.setdefault(key, held) == held


@settings(max_examples=40)
@given(cases())
def test_a_data_parallel_replica_holds_what_replica_0_holds(
    case: tuple[EngineLayout, Architecture],
) -> None:
    """Rank ``r + tp`` (the next replica) holds what rank ``r`` holds, but vLLM's experts."""
    layout, model = case
    if layout.dp_attention:
        return  # the attention replicas share the tp ranks: no rank is another's copy
    step = layout.tp
    for role, shape, expert in tensors(model):
        if layout.engine == "vllm" and rule_of(layout, model, role).expert:
            continue
        held = _holdings(layout, model, (role, shape, expert))
        assert all(held[r] == held[r % step] for r in range(layout.world_size))


# Goldens. Llama-3-70B's attention: 64 heads, 8 KV heads, head_dim 128, hidden 8192.
LLAMA_70B = Architecture(80, 8192, 128256, 28672, 64, 8, 128)
DEEPSEEK_V3 = Architecture(
    61, 7168, 129280, 18432, 128, 128, 128, experts=256, moe_ffn=2048, dense_layers=3,
    shared_ffn=2048, mla=(1536, 512, 128, 64, 128), top_k=8,
)  # fmt: skip
TWO_KV = Architecture(1, 64, 1000, 64, heads=8, kv_heads=2, head_dim=8)
SIX_HEADS = Architecture(1, 64, 1000, 64, heads=6, kv_heads=2, head_dim=8)


def _kv_head(layout: EngineLayout, rank: int) -> int:
    piece = holding(layout, "k", (16, 64), TWO_KV, rank).pieces[0]
    return piece.source[0][0] // 8


def test_qkv_replicates_kv_heads_when_tp_exceeds_them() -> None:
    """tp=8 on 2 KV heads: ranks 0-3 hold head 0, 4-7 head 1 (vLLM linear.py 1065-1071:
    num_kv_head_replicas = tp / kv; 1313-1317 and parameter.py 191: shard rank = tp_rank //
    replicas)."""
    layout = EngineLayout("vllm", tp=8)
    assert [_kv_head(layout, r) for r in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_qkv_fuses_q_k_v_in_that_order() -> None:
    """Llama-3-70B at tp=8: qkv_proj is (1024 + 128 + 128, 8192); k at row 1024, v at 1152
    (vLLM linear.py 1101-1117: offsets q 0, k num_heads * head_size, v after k)."""
    layout = EngineLayout("vllm", tp=8)
    q, k, v = (
        holding(layout, role, (rows, 8192), LLAMA_70B, 3)
        for role, rows in (("q", 8192), ("k", 1024), ("v", 1024))
    )
    assert q.shape == k.shape == v.shape == (1280, 8192)
    assert q.pieces[0].source == ((3072, 4096), (0, 8192))
    assert [h.pieces[0].target[0] for h in (q, k, v)] == [(0, 1024), (1024, 1152), (1152, 1280)]
    assert k.pieces[0].source[0] == (384, 512)


def test_qkv_splits_kv_heads_when_they_exceed_tp() -> None:
    """tp=2 on 8 KV heads: rank 1 holds KV heads 4-7 (num_kv_heads = kv / tp, 1072-1074)."""
    layout = EngineLayout("vllm", tp=2)
    model = Architecture(1, 16, 64, 16, heads=8, kv_heads=8, head_dim=2)
    k = holding(layout, "k", (16, 16), model, 1)
    assert (k.shape, k.pieces[0].source) == ((24, 16), ((8, 16), (0, 16)))


def test_a_qkv_bias_is_cut_like_its_weight() -> None:
    """Qwen2's q/k/v biases: output_dim 0, same narrow as the weight (linear.py 546-557)."""
    layout = EngineLayout("vllm", tp=8)
    held = holding(layout, "k", (16,), TWO_KV, 5)
    assert (held.shape, held.pieces[0].source, held.pieces[0].target) == (
        (24,),
        ((8, 16),),
        ((8, 16),),
    )


def test_merged_column_puts_gate_then_up() -> None:
    """gate_up_proj holds [gate_i; up_i] (linear.py 835-863: offset sum(output_sizes[:id]) / tp,
    source block tp_rank * shard_size; llama.py 354-355: gate is shard 0, up shard 1)."""
    layout = EngineLayout("vllm", tp=4)
    gate = holding(layout, "gate", (28672, 8192), LLAMA_70B, 2)
    up = holding(layout, "up", (28672, 8192), LLAMA_70B, 2)
    assert gate.param == up.param == "gate_up_proj" and gate.shape == (14336, 8192)
    assert gate.pieces[0].source[0] == up.pieces[0].source[0] == (14336, 21504)
    assert (gate.pieces[0].target[0], up.pieces[0].target[0]) == ((0, 7168), (7168, 14336))


def test_row_parallel_cuts_columns_and_holds_the_bias_whole() -> None:
    """RowParallelLinear: weight narrowed on input_dim 1 (linear.py 1772-1788); the bias is the
    full output_size on every rank (1755-1767), added by tp rank 0 only (1814)."""
    layout = EngineLayout("vllm", tp=8)
    o = holding(layout, "o", (8192, 8192), LLAMA_70B, 7)
    assert (o.param, o.shape, o.pieces[0].source) == (
        "o_proj",
        (8192, 1024),
        ((0, 8192), (7168, 8192)),
    )
    bias = holding(layout, "o", (8192,), LLAMA_70B, 7)
    assert (bias.shape, bias.pieces[0].source) == ((8192,), ((0, 8192),))


@pytest.mark.parametrize(
    ("rows", "padded"),
    [
        (32000, 32000),
        (32001, 32064),
        (151936, 151936),
        (152064, 152064),
        (129280, 129280),
        (128256, 128256),
        (50257, 50304),
    ],
)
def test_vocab_pads_to_a_multiple_of_64(rows: int, padded: int) -> None:
    """pad_vocab_size rounds up to DEFAULT_VOCAB_PADDING_SIZE = 64 (vocab_parallel_embedding.py
    36, 95-97; SGLang vocab_parallel_embedding.py 48, 57)."""
    assert padded_vocab(rows) == padded


def test_vocab_rows_are_split_after_padding_and_padding_receives_nothing() -> None:
    """32001 rows at tp=8: padded 32064, 4008 per rank; rank 7 holds rows 28056-32000 at the top
    of its 4008 (vocab_parallel_embedding.py 286-306, 395-404: start min(i * per, vocab);
    weight_loader 481-520 copies them first and zero-fills the rest)."""
    layout = EngineLayout("vllm", tp=8)
    model = Architecture(1, 4, 32001, 8, 8, 8, 1)
    last = holding(layout, "embedding", (32001, 4), model, 7)
    assert (last.param, last.shape) == ("embed_tokens", (4008, 4))
    assert last.pieces[0].source == ((28056, 32001), (0, 4))
    assert last.pieces[0].target == ((0, 3945), (0, 4))
    tiny = Architecture(1, 4, 65, 8, 4, 4, 1)
    held = [holding(EngineLayout("vllm", tp=4), "lm_head", (65, 4), tiny, r) for r in range(4)]
    assert [len(h.pieces) for h in held] == [1, 1, 1, 0]  # padded 128: rank 3 is all padding
    assert held[2].pieces[0].source == ((64, 65), (0, 4)) and held[3].shape == (32, 4)


def test_expert_parallel_holds_a_contiguous_block_of_whole_experts() -> None:
    """vLLM EP 16 over 64 experts: 4 per rank, rank 5 holds 20-23 whole (expert_map_manager.py
    62-79: base = experts // ep, linear start ep_rank * base + min(ep_rank, remainder));
    config.py 1227-1244: expert tp 1 under EP)."""
    layout = EngineLayout("vllm", tp=8, dp=2, ep=16)
    model = Architecture(1, 8, 64, 8, 8, 8, 1, experts=64, moe_ffn=16, top_k=2)
    mine = [e for e in range(64) if holding(layout, "expert_gate", (16, 8), model, 5, e).pieces]
    assert mine == [20, 21, 22, 23]
    w13 = holding(layout, "expert_up", (16, 8), model, 5, 22)
    assert (w13.param, w13.shape) == ("experts.w13_weight", (4, 32, 8))
    assert w13.pieces[0].target == ((2, 3), (16, 32), (0, 8))
    w2 = holding(layout, "expert_down", (8, 16), model, 5, 22)
    assert (w2.param, w2.shape, w2.pieces[0].source) == (
        "experts.w2_weight",
        (4, 8, 16),
        ((0, 8), (0, 16)),
    )


def test_expert_placement_remainders_and_round_robin() -> None:
    """10 experts on 4 ep ranks: linear 3, 3, 2, 2 contiguous; round_robin rank 1 holds 1, 5, 9
    (expert_map_manager.py 64-88)."""
    model = Architecture(1, 2, 64, 4, 4, 4, 1, experts=10, moe_ffn=4, top_k=2)

    def experts(placement: str, rank: int) -> list[int]:
        layout = EngineLayout("vllm", tp=4, ep=4, placement=placement)
        return [
            e for e in range(10) if holding(layout, "expert_down", (2, 4), model, rank, e).pieces
        ]

    assert [experts("linear", r) for r in range(4)] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    assert experts("round_robin", 1) == [1, 5, 9]


def test_vllm_without_ep_cuts_every_expert_over_tp_times_dp() -> None:
    """No EP, tp=2, dp=2: each rank holds every expert, 1/4 of its intermediate rows (config.py
    1106-1114 flatten_tp_across_dp_and_pcp; routed_experts.py 529-578 _load_w13 narrows
    tp_rank * per_rank, gate at 0 and up at shard_size of w13; 580-629 _load_w2 on dim 1)."""
    layout = EngineLayout("vllm", tp=2, dp=2)
    model = Architecture(1, 8, 64, 8, 2, 2, 4, experts=4, moe_ffn=16, top_k=2)
    up = holding(layout, "expert_up", (16, 8), model, 3, 2)
    assert up.shape == (4, 8, 8)
    assert (up.pieces[0].source, up.pieces[0].target) == (
        ((12, 16), (0, 8)),
        ((2, 3), (4, 8), (0, 8)),
    )
    down = holding(layout, "expert_down", (8, 16), model, 3, 2)
    assert down.pieces[0].source == ((0, 8), (12, 16))


def test_deepseek_v3_mla_at_tp8() -> None:
    """DeepSeek-V3 at tp=8 (deepseek_v2.py 1051-1113): fused_qkv_a_proj = q_a + kv_a rows
    (1536 + 576 = 2112, the shape 975 checks) whole on every rank; q_b_proj and kv_b_proj
    column-parallel by heads; o_proj row-parallel; stacked mapping 1601-1602."""
    layout = EngineLayout("vllm", tp=8)
    kv_a = holding(layout, "kv_a", (576, 7168), DEEPSEEK_V3, 6)
    assert (kv_a.param, kv_a.shape) == ("fused_qkv_a_proj", (2112, 7168))
    assert kv_a.pieces[0].target == ((1536, 2112), (0, 7168))
    assert holding(layout, "q_b", (24576, 1536), DEEPSEEK_V3, 6).pieces[0].source == (
        (18432, 21504),
        (0, 1536),
    )
    assert holding(layout, "kv_b", (32768, 512), DEEPSEEK_V3, 6).shape == (4096, 512)
    assert holding(layout, "o", (7168, 16384), DEEPSEEK_V3, 6).shape == (7168, 2048)
    assert holding(layout, "router_bias", (256,), DEEPSEEK_V3, 6).pieces[0].source == ((0, 256),)
    q = holding(layout, "q", (24576, 7168), DEEPSEEK_V3, 1)  # q_proj when q_lora_rank is null
    assert (q.param, q.shape) == ("q_proj", (3072, 7168))


def test_deepseek_v3_shared_experts_and_router_at_tp8() -> None:
    """Shared experts are a dense MLP over tp (deepseek_v2.py 359-372), the router replicated
    (GateLinear is a ReplicatedLinear: 321-332, gate_linear.py 22)."""
    layout = EngineLayout("vllm", tp=8, dp=2)
    up = holding(layout, "shared_up", (2048, 7168), DEEPSEEK_V3, 9)
    assert (up.param, up.shape, up.pieces[0].target[0]) == (
        "shared_experts.gate_up_proj",
        (512, 7168),
        (256, 512),
    )
    assert holding(layout, "router", (256, 7168), DEEPSEEK_V3, 9).shape == (256, 7168)


def test_sglang_cuts_experts_over_ep_and_moe_tp() -> None:
    """SGLang tp=8 ep=4: moe_tp 2; rank 5 is ep rank 2 (experts 32-47 of 64) and moe tp rank 1
    (fused_moe_triton/layer.py 390-393, 414-416, 1153-1161; _load_w13 824-859)."""
    layout = EngineLayout("sglang", tp=8, ep=4)
    model = Architecture(1, 8, 64, 8, 8, 8, 1, experts=64, moe_ffn=16, top_k=2)
    mine = [e for e in range(64) if holding(layout, "expert_gate", (16, 8), model, 5, e).pieces]
    assert mine == list(range(32, 48))
    up = holding(layout, "expert_up", (16, 8), model, 5, 40)
    assert (up.shape, up.pieces[0].source, up.pieces[0].target) == (
        (16, 16, 8),
        ((8, 16), (0, 8)),
        ((8, 9), (8, 16), (0, 8)),
    )


def test_sglang_needs_experts_divisible_by_ep() -> None:
    """SGLang asserts experts % ep == 0 (fused_moe_triton/layer.py 414); vLLM gives remainders."""
    layout = EngineLayout("sglang", tp=4, ep=4)
    model = Architecture(1, 2, 64, 4, 4, 4, 1, experts=10, moe_ffn=4, top_k=2)
    with pytest.raises(TopologyError, match=r"^engine=sglang: ep\(4\) must divide the 10 experts"):
        holding(layout, "expert_gate", (4, 2), model, 0, 3)


def test_sglang_dp_attention_cuts_attention_and_embedding_over_tp_over_dp() -> None:
    """--enable-dp-attention, tp=8 dp=2: q over 4 attention ranks, the embedding too
    (deepseek_v2.py 2078-2161 parallel_group="attn_tp"; vocab_parallel_embedding.py 166-185);
    lm_head over all 8 (deepseek_v2.py 3291-3296)."""
    layout = EngineLayout("sglang", tp=8, dp=2, dp_attention=True)
    assert holding(layout, "q", (8192, 8192), LLAMA_70B, 5).pieces[0].source[0] == (2048, 4096)
    assert holding(layout, "embedding", (128256, 8192), LLAMA_70B, 5).shape == (32064, 8192)
    assert holding(layout, "lm_head", (128256, 8192), LLAMA_70B, 5).shape == (16032, 8192)
    qkv_a = holding(layout, "q_a", (1536, 7168), DEEPSEEK_V3, 5)
    assert qkv_a.param == "fused_qkv_a_proj_with_mqa"


def test_hf_holds_every_tensor_whole() -> None:
    """engine=hf: whole tensors under their own names (what load_weights consumes)."""
    layout = EngineLayout("hf", dp=2)
    for role, shape, expert in tensors(TWO_KV):
        held = holding(layout, role, shape, TWO_KV, 1, expert)
        assert (held.param, held.shape) == ("", shape)
        assert held.pieces[0].source == held.pieces[0].target == tuple((0, n) for n in shape)


def test_every_role_has_a_rule_in_each_engine() -> None:
    """Every role has a rule for one attention kind or the other, in every engine."""
    for engine in ("vllm", "sglang", "hf"):
        assert set(RULES[(engine, "gqa")]) | set(RULES[(engine, "mla")]) == set(ROLES)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("vllm", 3, "q", (64, 64), TWO_KV, 0),
            r"^engine=vllm: q \(QKVParallelLinear\) is cut over 3 ranks, which must divide its 8 "
            r"heads; valid group sizes: 1, 2, 4, 8$",
        ),
        (
            ("vllm", 3, "k", (16, 64), SIX_HEADS, 0),
            r"^engine=vllm: k \(QKVParallelLinear\) is cut over 3 ranks, which must divide or be "
            r"a multiple of its 2 KV heads",
        ),
        (("vllm", 2, "q", (15, 64), TWO_KV, 0), r"^q shape \(15, 64\) must have 64 rows \(dim 0\)"),
        (
            ("vllm", 3, "gate", (64, 64), TWO_KV, 0),
            r"^engine=vllm: gate \(MergedColumnParallelLinear\) is cut over 3 ranks, which must "
            r"divide its 64 rows",
        ),
        (
            ("vllm", 3, "lm_head", (1000, 64), TWO_KV, 0),
            r"^engine=vllm: lm_head \(ParallelLMHead\) pads its 1000 rows to 1024",
        ),
        (
            ("vllm", 2, "kv_a", (16, 64), TWO_KV, 0),
            r"^a model with grouped-query attention has no kv_a tensor",
        ),
        (("vllm", 2, "qkv", (16, 64), TWO_KV, 0), r"^role must be one of embedding, lm_head"),
        (
            ("vllm", 2, "q", (64, 64, 1), TWO_KV, 0),
            r"^shape must be a tuple of 1 or 2 positive ints",
        ),
        (("vllm", 2, "q", [64, 64], TWO_KV, 0), r"^shape must be a tuple of 1 or 2 positive ints"),
        (
            ("vllm", 2, "q", (64, 64), TWO_KV, 2),
            r"^rank must be at most 1, the engine's last rank, got 2",
        ),
        (("vllm", 2, "q", (64, 64), TWO_KV, "0"), r"^rank must be a non-negative int, got '0'"),
    ],
)
def test_bad_rule_input_is_one_line_errors(args: tuple[object, ...], message: str) -> None:
    """A size the engine cannot cut, a wrong shape, role or rank: one-line TopologyErrors."""
    engine, tp, role, shape, model, rank = args
    layout = EngineLayout(str(engine), tp=int(tp))  # type: ignore[call-overload]
    with pytest.raises(TopologyError, match=message) as error:
        holding(layout, role, shape, model, rank)  # type: ignore[arg-type]
    assert "\n" not in str(error.value)


def test_expert_index_is_checked() -> None:
    """An expert's tensor needs its index in range; other roles take none."""
    model = Architecture(1, 2, 64, 4, 4, 4, 1, experts=4, moe_ffn=4, top_k=2)
    layout = EngineLayout("vllm", tp=2)
    with pytest.raises(TopologyError, match=r"^a routed expert's tensor needs its expert index"):
        holding(layout, "expert_gate", (4, 2), model, 0)
    with pytest.raises(TopologyError, match=r"^expert must be at most 3, the model's last expert"):
        holding(layout, "expert_gate", (4, 2), model, 0, 4)
    with pytest.raises(TopologyError, match=r"^role q is not a routed expert's, got expert=1"):
        holding(layout, "q", (4, 2), model, 0, 1)


def test_the_engines_doc_example_prints_what_the_code_computes() -> None:
    """docs/engines.md's worked example runs (its numbers are the rules' output)."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
    result = doctest.testfile(
        str(doc), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE
    )
    assert result.attempted >= 5 and result.failed == 0
