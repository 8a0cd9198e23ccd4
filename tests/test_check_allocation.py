"""check() on a real rank map: the uniform case equals the Cluster check, crossings and NVLS
counts equal brute force, and host orders that scatter groups are caught."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import (
    Allocation,
    Cluster,
    Host,
    Tier,
    Topology,
    TopologyError,
    check,
    compress_hostlist,
    crossings,
    place,
)
from topology._preflight.budget import nvls_groups, nvls_groups_sampled
from topology.strategies import topologies


def _uniform(topo: Topology, gpus: int, per_domain: int | None) -> Allocation:
    """Hosts of ``gpus`` GPUs covering the layout, ``per_domain`` consecutive hosts per rack."""
    end = topo.rank_offset + topo.world_size
    count = -(-end // gpus)
    if per_domain is None:
        return Allocation([Host(f"h{i}", gpus) for i in range(count)])
    hosts = [Host(f"h{i}", gpus, (f"rack{i // per_domain}",)) for i in range(count)]
    return Allocation(hosts, [Tier("rack", nvlink=True)])


@settings(max_examples=60, deadline=None)
@given(
    topologies(max_world_size=32),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([None, 1, 2, 3]),
)
def test_a_uniform_map_is_checked_as_its_cluster(
    topo: Topology, gpus: int, per_domain: int | None
) -> None:
    end = topo.rank_offset + topo.world_size
    alloc = _uniform(topo, gpus, per_domain)
    rank_map = alloc.rank_map(len(alloc.hosts) * gpus)
    cluster = rank_map.as_cluster()
    assert cluster is not None
    by_map = check(topo, rank_map)
    by_cluster = check(topo, cluster)
    assert by_map.placements == by_cluster.placements
    # The map adds only what a host order could fix; consecutive racks leave nothing to fix.
    fixable = {f.code for f in by_map.findings} - {f.code for f in by_cluster.findings}
    assert fixable <= {"tp-crosses-tier", "etp-crosses-tier", "cp-crosses-tier", "ep-crosses-tier"}
    assert by_map.crossings is not None and end <= rank_map.world_size


def _brute_crossings(topo: Topology, alloc: Allocation, order: str) -> dict[tuple[str, str], int]:
    """Crossings from each rank's Location, without the host-set reduction."""
    rank_map = alloc.rank_map(topo.rank_offset + topo.world_size, order=order)
    where = [rank_map.location(r) for r in range(rank_map.world_size)]
    found = {}
    for kind in ("tp", "etp", "ep", "cp", "pp", "dp", "edp"):
        groups = [g for g in topo.groups(kind) if len(g) > 1]
        found[kind, "node"] = sum(len({where[r].host for r in g}) > 1 for g in groups)
        for t, tier in enumerate(alloc.tiers):
            found[kind, tier.name] = sum(
                len({where[r].domains[t] or f"?{where[r].host}" for r in g}) > 1 for g in groups
            )
    return found


@settings(max_examples=60, deadline=None)
@given(
    topologies(max_world_size=32),
    st.sampled_from([1, 2, 4]),
    st.lists(st.sampled_from(["a", "b", "c", None]), min_size=64, max_size=64),
    st.sampled_from(["listed", "lexicographic", "natural"]),
)
def test_crossings_equal_brute_force(
    topo: Topology, gpus: int, racks: list[str | None], order: str
) -> None:
    end = topo.rank_offset + topo.world_size
    count = -(-end // gpus)
    hosts = [Host(f"n{i}", gpus, (racks[i], f"s{i % 3}")) for i in range(count)]
    alloc = Allocation(hosts, [Tier("rack", nvlink=True), Tier("spine")])
    found = crossings(topo, alloc.rank_map(end, order=order))
    expected = _brute_crossings(topo, alloc, order)
    assert {(k, t): found.count(k, t) for k, t in expected} == expected


@settings(max_examples=40, deadline=None)
@given(topologies(max_world_size=64), st.sampled_from([2, 4, 8, 16]))
def test_nvls_counts_equal_brute_force(topo: Topology, size: int) -> None:
    end = topo.rank_offset + topo.world_size
    labels = [r // size for r in range(end)]
    distinct: dict[int, set[tuple[int, ...]]] = {}
    for kind in topo.kinds:
        for group in topo.groups(kind):
            for domain, n in Counter(labels[r] for r in group).items():
                if n > 1:
                    distinct.setdefault(domain, set()).add(tuple(group))
    most = max((len(s) for s in distinct.values()), default=0)
    assert nvls_groups(topo, labels)[0] == most
    domains = sorted(set(labels[topo.rank_offset :]))
    assert nvls_groups_sampled(topo, size, domains)[0] == most


def _scattered() -> Allocation:
    """Racks of 18, 18, 16 and 12 four-GPU trays, names node1..node64 without zero padding."""
    hosts = []
    number = 0
    for rack, trays in enumerate((18, 18, 16, 12)):
        for _ in range(trays):
            number += 1
            hosts.append(Host(f"node{number}", 4, (f"rack{rack}",)))
    return Allocation(hosts, [Tier("nvl72", nvlink=True)])


def test_torchrun_order_scattering_tp_is_an_error_and_place_fixes_it() -> None:
    topo = Topology(256, tp=8, pp=4)
    alloc = _scattered()
    launched = check(topo, alloc.rank_map(256, order="lexicographic"))
    assert "tp-crosses-tier" in {f.code for f in launched.errors}
    placed = place(topo, alloc, order="lexicographic")
    again = check(topo, alloc.with_order(placed.hosts).rank_map(256))
    assert again.ok
    assert again.crossings == placed.after


def test_ep_crossing_a_rack_is_a_warning() -> None:
    topo = Topology(256, tp=4, ep=8, pp=4)
    report = check(topo, _scattered().rank_map(256, order="lexicographic"))
    warning = next(f for f in report.warnings if f.code == "ep-crosses-tier")
    assert "nvl72" in warning.message
    assert len({r // 4 for r in warning.example}) > 1


def test_nvls_limit_and_memory_are_reported() -> None:
    topo = Topology(64, tp=8, pp=2)
    report = check(topo, Cluster(8), nvls_limit=2, nccl_memory=1e9)
    codes = report.codes()
    assert "too-many-nvls-groups" in codes
    line = next(f for f in report.findings if f.code == "communicators")
    assert f"{report.communicators.per_rank_max:.3g} GB" in line.message


def test_a_map_smaller_than_the_layout_is_an_error_finding() -> None:
    alloc = Allocation([Host("a", 4), Host("b", 4)])
    report = check(Topology(16, tp=4), alloc.rank_map(8))
    assert "world-size-mismatch" in {f.code for f in report.errors}
    assert report.crossings is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nccl_memory": -1}, "nccl_memory must be a finite number"),
        ({"nccl_memory": float("inf")}, "nccl_memory must be a finite number"),
        ({"nvls_limit": 0}, "nvls_limit must be a positive int"),
    ],
)
def test_budget_arguments_are_checked(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        check(Topology(8), Cluster(8), **kwargs)  # type: ignore[arg-type]


def test_mixed_gpu_counts_are_refused() -> None:
    """The refusal names each GPU count with its hosts."""
    alloc = Allocation([Host("a", 4), Host("b", 8)])
    with pytest.raises(
        TopologyError,
        match=r"equal GPU counts .*, got 4 GPUs on 1 host \(a\), 8 GPUs on 1 host \(b\)",
    ):
        check(Topology(12), alloc.rank_map(12))


def test_check_counts_separate_and_independent_communicators() -> None:
    """Topology(16, tp=2, pp=2): dp and dp-cp share their 4 groups; separate=("dp",) makes them
    4 more communicators, independent=("tp",) 8 more (one copy per tp group)."""
    topo = Topology(16, tp=2, pp=2)
    plain = check(topo, Cluster(8)).communicators
    apart = check(topo, Cluster(8), separate=("dp",), independent=("tp",)).communicators
    assert apart.all == plain.all + 4 + 8
    assert apart.per_rank_max == plain.per_rank_max + 2
    assert ("dp", "dp-cp") not in apart.shared
    with pytest.raises(TopologyError, match="separate must be a sequence of kinds"):
        check(topo, Cluster(8), separate="dp")


@settings(max_examples=30, deadline=None)
@given(topologies(max_world_size=32), st.sampled_from([1, 2, 3, 4, 6, 8]))
def test_findings_name_the_hosts_of_their_example(topo: Topology, gpus: int) -> None:
    """On an allocation every finding's example names the hosts its first 64 ranks run on,
    first seen first, in the text (as a host list) and in the JSON (``example_hosts``); a rank
    past the allocation (a node's GPUs the map leaves unused) runs on no host."""
    world = topo.rank_offset + topo.world_size
    alloc = Allocation([Host(f"n{i}", gpus) for i in range(-(-world // gpus))])
    report = check(topo, alloc.rank_map(world))
    text = report.render()
    for finding, data in zip(report.findings, report.to_dict()["findings"], strict=True):
        hosts = list(dict.fromkeys(f"n{r // gpus}" for r in finding.example[:64] if r < world))
        assert data["example_hosts"] == hosts
        if hosts and finding.severity != "info":
            assert f"] on {compress_hostlist(hosts)}" in text


def test_a_node_the_map_fills_in_part_names_only_the_ranks_it_runs() -> None:
    """Golden: ``Topology(1, rank_offset=1)`` on 2 ranks of one 3-GPU host. The layout starts
    mid-node, and the finding's example is the node's three GPUs (0, 1, 2); rank 2 is not in
    the allocation, so the hosts are those of ranks 0 and 1: ``n0``."""
    report = check(Topology(1, rank_offset=1), Allocation([Host("n0", 3)]).rank_map(2))
    finding = next(f for f in report.findings if f.code == "rank-offset-unaligned")
    assert finding.example == (0, 1, 2)
    assert report.example_hosts(finding) == ("n0",)
    assert "] on n0" in report.render()


def test_a_layout_larger_than_its_map_names_the_hosts_it_has() -> None:
    """Golden: tp 16 on a map of 8 ranks (one 8-GPU host): the tp group's ranks 8-15 run
    nowhere, so its example names ``a`` alone, in the text and the JSON."""
    report = check(Topology(16, tp=16), Allocation([Host("a", 8)]).rank_map(8))
    data = {f["code"]: f for f in report.to_dict()["findings"]}
    assert data["tp-larger-than-node"]["example"] == list(range(16))
    assert data["tp-larger-than-node"]["example_hosts"] == ["a"]
    assert "] on a" in report.render()


def test_findings_name_no_hosts_without_an_allocation() -> None:
    """A uniform cluster has no host names: the JSON holds no ``example_hosts``."""
    report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
    assert all("example_hosts" not in f for f in report.to_dict()["findings"])
    assert "] on " not in report.render()
