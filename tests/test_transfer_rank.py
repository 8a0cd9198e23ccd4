"""One rank's part of a transfer plan (issue 32, item 3): laws first, then the edges.

Laws: for every rank, ``transfer_rank`` (planned without the whole plan) equals the whole plan's
``for_rank``, whose sends and receives are, as multisets, the plan's operations from and to that
rank; over all ranks the sends are the whole plan. The per-tensor metadata covers every
destination rank of every shard exactly as the placement does.
"""

from __future__ import annotations

from collections import Counter

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.test_transfer_laws import Case, cases
from topology import (
    Param,
    PipelineSplit,
    RankTransfer,
    Topology,
    TopologyError,
    param_placement,
    transfer,
    transfer_rank,
)
from topology._transfer.metadata import rank_runs, shard_table
from topology._transfer.param_placement import PlacementKeys
from topology._transfer.plan import MAX_TRANSFER_RANKS
from topology._transfer.planner import Planner
from topology._transfer.rank import RankPlanner


@st.composite
def repeated_cases(draw: st.DrawFn) -> Case:
    """A case whose weights repeat (renamed) one to three times: holder sets recur, so their
    rotations carry from weight to weight."""
    src, dst, params, layers, rank_map = draw(cases())
    times = draw(st.integers(1, 3))
    repeated = [attrs.evolve(p, name=f"{p.name}#{t}") for t in range(times) for p in params]
    return src, dst, repeated, layers, rank_map


def _world(src: Topology, dst: Topology) -> int:
    return max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)


@settings(max_examples=25, deadline=None)
@given(repeated_cases())
def test_each_rank_alone_equals_its_part_of_the_whole_plan(case: Case) -> None:
    """transfer_rank(r) == plan.for_rank(r): r's sends and receives, multisets of plan.ops."""
    src, dst, params, layers, rank_map = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    sent: Counter[object] = Counter()
    for rank in range(_world(src, dst)):
        alone = transfer_rank(src, dst, params, rank, num_layers=layers, allocation=rank_map)
        assert alone == plan.for_rank(rank)
        assert Counter(alone.sends) == Counter(op for op in plan.ops if op.src == rank)
        assert Counter(alone.recvs) == Counter(op for op in plan.ops if op.dst == rank)
        sent.update(alone.sends)
    assert sent == Counter(plan.ops)


@settings(max_examples=25, deadline=None)
@given(cases())
def test_the_metadata_lists_every_shard_and_its_ranks(case: Case) -> None:
    """shard_table's runs expand to each shard's ranks, its ranges and rows are the shard's."""
    _, dst, params, layers, _ = case
    for row, param in zip(shard_table(dst, params, num_layers=layers), params, strict=True):
        shards = param_placement(dst, param, num_layers=layers).shards
        assert row["name"] == param.name and row["shape"] == list(param.shape)
        assert len(row["shards"]) == len(shards)
        for listed, shard in zip(row["shards"], shards, strict=True):
            ranks = [r for a, z, s in listed["ranks"] for r in range(a, z, s)]
            assert ranks == sorted(shard.ranks)
            assert listed["ranges"] == [list(r) for r in shard.ranges]
            assert listed["rows"] == (None if shard.rows is None else list(shard.rows))


@given(st.lists(st.integers(0, 200), unique=True).map(sorted))
def test_rank_runs_expand_to_the_ranks(ranks: list[int]) -> None:
    """rank_runs gives ranges whose concatenation is the ranks, each run at least one rank."""
    runs = rank_runs(ranks)
    assert [r for a, z, s in runs for r in range(a, z, s)] == ranks
    assert all(z > a and s >= 1 for a, z, s in runs)


def test_a_strided_shard_is_one_run() -> None:
    """A tp shard of a wide dp (every 8th rank of 4,096) is a single run."""
    w = Param("w", (16, 4), sharding="column", layer=0)
    table = shard_table(Topology(4096, tp=8), [w])
    assert table[0]["shards"][3]["ranks"] == [[3, 4092, 8]]  # range(3, 4092, 8): up to 4,091
    assert table[0]["dtype"] == "bfloat16" and table[0]["dim"] == 0


def test_a_rank_with_nothing_to_do_gets_empty_lists() -> None:
    """A rank of neither side's pieces (here: every destination rank holds its shard already)
    sends and receives nothing."""
    w = [Param("w", (8, 8), sharding="column", layer=0)]
    mine = transfer_rank(Topology(2, tp=2), Topology(2, tp=2), w, 1)
    assert mine == RankTransfer(1, (), ())
    assert mine.ops == ()


@pytest.mark.parametrize("rank", [-1, 4, True, "0"])
def test_a_rank_outside_the_layouts_is_refused(rank: object) -> None:
    """A rank that is no int in range(ranks spanned) is a TopologyError (before planning)."""
    w = [Param("w", (8, 8), sharding="column", layer=0)]
    src, dst = Topology(2, tp=2), Topology(2, dp=2, rank_offset=2)
    with pytest.raises(TopologyError, match="rank must be"):
        transfer_rank(src, dst, w, rank)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="rank must be"):
        transfer(src, dst, w).for_rank(rank)  # type: ignore[arg-type]


def test_a_world_too_large_to_plan_is_refused() -> None:
    """Layouts spanning more than MAX_TRANSFER_RANKS are refused before anything is built."""
    w = [Param("w", (8, 8), sharding="column", layer=0)]
    huge = Topology(2**40, tp=8)
    with pytest.raises(
        TopologyError,
        match="must be at most 131072 \\(2\\*\\*17\\), the most ranks a transfer plan spans",
    ):
        transfer(huge, Topology(8, tp=8), w)
    with pytest.raises(
        TopologyError,
        match="must be at most 131072 \\(2\\*\\*17\\), the most ranks a transfer plan spans",
    ):
        transfer_rank(Topology(8, tp=8), Topology(8, rank_offset=MAX_TRANSFER_RANKS), w, 0)


@settings(max_examples=25, deadline=None)
@given(repeated_cases())
def test_one_keyer_gives_each_weight_its_own_key(case: Case) -> None:
    """PlacementKeys' caches change no key: one keyer over every weight gives the key a fresh
    one gives, and weights of equal keys have equal shards (ranks, ranges and rows)."""
    src, dst, params, layers, _ = case
    for topology in (src, dst):
        shared = PlacementKeys(topology, layers, None)
        seen: dict[object, object] = {}
        for param in params:
            key = shared.key(param)
            assert key == PlacementKeys(topology, layers, None).key(param)
            shards = [
                (s.ranks, s.ranges, s.rows)
                for s in param_placement(topology, param, num_layers=layers).shards
            ]
            assert seen.setdefault(key, shards) == shards


def _planned(src: Topology, dst: Topology, params: list[Param], rank: int) -> set[object]:
    """The classes a rank's pass made the pieces of."""
    planner = RankPlanner(src, dst, None, rank)
    planner.plan(params, 2)
    return set(planner.classes)


def test_a_rank_plans_only_the_classes_it_depends_on() -> None:
    """Two layers, two weights each. tp2·pp2 -> tp2·pp2 apart: the stage-0 sender and the
    stage-0 receiver plan the classes of layer 0 alone (layer 1's holders are other ranks).
    tp2 -> tp2·pp2 apart: a stage-0 receiver also plans layer 1's classes, whose holders
    serve it too (their rotation decides its senders)."""
    params = [
        Param(f"decoder.layers.{layer}.{name}", (8, 8), sharding=sharding, layer=layer)
        for layer in (0, 1)
        for name, sharding in (("qkv", "column"), ("proj", "row"))
    ]
    src, dst = Topology(4, tp=2, pp=2), Topology(4, tp=2, pp=2, rank_offset=4)
    whole = Planner(src, dst, None)
    for index, param in enumerate(params):
        whole.weight(index, param, 2)
    assert len(whole.classes) == 2  # a class per layer (its two weights cut alike)
    first, second = ({whole.class_key(p, 2) for p in params[k : k + 2]} for k in (0, 2))
    assert _planned(src, dst, params, 0) == first
    assert _planned(src, dst, params, 4) == first
    assert _planned(src, dst, params, 6) == second
    flat, deep = Topology(2, tp=2), Topology(4, tp=2, pp=2, rank_offset=2)
    whole = Planner(flat, deep, None)
    assert _planned(flat, deep, params, 2) == {whole.class_key(p, 2) for p in params}
    assert len({whole.class_key(p, 2) for p in params}) == 2


def test_a_rank_alone_follows_each_sides_split_and_the_depth() -> None:
    """Six layers over pp 2 on each side, split unevenly (1 + 5 and 4 + 2 layers), listed
    weights for five of them: every rank's part equals the whole plan's, and the splits and the
    depth change the plan (so a pass that dropped either would differ)."""
    src, dst = Topology(4, tp=2, pp=2), Topology(4, tp=2, pp=2, rank_offset=4)
    params = [Param(f"w{layer}", (8, 8), sharding="column", layer=layer) for layer in range(5)]
    splits = {
        "src_pipeline_split": PipelineSplit(first_stage_layers=1),
        "dst_pipeline_split": PipelineSplit(last_stage_layers=2),
    }
    plan = transfer(src, dst, params, num_layers=6, **splits)
    assert plan.ops != transfer(src, dst, params, num_layers=6).ops
    assert plan.ops != transfer(src, dst, params, **splits).ops
    for rank in range(8):
        assert transfer_rank(src, dst, params, rank, num_layers=6, **splits) == plan.for_rank(rank)
