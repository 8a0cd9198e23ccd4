"""Crossings counted on host sets from the group shapes equal the rank walk, on any host order.

Where a tier's domains are not runs of consecutive hosts (interleaved, scattered, strided racks,
singleton racks, unknown domains) or the hosts run unequal GPU counts, :func:`crossings` counts
each kind's host sets by arithmetic on its shape (:func:`slot_sets` on blocks of the hosts' GPU
gcd) and labels them per tier. The reference is :func:`count_crossings`, which walks every rank
of every group.
"""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Tier, Topology, crossings
from topology._preflight import crossings as crossings_module
from topology._preflight.crossings import (
    NODE_TIER,
    PLACED_KINDS,
    _unit_hosts,
    count_crossings,
    host_sets,
    slot_sets,
)
from topology.strategies import topologies

PATTERNS = ("interleaved", "scattered", "strided", "singleton", "unknown", "runs")


def _labels(pattern: str, hosts: int, seed: int) -> list[str | None]:
    """One tier's domain per host, by ``pattern``."""
    width = seed % 3 + 2
    table = {
        "interleaved": [f"d{i % 2}" for i in range(hosts)],
        "scattered": [f"d{(i * 7 + seed) % width}" for i in range(hosts)],
        "strided": [f"d{i % width}" for i in range(hosts)],
        "singleton": [f"d{i}" for i in range(hosts)],
        "unknown": [None if (i + seed) % 3 == 0 else f"d{i // width}" for i in range(hosts)],
        "runs": [f"d{i // width}" for i in range(hosts)],
    }
    return table[pattern]


@st.composite
def allocations(draw: st.DrawFn, ranks: int) -> Allocation:
    """Hosts (equal or ragged GPU counts) that hold ``ranks``, under one to three tiers whose
    domains follow any of :data:`PATTERNS`."""
    sizes = draw(st.sampled_from([[1], [2], [3], [4], [8], [2, 4], [4, 2, 6], [3, 6], [1, 2]]))
    gpus: list[int] = []
    while sum(gpus) < ranks:
        gpus.append(sizes[len(gpus) % len(sizes)] if draw(st.booleans()) else sizes[0])
    patterns = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3))
    seed = draw(st.integers(0, 5))
    columns = [_labels(p, len(gpus), seed + t) for t, p in enumerate(patterns)]
    tiers = [Tier(f"t{t}", nvlink=t == 0) for t in range(len(patterns))]
    hosts = [Host(f"h{i}", g, tuple(column[i] for column in columns)) for i, g in enumerate(gpus)]
    order = draw(st.permutations(range(len(hosts)))) if draw(st.booleans()) else None
    alloc = Allocation(hosts, tiers)
    return alloc if order is None else alloc.with_order([f"h{i}" for i in order])


def _reference(topo: Topology, alloc: Allocation) -> tuple[tuple[int, ...], ...]:
    rank_map = alloc.rank_map(topo.rank_offset + topo.world_size)
    labels = [rank_map.host_domain_ids(t) for t in range(len(rank_map.tiers))]
    names = (NODE_TIER, *(t.name for t in rank_map.tiers))
    return count_crossings(topo, rank_map.nodes, labels, names).crossing


@settings(max_examples=150, deadline=None)
@given(topologies(max_world_size=48), st.data())
def test_host_set_count_equals_the_rank_walk(topo: Topology, data: st.DataObject) -> None:
    """Any layout (rank_offset included) on any allocation shape: the same counts exactly."""
    alloc = data.draw(allocations(topo.rank_offset + topo.world_size), label="allocation")
    found = crossings(topo, alloc.rank_map(topo.rank_offset + topo.world_size))
    assert found.crossing == _reference(topo, alloc)


def test_a_last_host_larger_than_the_others_is_not_one_block() -> None:
    """Hosts of 4, 4 and 6 GPUs, 13 ranks: the last host runs 5 ranks, more than the others'
    4, so a block of 4 ranks is not a host there (the bug hypothesis found: rank 12 was read
    as a fourth host). The count equals the rank walk, and by hand: ranks 5-12 on h0 0-3, h1
    4-7 (d1), h2 8-12 (d0); pp pairs (5, 9), (6, 10), (7, 11) cross h1|h2, (8, 12) does not;
    cp pair (7, 8) crosses, the other three do not."""
    hosts = [Host("h0", 4, ("d0",)), Host("h1", 4, ("d1",)), Host("h2", 6, ("d0",))]
    alloc = Allocation(hosts, [Tier("t0", nvlink=True)])
    topo = Topology(8, pp=2, cp=2, rank_offset=5)
    found = crossings(topo, alloc.rank_map(13))
    assert found.crossing == _reference(topo, alloc)
    assert (found.count("pp", "node"), found.count("pp", "t0")) == (3, 3)
    assert (found.count("cp", "node"), found.count("cp", "t0")) == (1, 1)


@settings(max_examples=100, deadline=None)
@given(topologies(max_world_size=64), st.sampled_from([1, 2, 3, 4, 5, 6, 7, 8, 12, 16]))
def test_slot_sets_equal_the_walk_for_any_block(topo: Topology, gpus: int) -> None:
    """Blocks of any size, strides that do not divide them included (the cut path)."""
    for kind in (k for k in PLACED_KINDS if k in topo.kinds):
        assert slot_sets(topo, kind, gpus) == host_sets(
            topo, kind, [r // gpus for r in range(topo.rank_offset + topo.world_size)]
        )


def test_interleaved_racks_at_a_huge_world_walk_no_rank() -> None:
    """2**26 ranks on 1,024 hosts in two interleaved racks: counted on the hosts alone."""
    alloc = Allocation(
        [Host(f"n{i}", 1 << 16, (f"r{i % 2}",)) for i in range(1024)], [Tier("rack", nvlink=True)]
    )
    with (
        mock.patch.object(crossings_module, "count_crossings", side_effect=AssertionError),
        mock.patch.object(crossings_module, "host_sets", side_effect=AssertionError),
    ):
        found = crossings(Topology(1 << 26, tp=8, pp=8), alloc.rank_map(1 << 26))
    assert found.count("tp", "rack") == 0  # a pp group's hosts are 128 apart: one rack
    assert (found.count("pp", "node"), found.count("pp", "rack")) == (1 << 23, 0)
    assert found.count("dp", "node") == found.count("dp", "rack") == 64


@pytest.mark.parametrize(
    ("gpus", "world", "expected"),
    [
        ([8], 5, (8, None)),  # one host: its block
        ([4, 4, 4], 12, (4, None)),  # equal hosts: block = host
        ([4, 4, 6], 8, (4, None)),  # the larger last host runs nothing
        ([4, 4, 6], 12, (4, None)),  # ... or at most the common 4 ranks
        ([4, 4, 6], 13, (4, [0, 1, 2, 2])),  # 5 ranks on the last host: two blocks there
        ([4, 8, 2], 14, (4, [0, 1, 1, 2])),  # gcd 4: host 1 is two blocks
        # 2**16 blocks of 2 (1 + 2 + 32,768 + 32,765): listed; one block more: the rank walk
        ([2, 4, 65536, 65530], 131072, (2, [0, 1, 1, *[2] * 32768, *[3] * 32765])),
        ([2, 4, 65536, 65532], 131074, None),
    ],
)
def test_blocks_of_unequal_hosts_by_hand(
    gpus: list[int], world: int, expected: tuple[int, list[int] | None] | None
) -> None:
    """``_unit_hosts``: blocks of the full hosts' gcd, each on one host (the last host's ranks
    in as many blocks as they need), None past 2**16 blocks; worked by hand."""
    rank_map = Allocation([Host(f"h{i}", g) for i, g in enumerate(gpus)]).rank_map(world)
    assert _unit_hosts(rank_map) == expected
