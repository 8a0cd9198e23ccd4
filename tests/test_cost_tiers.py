"""The cost model on real rank maps: tier links, hierarchical all-reduce, Cluster equivalence.

Laws: the hierarchical all-reduce is the flat ring in its degenerate cases, equals the
composition reduce-scatter + all-reduce of a shard + all-gather, and is never slower than the
flat ring on the outer link when the inner link is at least as fast in latency and bandwidth
(and can be slower when only the bandwidth is); on a rank map that a Cluster describes and whose
tiers carry no figures, the flat estimate equals the Cluster's for every layout; hierarchical
pricing never costs more there; tier figures price the tiers they belong to.
"""

from __future__ import annotations

import math
import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Allocation, Cluster, Host, Tier, Topology, TopologyError
from topology._machine.rankmap import RankMap
from topology.cost import (
    A100_NODE,
    H100_NODE,
    MODELS,
    TOY_GPU,
    Hardware,
    Link,
    Workload,
    all_gather,
    all_reduce,
    estimate,
    plan,
    reduce_scatter,
)
from topology.cost._collectives import hierarchical_all_reduce
from topology.cost._tiers import Tiers, domain_split
from topology.strategies import topologies

# -- the hierarchical all-reduce --------------------------------------------------------------

latencies = st.floats(0.0, 1e-3, allow_subnormal=False)
bandwidths = st.floats(1e6, 1e12, allow_subnormal=False)
links = st.builds(Link, latency=latencies, bandwidth=bandwidths)
counts = st.integers(1, 64)
payloads = st.one_of(st.just(0.0), st.floats(1.0, 1e12))
"""Data units: none, or at least one byte (tinier sizes make results subnormal, where rounding
is no longer relative)."""


@given(links, links, counts, payloads)
def test_one_rank_per_domain_is_the_flat_ring_across(
    inner: Link, outer: Link, k: int, size: float
) -> None:
    """m == 1: nothing to do inside; the ring runs across the k domains."""
    assert hierarchical_all_reduce(inner, outer, 1, k, size) == all_reduce(outer, k, size)


@given(links, counts, payloads)
def test_one_domain_on_one_link_is_the_flat_ring(link: Link, m: int, size: float) -> None:
    """k == 1 and inner == outer: reduce-scatter + all-gather is the ring all-reduce."""
    assert hierarchical_all_reduce(link, link, m, 1, size) == all_reduce(link, m, size)


@given(links, links, counts, counts, payloads)
def test_is_the_composition_of_its_phases(
    inner: Link, outer: Link, m: int, k: int, size: float
) -> None:
    """Reduce-scatter inside, all-reduce of one m-th across, all-gather inside."""
    composed = (
        reduce_scatter(inner, m, size) + all_reduce(outer, k, size / m) + all_gather(inner, m, size)
    )
    assert math.isclose(hierarchical_all_reduce(inner, outer, m, k, size), composed, rel_tol=1e-12)


@given(links, links, counts, counts, payloads)
def test_matches_the_closed_form(inner: Link, outer: Link, m: int, k: int, size: float) -> None:
    """2 (m-1) (a_i + S / (m B_i)) + 2 (k-1) (a_o + S / (m k B_o)), written out by hand."""
    inside = 2 * (m - 1) * (inner.latency + size / (m * inner.bandwidth))
    across = 2 * (k - 1) * (outer.latency + size / (m * k * outer.bandwidth))
    got = hierarchical_all_reduce(inner, outer, m, k, size)
    assert math.isclose(got, inside + across, rel_tol=1e-9, abs_tol=1e-300)


@st.composite
def faster_pairs(draw: st.DrawFn) -> tuple[Link, Link]:
    """(inner, outer) with the inner link at least as fast in latency and in bandwidth."""
    outer = draw(links)
    latency = draw(st.floats(0.0, outer.latency, allow_subnormal=False))
    bandwidth = draw(st.floats(outer.bandwidth, 1e13, allow_subnormal=False))
    return Link(latency=latency, bandwidth=bandwidth), outer


@given(faster_pairs(), counts, counts, payloads)
def test_never_slower_than_the_flat_ring_on_the_outer_link(
    pair: tuple[Link, Link], m: int, k: int, size: float
) -> None:
    """flat - hierarchical = 2 (m-1) ((k a_o - a_i) + (1/B_o - 1/B_i) S / m) >= 0."""
    inner, outer = pair
    flat = all_reduce(outer, m * k, size)
    assert hierarchical_all_reduce(inner, outer, m, k, size) <= flat * (1 + 1e-12)


def test_a_faster_bandwidth_alone_does_not_make_it_cheaper() -> None:
    """The claim needs latency too: a slow-to-start inner link loses on a small message."""
    inner = Link(latency=1.0, bandwidth=1e9)
    outer = Link(latency=0.1, bandwidth=1e6)
    # hierarchical: 2*3*(1 + 1/4e9) + 2*1*(0.1 + 1/8e6) ~ 6.2; flat: 2*7*(0.1 + 1/8e6) ~ 1.4
    assert hierarchical_all_reduce(inner, outer, 4, 2, 1.0) > all_reduce(outer, 8, 1.0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((None, TOY_GPU.inter, 2, 2, 1.0), "inner must be a Link"),
        ((TOY_GPU.intra, "inter", 2, 2, 1.0), "outer must be a Link"),
        ((TOY_GPU.intra, TOY_GPU.inter, 0, 2, 1.0), "m must be a positive int"),
        ((TOY_GPU.intra, TOY_GPU.inter, 2, 2.0, 1.0), "k must be a positive int"),
        ((TOY_GPU.intra, TOY_GPU.inter, 2, 2, -1.0), "size"),
    ],
)
def test_hierarchical_all_reduce_checks_its_arguments(
    args: tuple[object, ...], message: str
) -> None:
    with pytest.raises(TopologyError, match=re.escape(message)):
        hierarchical_all_reduce(*args)  # type: ignore[arg-type]


def test_domain_split_needs_equal_domains() -> None:
    assert domain_split(((0, 4), (1, 4), (2, 4)), [0, 1, 2]) == (4, 3)
    assert domain_split(((0, 4), (1, 4), (2, 4)), [0, 0, 1]) is None
    assert domain_split(((0, 3),), [0]) == (3, 1)


# -- a rank map that a Cluster describes ------------------------------------------------------


@st.composite
def hardwares(draw: st.DrawFn) -> Hardware:
    """A preset, or a GPU whose intra link is at least as fast as inter in both figures."""
    preset = draw(st.sampled_from([None, H100_NODE, A100_NODE, TOY_GPU]))
    if preset is not None:
        return preset
    inner, outer = draw(faster_pairs())
    return Hardware("drawn", compute_rate=draw(bandwidths), intra=inner, inter=outer)


@st.composite
def uniform_maps(draw: st.DrawFn, topology: Topology) -> RankMap:
    """Hosts of G GPUs, optionally NVLink domains of d hosts, tiers without figures."""
    need = topology.rank_offset + topology.world_size
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    hosts = -(-need // gpus) + draw(st.integers(0, 2))
    per_domain = draw(st.integers(1, 4))
    per_outer = draw(st.integers(1, 3))
    shape = draw(st.sampled_from(["none", "nvlink", "tray-nvlink-spine", "leaf-spine"]))
    tiers: list[Tier] = []
    labels: list[list[str | None]] = [[] for _ in range(hosts)]

    def add(tier: Tier, width: int) -> None:
        tiers.append(tier)
        for h in range(hosts):
            labels[h].append(f"{tier.name}{h // width}")

    if shape == "tray-nvlink-spine":
        add(Tier("tray"), draw(st.integers(1, per_domain)))
    if shape in ("nvlink", "tray-nvlink-spine"):
        add(Tier("nvl", nvlink=True), per_domain)
    if shape == "tray-nvlink-spine":
        add(Tier("spine"), per_domain * per_outer)
    if shape == "leaf-spine":  # no NVLink tier: any tier is outside the host, nested or not
        add(Tier("leaf"), per_domain)
        add(Tier("spine"), draw(st.integers(1, 5)))
    alloc = Allocation([Host(f"h{h}", gpus, tuple(labels[h])) for h in range(hosts)], tiers)
    return alloc.rank_map(hosts * gpus)


@st.composite
def workloads(draw: st.DrawFn, topology: Topology) -> Workload:
    """A workload the layout can run: layers over pp * vpp, samples over dp micro-batches."""
    layers = topology.pp * (topology.vpp or 1) * draw(st.integers(1, 3))
    micro_batch = draw(st.integers(1, 3))
    amount = st.floats(0.0, 1e9, allow_subnormal=False)
    return Workload(
        "drawn",
        samples=topology.dp * micro_batch * draw(st.integers(1, 4)),
        micro_batch=micro_batch,
        compute=draw(amount),
        gradient=draw(amount),
        expert_gradient=draw(amount),
        layers=layers,
        activation=draw(amount),
        moe_layers=draw(st.integers(0, layers)),
        top_k=draw(st.integers(1, 2)),
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[Topology, RankMap, Workload, Hardware]:
    topology = draw(topologies(max_world_size=48, max_rank_offset=8))
    return (
        topology,
        draw(uniform_maps(topology)),
        draw(workloads(topology)),
        draw(hardwares()),
    )


def _as_cluster_links(links: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    return tuple(
        (name, link if link in ("intra", "inter", "none") else "inter") for name, link in links
    )


@given(cases())
def test_flat_estimate_on_a_uniform_map_equals_the_clusters(
    case: tuple[Topology, RankMap, Workload, Hardware],
) -> None:
    """Two formulations of the same machine: per-group tier crossings vs Cluster arithmetic."""
    topology, rank_map, work, hardware = case
    cluster = rank_map.as_cluster()
    assert isinstance(cluster, Cluster)
    on_map = estimate(topology, rank_map, work, hardware, hierarchical=False)
    on_cluster = estimate(topology, cluster, work, hardware)
    assert on_map.communication == on_cluster.communication
    assert (on_map.compute, on_map.bubble, on_map.total) == (
        on_cluster.compute,
        on_cluster.bubble,
        on_cluster.total,
    )
    assert on_map.memory == on_cluster.memory
    assert _as_cluster_links(on_map.links) == on_cluster.links
    assert on_map.to_dict()["links"] == on_cluster.to_dict()["links"]


@given(cases())
def test_hierarchical_pricing_never_costs_more_there(
    case: tuple[Topology, RankMap, Workload, Hardware],
) -> None:
    """With intra at least as fast as inter, splitting an all-reduce never loses; the sends
    and all-to-alls (cp, ep, pp) and the links named do not change."""
    topology, rank_map, work, hardware = case
    flat = estimate(topology, rank_map, work, hardware, hierarchical=False)
    tiered = estimate(topology, rank_map, work, hardware)
    assert tiered.links == flat.links
    for name in ("cp", "ep", "pp"):
        assert tiered.comm(name) == flat.comm(name)
    for name in ("tp", "dp", "edp"):
        assert tiered.comm(name) <= flat.comm(name) * (1 + 1e-12)


# -- hand-built machines ----------------------------------------------------------------------


def _racks(sizes: list[int], tiers: list[Tier], spine_of: list[int]) -> Allocation:
    """Hosts node1.. of 4 GPUs, rack after rack, each rack under spine ``spine_of[rack]``."""
    hosts: list[Host] = []
    for rack, size in enumerate(sizes):
        for _ in range(size):
            name = f"node{len(hosts) + 1}"
            hosts.append(Host(name, 4, (f"rack{rack}", f"spine{spine_of[rack]}")))
    return Allocation(hosts, tiers)


def test_scattered_ragged_nvl72_costs_more_than_natural_order() -> None:
    """torchrun's lexicographic order (node10 before node2) scatters expert groups over racks.

    Racks of 18, 18, 16, 12 hosts: with etp = 1 an ep group of 8 ranks is 2 hosts; natural
    order keeps every pair in one rack (the racks hold even host counts), lexicographic order
    pairs node19 with node2 and so on, so ep leaves the NVLink domain.
    """
    tiers = [Tier("nvl72", nvlink=True), Tier("spine", bandwidth=25e9, latency=20e-6)]
    alloc = _racks([18, 18, 16, 12], tiers, [0, 0, 1, 1])
    topology = Topology(256, tp=4, ep=8, etp=1, pp=4)
    model = MODELS["mixtral-8x7b"]
    natural = estimate(topology, alloc.rank_map(256, order="natural"), model, H100_NODE)
    scattered = estimate(topology, alloc.rank_map(256, order="lexicographic"), model, H100_NODE)
    assert natural.link("ep") == "intra"
    assert scattered.link("ep") == "spine"
    assert scattered.comm("ep") > natural.comm("ep")
    assert scattered.total > natural.total


def test_ragged_racks_with_expert_groups_over_eight_hosts_tie() -> None:
    """etp = tp: an ep group spans 8 hosts, so natural order also straddles a rack boundary
    (18 is not a multiple of 8) and the spine (rack 1 | rack 2); the worst group prices both."""
    tiers = [Tier("nvl72", nvlink=True), Tier("spine", bandwidth=25e9, latency=20e-6)]
    alloc = _racks([18, 18, 16, 12], tiers, [0, 0, 1, 1])
    topology = Topology(256, tp=4, ep=8, pp=4)
    model = MODELS["mixtral-8x7b"]
    natural = estimate(topology, alloc.rank_map(256, order="natural"), model, H100_NODE)
    scattered = estimate(topology, alloc.rank_map(256, order="lexicographic"), model, H100_NODE)
    assert natural.link("ep") == scattered.link("ep") == "spine"
    assert natural.total == scattered.total


def test_nvlink_tier_figures_price_hosts_inside_the_domain() -> None:
    """Differential: an NVLink tier's own link equals a Cluster on hardware with that intra."""
    nvl = Link(latency=2e-6, bandwidth=900e9)
    alloc = Allocation(
        [Host(f"n{i}", 4, (f"r{i // 2}",)) for i in range(4)],
        [Tier("nvl", bandwidth=nvl.bandwidth, latency=nvl.latency, nvlink=True)],
    )
    topology = Topology(16, tp=8)  # tp crosses two hosts in a rack; dp crosses racks
    work = Workload("w", samples=4, micro_batch=1, compute=1e12, gradient=1e9, activation=1e8)
    on_map = estimate(topology, alloc.rank_map(16), work, H100_NODE, hierarchical=False)
    faster = attrs.evolve(H100_NODE, intra=nvl)
    on_cluster = estimate(topology, Cluster(4, nvlink_domain=8), work, faster)
    assert on_map.communication == on_cluster.communication
    assert (on_map.link("tp"), on_map.link("dp")) == ("intra", "nvl")


def test_outer_tier_figures_price_its_crossing_with_fallback() -> None:
    """A tier's bandwidth prices a group crossing it; its missing latency is hardware.inter's."""
    alloc = Allocation([Host(f"n{i}", 4, (f"s{i}",)) for i in range(2)], [Tier("spine", 5e9)])
    topology = Topology(8, tp=4)
    work = Workload("w", samples=2, micro_batch=1, compute=1e12, gradient=1e9)
    on_map = estimate(topology, alloc.rank_map(8), work, H100_NODE, hierarchical=False)
    slower = attrs.evolve(H100_NODE, inter=Link(latency=H100_NODE.inter.latency, bandwidth=5e9))
    on_cluster = estimate(topology, Cluster(4), work, slower)
    assert on_map.communication == on_cluster.communication
    assert on_map.link("dp") == "spine"
    assert on_map.to_dict()["links"]["dp"] == "inter"
    assert on_map.to_dict()["link_tiers"]["dp"] == "spine"
    assert "link_tiers" not in on_cluster.to_dict()
    assert "(across spine)" in str(on_map)


def test_a_fast_tier_does_not_hide_a_slower_one() -> None:
    """The slowest crossed level wins: a fast leaf under a slow spine prices at the spine."""
    hosts = [Host(f"n{i}", 2, (f"l{i // 2}", f"s{i // 4}")) for i in range(8)]
    alloc = Allocation(hosts, [Tier("leaf", bandwidth=100e9), Tier("spine", bandwidth=10e9)])
    tiers = Tiers.of(alloc.rank_map(16), H100_NODE)
    widths = {k: tiers.route(Topology(16, tp=k), "tp").level.name for k in (2, 4, 8, 16)}
    assert widths == {2: "intra", 4: "inter", 8: "leaf", 16: "spine"}
    slow_leaf = Allocation(hosts, [Tier("leaf", bandwidth=1e9), Tier("spine", bandwidth=10e9)])
    tiers = Tiers.of(slow_leaf.rank_map(16), H100_NODE)
    assert tiers.route(Topology(16, tp=16), "tp").level.name == "leaf"


def test_hierarchical_all_reduce_on_uniform_racks() -> None:
    """dp over 4 racks of 2 hosts, 8 ranks per rack: 2 x 4-rank RS/AG inside + 4-rank ring
    across; the estimate's dp line is that collective of the dense gradient."""
    alloc = Allocation(
        [Host(f"n{i}", 4, (f"r{i // 2}",)) for i in range(8)], [Tier("nvl", nvlink=True)]
    )
    topology = Topology(32, tp=1, order="dp-tp-cp-ep-pp")
    work = Workload("w", samples=32, micro_batch=1, compute=1e12, gradient=1e10)
    tiered = estimate(topology, alloc.rank_map(32), work, H100_NODE)
    flat = estimate(topology, alloc.rank_map(32), work, H100_NODE, hierarchical=False)
    expected = hierarchical_all_reduce(H100_NODE.intra, H100_NODE.inter, 8, 4, 1e10)
    assert tiered.comm("dp") == pytest.approx(expected, rel=1e-12)
    assert flat.comm("dp") == pytest.approx(all_reduce(H100_NODE.inter, 32, 1e10), rel=1e-12)
    assert tiered.comm("dp") < flat.comm("dp")


def test_estimate_on_a_rank_map_checks_its_size() -> None:
    alloc = Allocation([Host("a", 4), Host("b", 4)])
    work = Workload("w", samples=8, micro_batch=1, compute=1.0, gradient=1.0)
    with pytest.raises(TopologyError, match="the rank map holds 4 ranks"):
        estimate(Topology(8), alloc.rank_map(4), work, H100_NODE)
    with pytest.raises(TopologyError, match="or give a RankMap"):
        estimate(Topology(8), alloc, work, H100_NODE)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="hierarchical"):
        estimate(Topology(8), alloc.rank_map(8), work, H100_NODE, hierarchical=1)  # type: ignore[arg-type]


# -- plan on a rank map -----------------------------------------------------------------------


def _spine_racks() -> Allocation:
    hosts = [Host(f"n{i}", 4, (f"r{i // 4}", f"s{i // 8}")) for i in range(16)]
    return Allocation(hosts, [Tier("nvl", nvlink=True), Tier("spine", bandwidth=10e9)])


def test_plan_on_a_rank_map_ranks_its_estimates() -> None:
    """Every ranked layout is estimate() on the map, fastest first; an Allocation plans as its
    listed rank map; tp stays within the largest NVLink domain (16 GPUs) by default."""
    alloc = _spine_racks()
    rank_map = alloc.rank_map(64)
    model = MODELS["llama-13b"]
    result = plan(64, rank_map, model, top=4)
    assert len(result.ranked) == 4
    for found in result.ranked:
        assert found == estimate(found.topology, rank_map, model, H100_NODE)
        assert found.topology.tp <= 16
    totals = [found.total for found in result.ranked]
    assert totals == sorted(totals)
    assert plan(64, alloc, model, top=4).ranked == result.ranked
    assert result.to_dict()["gpus_per_node"] == 4


def test_plan_on_a_rank_map_checks_its_size() -> None:
    alloc = _spine_racks()
    with pytest.raises(TopologyError, match="does not match the rank map's 32 ranks"):
        plan(64, alloc.rank_map(32), MODELS["llama-7b"])
    with pytest.raises(TopologyError, match="exceeds the allocation's 64 GPUs"):
        plan(128, alloc, MODELS["llama-7b"])


def test_hsdp_gradient_reduction_is_priced_shard_then_replica() -> None:
    """Topology(8, dist_opt_instances=2): dp 8 = 2 replicas x shard groups of 4. With the toy
    link (latency 0.05 s, 100 units/s) and gradient 500: reduce-scatter and all-gather over 4
    ranks cost 3 * (0.05 + 125 / 100) = 3.9 s each, the all-reduce of 500 / 4 over 2 replicas
    2 * 1 * (0.05 + 62.5 / 100) = 1.35 s: 9.15 s, against 2 * 7 * (0.05 + 62.5 / 100) = 9.45 s
    for one flat all-reduce over 8."""
    from topology import Cluster, Topology
    from topology.cost import TOY_GPU, Workload, estimate

    toy = Workload("toy", samples=16, micro_batch=1, compute=20.0, gradient=500.0)
    hsdp = estimate(Topology(8, dist_opt_instances=2), Cluster(8), toy, TOY_GPU)
    flat = estimate(Topology(8), Cluster(8), toy, TOY_GPU)
    assert round(hsdp.comm("dp"), 9) == 9.15
    assert round(flat.comm("dp"), 9) == 9.45
