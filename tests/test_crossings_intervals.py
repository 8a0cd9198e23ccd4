"""Crossings counted on domain intervals (no rank walked) equal the rank-by-rank count.

Where every domain of every tier holds consecutive hosts in launcher order, :func:`crossings`
counts each tier as the groups minus those whose first and last ranks share one domain's rank
interval, on the group bases alone. The oracle walks every group of ``Topology.groups`` with a
host and a domain per rank, sharing no code with the interval count.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Tier, Topology, crossings
from topology._preflight import crossings as crossings_module
from topology._preflight.crossings import PLACED_KINDS, _bases_up_to, host_sets, slot_sets
from topology.strategies import topologies


def _walk(topo: Topology, alloc: Allocation) -> dict[str, list[int]]:
    """Per placed kind, per tier (node first), the groups on two or more hosts / domains."""
    host_of = [i for i, h in enumerate(alloc.hosts) for _ in range(h.gpus)]
    labels = [list(range(len(alloc.hosts)))]
    labels += [
        [h.domains[t] or f"?{i}" for i, h in enumerate(alloc.hosts)]
        for t in range(len(alloc.tiers))
    ]  # type: ignore[misc]
    found = {}
    for kind in (k for k in PLACED_KINDS if k in topo.kinds):
        row = []
        for per_host in labels:
            row.append(sum(len({per_host[host_of[r]] for r in g}) > 1 for g in topo.groups(kind)))
        found[kind] = row
    return found


@st.composite
def allocations(draw: st.DrawFn, gpus: int, hosts: int) -> Allocation:
    """``hosts`` hosts of ``gpus`` GPUs; racks of consecutive hosts (some unknown), leaves of
    consecutive racks, or (sometimes) racks that interleave."""
    rack_of: list[str | None] = []
    while len(rack_of) < hosts:
        size = draw(st.integers(1, 4))
        name = None if draw(st.integers(0, 5)) == 0 else f"r{len(rack_of)}"
        rack_of += [name] * size
    rack_of = rack_of[:hosts]
    if draw(st.booleans()):
        rack_of = [f"r{i % 2}" for i in range(hosts)]
    leaf_of = [f"l{i // 5}" for i in range(hosts)]
    tiers = [Tier("rack", nvlink=True), Tier("leaf")]
    return Allocation([Host(f"h{i}", gpus, (rack_of[i], leaf_of[i])) for i in range(hosts)], tiers)


@settings(max_examples=80, deadline=None)
@given(topologies(max_world_size=48), st.sampled_from([1, 2, 3, 4, 8]), st.data())
def test_interval_count_equals_the_rank_walk(
    topo: Topology, gpus: int, data: st.DataObject
) -> None:
    """Any layout (rank_offset included), hosts of any size, consecutive or scattered domains."""
    end = topo.rank_offset + topo.world_size
    alloc = data.draw(allocations(gpus, -(-end // gpus)), label="allocation")
    found = crossings(topo, alloc.rank_map(end))
    expected = _walk(topo, alloc)
    assert {k: list(found.crossing[found.kinds.index(k)]) for k in expected} == expected


def test_a_huge_uniform_map_walks_no_rank() -> None:
    """2**26 ranks on 1,024 hosts: counted without the rank-by-rank path."""
    alloc = Allocation([Host(f"n{i}", 1 << 16) for i in range(1024)])
    with mock.patch.object(crossings_module, "count_crossings", side_effect=AssertionError):
        found = crossings(Topology(1 << 26, tp=8), alloc.rank_map(1 << 26))
    assert found.count("tp", "node") == 0 and found.count("dp", "node") == 8


def test_interleaved_racks_of_a_huge_uniform_map_walk_no_rank() -> None:
    """2**26 ranks (tp 8, pp 8) on 1,024 hosts of 65,536 GPUs, host i in rack i % 2 (no rack
    is a run of hosts): counted from the kinds' shapes, no rank list. A pp group's stages are
    128 hosts apart (stride tp * dp = 2**23 ranks), so all in one rack: every pp group crosses
    hosts, none a rack; each of the 64 dp groups spans 128 consecutive hosts, so both racks."""
    hosts = [Host(f"n{i}", 1 << 16, (f"r{i % 2}",)) for i in range(1024)]
    alloc = Allocation(hosts, [Tier("rack", nvlink=True)])
    with mock.patch.object(crossings_module, "host_sets", side_effect=AssertionError):
        found = crossings(Topology(1 << 26, tp=8, pp=8), alloc.rank_map(1 << 26))
    assert (found.count("pp", "node"), found.count("pp", "rack")) == (1 << 23, 0)
    assert (found.count("dp", "node"), found.count("dp", "rack")) == (64, 64)
    assert found.count("tp", "rack") == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), max_size=3), st.integers(-2, 80))
def test_bases_up_to_counts_the_points(steps: Sequence[tuple[int, int]], limit: int) -> None:
    """Nested runs (each stride past the span below): the points <= limit, counted."""
    runs, span = [], 0
    for size, gap in steps:
        runs.append((size, span + gap))
        span += (size - 1) * (span + gap)
    points = [
        sum(c * e for c, (_, e) in zip(cs, runs, strict=True))
        for cs in itertools.product(*(range(s) for s, _ in runs))
    ]
    assert _bases_up_to(limit, runs) == sum(p <= limit for p in points)


@settings(max_examples=80, deadline=None)
@given(topologies(max_world_size=48), st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
def test_slot_sets_equal_host_sets_on_a_rank_list(topo: Topology, gpus: int) -> None:
    """Hosts of ``gpus`` consecutive ranks: the shape-based host sets equal the rank walk's."""
    end = topo.rank_offset + topo.world_size
    nodes = [r // gpus for r in range(end)]
    for kind in (k for k in PLACED_KINDS if k in topo.kinds):
        assert slot_sets(topo, kind, gpus) == host_sets(topo, kind, nodes)
