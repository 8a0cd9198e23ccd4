"""EngineLayout: the string form round-trips, each engine's rank order and groups, bad input.

Sources transcribed (read from the released wheels, vLLM 0.33.0 = commit g4ba787ec9, SGLang
0.5.23): vLLM ``vllm/distributed/parallel_state.py`` 2149-2164 (ranks reshaped as
``ExternalDP x DP x PP x PCP x TP``: tp fastest), ``vllm/model_executor/layers/fused_moe/config.py``
1106-1114 (without EP the experts are cut over ``dp * tp``, flat rank ``dp_rank * tp + tp_rank``)
and 1198-1244 (``enable_expert_parallel``: ``ep_size = tp * dp``, expert tp 1); SGLang
``python/sglang/srt/runtime_context.py`` 79-92 (attention ranks: ``tp_rank % attn_tp_size``),
106-134 (``moe_ep_rank = tp_rank % tp // moe_tp``, ``moe_tp_rank = tp_rank % moe_tp``) and
154 (``moe_tp_size = tp // ep // moe_dp``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology._engine.layout import ENGINES, GROUPS, EngineCoord, EngineLayout
from topology._errors import TopologyError


@st.composite
def layouts(draw: st.DrawFn) -> EngineLayout:
    """Valid layouts of every engine, small sizes."""
    engine = draw(st.sampled_from(["vllm", "sglang", "hf"]))
    tp = 1 if engine == "hf" else draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    dp = draw(st.integers(1, 4))
    if engine == "vllm":
        ep = draw(st.sampled_from([1, tp * dp]))
        placement = draw(st.sampled_from(["linear", "round_robin"])) if ep > 1 else "linear"
        return EngineLayout(engine, tp=tp, dp=dp, ep=ep, placement=placement)
    if engine == "sglang":
        ep = draw(st.sampled_from([d for d in range(1, tp + 1) if tp % d == 0]))
        attention = draw(st.booleans()) and tp % dp == 0
        return EngineLayout(engine, tp=tp, dp=dp, ep=ep, dp_attention=attention)
    return EngineLayout(engine, dp=dp)


@given(layouts())
def test_the_string_and_dict_forms_round_trip(layout: EngineLayout) -> None:
    """``from_string(str(layout))`` and ``EngineLayout(**to_dict())`` give the layout back."""
    assert EngineLayout.from_string(str(layout)) == layout
    assert EngineLayout(**layout.to_dict()) == layout


@given(layouts())
def test_every_rank_has_one_coordinate_and_a_place_in_every_group(layout: EngineLayout) -> None:
    """Coordinates are distinct per rank, and each group index lies below its size."""
    ranks = range(layout.world_size)
    assert len({layout.coord(rank) for rank in ranks}) == layout.world_size
    for name in GROUPS:
        for rank in ranks:
            size, index = layout.group(name, rank)
            assert 0 <= index < size <= layout.world_size


@given(layouts())
def test_a_group_of_each_size_partitions_the_ranks_evenly(layout: EngineLayout) -> None:
    """Each group's index takes each value on ``world_size / size`` ranks (a block layout)."""
    for name in GROUPS:
        seen: dict[int, int] = {}
        for rank in range(layout.world_size):
            size, index = layout.group(name, rank)
            seen[index] = seen.get(index, 0) + 1
        assert set(seen) == set(range(size))
        assert set(seen.values()) == {layout.world_size // size}


def test_vllm_ranks_vary_tp_fastest() -> None:
    """vLLM: rank = dp_rank * tp + tp_rank (parallel_state.py 2149-2164)."""
    layout = EngineLayout.from_string("engine=vllm,tp=4,dp=2")
    assert [layout.coord(r) for r in (0, 3, 4, 7)] == [
        EngineCoord(0, 0),
        EngineCoord(3, 0),
        EngineCoord(0, 1),
        EngineCoord(3, 1),
    ]
    assert layout.world_size == 8


def test_vllm_experts_span_every_rank() -> None:
    """vLLM: no EP cuts experts over tp * dp; EP makes every rank an ep rank (config 1106-1244)."""
    flat = EngineLayout("vllm", tp=4, dp=2)
    assert [flat.group("expert_tp", r) for r in (0, 5)] == [(8, 0), (8, 5)]
    assert flat.group("expert_ep", 5) == (1, 0)
    ep = EngineLayout("vllm", tp=4, dp=2, ep=8)
    assert (ep.group("expert_tp", 5), ep.group("expert_ep", 5)) == ((1, 0), (8, 5))
    assert ep.group("attention", 5) == (4, 1)


def test_sglang_cuts_experts_over_ep_and_what_tp_leaves() -> None:
    """SGLang: moe_tp = tp / ep, ep rank = tp_rank // moe_tp (runtime_context.py 106-154)."""
    layout = EngineLayout.from_string("engine=sglang,tp=8,ep=4,dp=2")
    assert layout.world_size == 16
    assert layout.group("expert_ep", 5) == (4, 2)
    assert layout.group("expert_tp", 5) == (2, 1)
    assert layout.group("expert_ep", 13) == (4, 2)  # replica 1, tp rank 5


def test_sglang_dp_attention_puts_the_replicas_inside_tp() -> None:
    """SGLang --enable-dp-attention: world = tp, attention over tp / dp (runtime_context 79-92)."""
    layout = EngineLayout.from_string("engine=sglang,tp=8,dp=2,dp_attention=true")
    assert layout.world_size == 8
    assert layout.group("attention", 5) == (4, 1)
    assert layout.group("embedding", 5) == (4, 1)
    assert layout.group("lm_head", 5) == (8, 5)
    assert layout.group("dense", 5) == (8, 5)
    assert layout.coord(5) == EngineCoord(tp=5, dp=1)
    assert str(layout) == "engine=sglang,tp=8,dp=2,ep=1,dp_attention=true"


def test_hf_is_one_whole_copy_per_rank() -> None:
    """engine=hf: dp ranks, every group of size 1."""
    layout = EngineLayout.from_string("engine=hf,dp=3")
    assert layout.world_size == 3
    assert {layout.group(name, 2) for name in GROUPS} == {(1, 0)}


def test_every_engine_but_the_default_has_every_group() -> None:
    """Each engine row names a rule for each group (megatron's come from a Topology)."""
    for name, row in ENGINES.items():
        assert set(row.groups) == (set() if name == "megatron" else set(GROUPS))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("engine=vllm,tp=2,tp=4", r"^engine layout gives tp twice \(tp=2, tp=4\); give it once$"),
        ("engine=vllm,pp=2", r"^engine layout item 'pp=2' is not KEY=VALUE with a key of engine,"),
        ("engine=vllm,tp", r"^engine layout item 'tp' is not KEY=VALUE"),
        ("tp=8", r"^engine layout 'tp=8' names no engine; start it with engine= one of megatron,"),
        ("engine=trt,tp=8", r"^engine must be one of megatron, vllm, sglang, hf, got 'trt'"),
        ("engine=vllm,tp=\uff18", r"^tp must be a positive int in ASCII digits, got '\uff18'"),
        ("engine=vllm,tp=0", r"^EngineLayout.tp must be a positive int, got 0 \(int\)$"),
        ("engine=vllm,tp=-2", r"^tp must be a positive int in ASCII digits, got '-2'"),
        (
            "engine=vllm,tp=8,dp=2,ep=4",
            r"^engine=vllm: ep\(4\) must be 1 or tp\(8\) \* dp\(2\) = 16 ",
        ),
        ("engine=vllm,tp=8,placement=round_robin", r"^engine=vllm: placement=round_robin needs"),
        ("engine=vllm,tp=8,ep=8,placement=ring", r"^placement must be one of linear, round_robin"),
        ("engine=vllm,tp=8,dp_attention=true", r"^engine=vllm takes no dp_attention"),
        ("engine=sglang,tp=8,ep=3", r"^engine=sglang: ep\(3\) must divide tp\(8\).*1, 2, 4, 8$"),
        ("engine=sglang,tp=8,ep=8,placement=round_robin", r"^engine=sglang places experts"),
        ("engine=sglang,tp=8,dp=3,dp_attention=1", r"^engine=sglang: with dp_attention, dp\(3\)"),
        ("engine=sglang,tp=8,dp_attention=maybe", r"^dp_attention must be true or false"),
        ("engine=hf,tp=2", r"^engine=hf holds whole tensors on each of dp ranks, got tp\(2\)"),
        ("engine=megatron,tp=8", r"^engine=megatron is the default destination, laid out by a"),
        ("engine=vllm,tp=2097152,dp=1048576", r"^engine layout world size must be at most"),
    ],
)
def test_bad_layout_strings_are_one_line_errors(text: str, message: str) -> None:
    """Each bad layout string is a one-line TopologyError naming the value and what is valid."""
    with pytest.raises(TopologyError, match=message) as error:
        EngineLayout.from_string(text)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("value", [None, 8, b"engine=vllm"])
def test_a_layout_that_is_not_a_string_is_refused(value: object) -> None:
    """Not a string: a TopologyError, never an AttributeError."""
    with pytest.raises(TopologyError, match=r"^an engine layout must be a string"):
        EngineLayout.from_string(value)  # type: ignore[arg-type]


def test_ranks_and_groups_out_of_range_are_refused() -> None:
    """coord and group check the rank and the group's name."""
    layout = EngineLayout("vllm", tp=2)
    with pytest.raises(TopologyError, match=r"^rank must be at most 1"):
        layout.coord(2)
    with pytest.raises(TopologyError, match=r"^group must be one of attention, dense"):
        layout.group("pipeline", 0)
    with pytest.raises(TopologyError, match=r"^EngineLayout.dp_attention must be True or False"):
        EngineLayout("sglang", dp_attention=1)  # type: ignore[arg-type]
