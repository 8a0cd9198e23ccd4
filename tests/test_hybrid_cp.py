"""Megatron's hybrid (dynamic) context-parallel groups: ``topology.hybrid_cp_groups``.

Laws over random layouts (hypothesis), then a differential test: a seeded list of layouts goes to
``tests/megatron_gtp_oracle.py`` (megatron-core 0.19.2's own ``initialize_model_parallel`` with
``hybrid_context_parallel=True``, ``create_group`` recorded) in one subprocess; every
``HYBRID_DP_CP_GROUP_<size>`` it creates must be our group of that size, in the same order, and
every layout it refuses for hybrid CP (odd ``dp * cp``) must be refused here. Without the oracle
folder the differential skips, except under ``CI`` where it fails.
"""

from __future__ import annotations

import math
import random
from functools import cache
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.megatron_runs import megatron_run
from topology import Topology, TopologyError, hybrid_cp_groups
from topology.strategies import topologies

DESC = "HYBRID_DP_CP_GROUP_"

even = topologies(max_world_size=64, gtp=True).filter(lambda t: t.size("dp-cp") % 2 == 0)


@settings(max_examples=60)
@given(even)
def test_each_size_cuts_every_dp_cp_group_into_consecutive_blocks(topo: Topology) -> None:
    """Sizes 2, 4, ... below the largest power of two in dp * cp; size s lists, dp-cp group by
    dp-cp group, its members s at a time (the last block shorter where s does not divide)."""
    n = topo.size("dp-cp")
    groups = hybrid_cp_groups(topo)
    top = 1 << (n.bit_length() - 1)  # the largest power of two <= n
    assert sorted(groups) == [2**i for i in range(1, top.bit_length() - 1)]
    for size, blocks in groups.items():
        expected = [g[i : i + size] for g in topo.groups("dp-cp") for i in range(0, n, size)]
        assert list(blocks) == expected
        assert blocks.group_size == (size if n % size == 0 else None)


@settings(max_examples=50)
@given(even)
def test_the_groups_of_one_size_partition_the_ranks(topo: Topology) -> None:
    """Every rank is in exactly one group of each size, the one index_of_rank names, inside its
    own dp-cp group; a rank outside the layout is in none."""
    ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    for size, blocks in hybrid_cp_groups(topo).items():
        holders: dict[int, int] = {}
        for index, block in enumerate(blocks):
            assert len(block) == size or len(block) == topo.size("dp-cp") % size
            assert set(block) <= set(topo.group_of(block[0], "dp-cp"))
            for rank in block:
                assert rank not in holders
                holders[rank] = index
        assert sorted(holders) == list(ranks)
        for rank, index in holders.items():
            assert blocks.index_of_rank(rank) == index
            assert blocks.ranks_of(rank) == blocks[index]
        assert blocks.index_of_rank(topo.rank_offset + topo.world_size) is None
        assert blocks.index_of_rank(topo.rank_offset - 1) is None


@settings(max_examples=60)
@given(even)
def test_a_block_is_two_blocks_of_half_its_size(topo: Topology) -> None:
    """The sizes nest: each full block of 2s ranks is the union of two consecutive blocks of s."""
    groups = hybrid_cp_groups(topo)
    for size in [s for s in groups if s // 2 in groups]:
        halves = groups[size // 2]
        parents = len(topo.groups("dp-cp"))
        per, half_per = len(groups[size]) // parents, len(halves) // parents
        for index, block in enumerate(groups[size]):
            if len(block) != size:
                continue
            parent, k = divmod(index, per)
            first = parent * half_per + 2 * k
            assert block == halves[first] + halves[first + 1]


@settings(max_examples=40)
@given(even, st.integers(1, 80))
def test_min_size_keeps_megatron_devs_sizes_from_it_up(topo: Topology, min_size: int) -> None:
    """min_size keeps the sizes of Megatron dev's ``create_dynamic_dp_cp_groups`` (parallel_state.py
    :428 at d48bd6be0a, PR #6479's base, transcribed: ``[2**i for i in range(int(log2(len(ranks))))
    if 2**i >= min_cp_size]``), size 1 included, each with the blocks of the default."""
    n = topo.size("dp-cp")
    if min_size > n:
        with pytest.raises(TopologyError, match=rf"min_size\({min_size}\) is above .* = {n}, "):
            hybrid_cp_groups(topo, min_size=min_size)
        return
    groups = hybrid_cp_groups(topo, min_size=min_size)
    assert sorted(groups) == [2**i for i in range(int(math.log2(n))) if 2**i >= min_size]
    default = hybrid_cp_groups(topo)
    for size, blocks in groups.items():
        if size == 1:
            assert list(blocks) == [(r,) for g in topo.groups("dp-cp") for r in g]
        else:
            assert list(blocks) == list(default[size])


@pytest.mark.parametrize("min_size", [0, -2, True, 2.0])
def test_min_size_must_be_a_positive_int(min_size: object) -> None:
    """min_size is a size: a bool, a float or below 1 is refused with its value."""
    with pytest.raises(TopologyError, match=r"min_size must be a positive int, got "):
        hybrid_cp_groups(Topology(8, cp=2), min_size=min_size)  # type: ignore[arg-type]


@given(st.sampled_from([1, 3, 5, 7]), st.sampled_from([1, 3]))
def test_an_odd_dp_cp_is_refused(dp: int, cp: int) -> None:
    """Megatron asserts every dp-cp group is even; the core names the sizes and the fix."""
    with pytest.raises(TopologyError, match=rf"even dp \* cp, got dp\({dp}\) \* cp\({cp}\)"):
        hybrid_cp_groups(Topology(2 * dp * cp, tp=2, cp=cp))


def test_only_a_topology_is_taken() -> None:
    """A Grid (or anything else) has no dp-cp groups of Megatron's to cut."""
    with pytest.raises(TopologyError, match=r"must be a topology\.Topology, got int"):
        hybrid_cp_groups(8)  # type: ignore[arg-type]


def test_a_big_layout_is_lazy() -> None:
    """2^20 ranks: the lists are made group by group, a rank's group found without listing."""
    topo = Topology(2**20, tp=8, cp=4)
    groups = hybrid_cp_groups(topo)
    assert max(groups) == 2**16 and len(groups[2]) == 2**19  # dp * cp = 2^17
    rank = 2**20 - 1
    assert groups[2**16].ranks_of(rank)[-1] == rank and len(groups[2**16].ranks_of(rank)) == 2**16


# -- differential: megatron-core 0.19.2's own groups ----------------------------------------------

ORDERS = ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "tp-pp-dp", "tp-dp-pp", "cp-tp-ep-dp-pp", "dp-pp")


def _layouts(count: int) -> list[dict[str, Any]]:
    """``count`` seeded layouts, dp * cp from 1 to 48 (odd ones too), some with gtp > 1."""
    rng = random.Random(33)
    layouts: list[dict[str, Any]] = []
    while len(layouts) < count:
        tp, cp, pp, gtp = (rng.choice(c) for c in ([1, 2], [1, 2, 3, 4], [1, 2], [1, 1, 1, 2]))
        dp = rng.choice([1, 2, 3, 4, 5, 6, 8, 10, 12])
        order = rng.choice(ORDERS)
        if cp > 1 and "cp" not in order:
            continue
        world = tp * cp * pp * dp * gtp
        if world > 256:
            continue
        layouts.append(
            {
                "world_size": world,
                "tp": tp,
                "pp": pp,
                "cp": cp,
                "ep": 1,
                "etp": tp,
                "gtp": gtp,
                "egtp": 1,
                "dist_opt_instances": 1,
                "order": order,
                "hybrid_context_parallel": True,
            }
        )
    return layouts


@cache
def _oracle() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The layouts and what megatron-core 0.19.2 makes of each (one subprocess)."""
    layouts = _layouts(80)
    return layouts, megatron_run(
        "the hybrid-CP differential test", "megatron_gtp_oracle.py", layouts
    )


def _topology(layout: dict[str, Any]) -> Topology:
    return Topology(**{k: v for k, v in layout.items() if k != "hybrid_context_parallel"})


def test_megatrons_hybrid_groups_are_ours() -> None:
    """Each HYBRID_DP_CP_GROUP_<s> Megatron creates, in its order, is our group list of size s;
    every layout Megatron refuses as hybrid is refused here, and the seeds cover both."""
    layouts, answers = _oracle()
    compared = refused = 0
    for layout, answer in zip(layouts, answers, strict=True):
        if "error" in answer and "even number of ranks" not in answer["error"]:
            continue  # a layout Megatron refuses anyway (tests/test_gtp_megatron.py checks them)
        topo = _topology(layout)
        if "error" in answer:
            with pytest.raises(TopologyError, match="even dp"):
                hybrid_cp_groups(topo)
            refused += 1
            continue
        theirs: dict[int, list[tuple[int, ...]]] = {}
        for desc, ranks in answer["groups"]:
            if desc.startswith(DESC):
                theirs.setdefault(int(desc[len(DESC) :]), []).append(tuple(ranks))
        ours = hybrid_cp_groups(topo)
        assert {size: list(blocks) for size, blocks in ours.items()} == theirs, layout
        compared += bool(theirs)
    assert compared >= 30 and refused >= 8
    assert any(t["gtp"] > 1 and "error" not in a for t, a in zip(layouts, answers, strict=True))
