"""Allocation and RankMap: launcher orders and the rank -> (host, GPU, domains) map.

The reference model walks GPU slots host by host, by counting, not by the bisection the code
uses.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topology import Allocation, Cluster, Host, Location, Tier, TopologyError
from topology._machine.hostlist import natural_key
from topology._machine.hosts import LAUNCHER_ORDERS, launcher_order

RACK = Tier("rack", bandwidth=900e9, latency=2e-6, nvlink=True)
LEAF = Tier("leaf", bandwidth=50e9, latency=10e-6)


@st.composite
def allocations(draw: st.DrawFn, max_hosts: int = 12) -> Allocation:
    """Ragged allocations: any GPU counts, racks of any size, unknown domains, any names."""
    count = draw(st.integers(1, max_hosts))
    names = draw(
        st.lists(
            st.from_regex(r"[a-z]{1,3}[0-9]{0,3}", fullmatch=True),
            min_size=count,
            max_size=count,
            unique=True,
        )
    )
    racks = st.none() | st.sampled_from(["r1", "r2", "r3"])
    leaves = st.none() | st.sampled_from(["l1", "l2"])
    hosts = [Host(name, draw(st.integers(1, 8)), (draw(racks), draw(leaves))) for name in names]
    return Allocation(hosts, (RACK, LEAF))


def slots(hosts: tuple[Host, ...]) -> list[tuple[str, int]]:
    """(host, local GPU) of every GPU, host after host."""
    return [(host.name, gpu) for host in hosts for gpu in range(host.gpus)]


# ---- laws ----


@given(allocations(), st.sampled_from(LAUNCHER_ORDERS), st.data())
def test_rank_map_walks_the_gpus_of_the_ordered_hosts(
    alloc: Allocation, order: str, data: st.DataObject
) -> None:
    """Rank r runs on the r-th GPU slot of the hosts in launcher order."""
    world = data.draw(st.integers(1, alloc.gpus))
    ranks = alloc.rank_map(world, order=order)
    expected = slots(launcher_order(alloc.hosts, order))[:world]
    assert [(loc.host, loc.local_gpu) for loc in ranks] == expected


@given(allocations(), st.sampled_from(LAUNCHER_ORDERS), st.data())
def test_rank_map_is_a_bijection_onto_the_first_hosts_gpus(
    alloc: Allocation, order: str, data: st.DataObject
) -> None:
    """Ending on a host boundary, ranks and the GPUs of the hosts used match one to one."""
    ordered = launcher_order(alloc.hosts, order)
    used = data.draw(st.integers(1, len(ordered)))
    world = sum(h.gpus for h in ordered[:used])
    ranks = alloc.rank_map(world, order=order)
    places = {(loc.host, loc.local_gpu) for loc in ranks}
    assert len(places) == world
    assert places == set(slots(ordered[:used]))
    assert ranks.host_order == tuple(h.name for h in ordered[:used])


@given(allocations(), st.data())
def test_listed_order_is_preserved(alloc: Allocation, data: st.DataObject) -> None:
    """The listed order numbers hosts exactly as the allocation lists them."""
    ranks = alloc.rank_map(alloc.gpus)
    assert ranks.host_order == tuple(h.name for h in alloc.hosts)
    rank = data.draw(st.integers(0, alloc.gpus - 1))
    assert ranks.hosts[ranks.node_of(rank)].name == ranks.location(rank).host


@given(allocations())
def test_orders_sort_by_their_keys(alloc: Allocation) -> None:
    """lexicographic is str order, natural is natural_key order, both permutations."""
    names = [h.name for h in alloc.hosts]
    assert [h.name for h in alloc.ordered("lexicographic").hosts] == sorted(names)
    assert [h.name for h in alloc.ordered("natural").hosts] == sorted(names, key=natural_key)
    assert sorted(h.name for h in alloc.ordered("slurm").hosts) == sorted(names)


@given(allocations(), st.data())
def test_domain_ids_label_equal_domains_equally(alloc: Allocation, data: st.DataObject) -> None:
    """Two ranks share a label iff their hosts name the same domain (unknown: own host only)."""
    ranks = alloc.rank_map(data.draw(st.integers(1, alloc.gpus)))
    for tier in ("rack", "leaf"):
        ids = ranks.domain_ids(tier)
        index = alloc.tier_index(tier)
        locs = list(ranks)
        for a in locs[:12]:
            for b in locs:
                da, db = a.domains[index], b.domains[index]
                same = a.host == b.host if da is None or db is None else da == db
                assert (ids[a.rank] == ids[b.rank]) == same
        names = ranks.domain_names(tier)
        assert all(names[ids[loc.rank]] == loc.domains[index] for loc in locs)


@given(st.integers(1, 8), st.integers(1, 12), st.integers(1, 4), st.sampled_from(LAUNCHER_ORDERS))
def test_uniform_allocations_are_clusters(gpus: int, nodes: int, per_rack: int, order: str) -> None:
    """Equal hosts in consecutive racks map exactly as Cluster's r // G arithmetic says."""
    hosts = [Host(f"n{i:03d}", gpus, (f"r{i // per_rack}",)) for i in range(nodes)]
    ranks = Allocation(hosts, (RACK,)).rank_map(gpus * nodes, order=order)
    cluster = ranks.as_cluster()
    assert cluster is not None
    assert ranks.nodes == tuple(cluster.node_of(r) for r in range(len(ranks)))
    assert ranks.domain_ids("rack") == tuple(cluster.domain_of(r) for r in range(len(ranks)))


# ---- ragged racks and golden examples ----


def nvl72(trays: list[int]) -> Allocation:
    """Racks of 4-GPU trays with the given usable counts, names without zero padding."""
    hosts = []
    number = 1
    for rack, count in enumerate(trays, start=1):
        for _ in range(count):
            hosts.append(Host(f"node{number}", 4, (f"rack{rack}", "leaf1")))
            number += 1
    return Allocation(hosts, (RACK, LEAF))


def test_ragged_racks_keep_each_rank_in_its_rack() -> None:
    """Racks of 18, 18, 16 and 12 trays: rank r's rack is where its tray is, in natural order."""
    alloc = nvl72([18, 18, 16, 12])
    ranks = alloc.rank_map(alloc.gpus, order="natural")
    assert len(ranks) == 256
    assert ranks[72 * 2 - 1].domains[0] == "rack2"
    assert ranks[144].domains[0] == "rack3"
    assert ranks[144 + 64].domains[0] == "rack4"
    assert ranks.domain_ids("rack")[-1] == 3
    assert ranks.as_cluster() is None


def test_lexicographic_order_scatters_racks() -> None:
    """torchrun's string sort puts node10 right after node1: rank 4 leaves rack 1."""
    alloc = nvl72([9, 9])
    assert alloc.rank_map(8, order="natural")[4].host == "node2"
    assert alloc.rank_map(8, order="lexicographic")[4].host == "node10"
    assert alloc.rank_map(72, order="lexicographic").domain_ids("rack")[4] == 1


def test_a_location_golden() -> None:
    """One rank's location, spelled out."""
    alloc = Allocation([Host("b", 2, ("r1",)), Host("a", 4, (None,))], (RACK,))
    assert alloc.rank_map(5, order="lexicographic")[3] == Location(3, 0, "a", 3, (None,))
    assert alloc.rank_map(5)[3] == Location(3, 1, "a", 1, (None,))


def test_the_last_host_may_run_fewer_ranks() -> None:
    """world_size need not end on a host boundary; hosts not reached are dropped."""
    alloc = Allocation([Host("a", 4), Host("b", 4), Host("c", 4)])
    ranks = alloc.rank_map(6)
    assert ranks.nodes == (0, 0, 0, 0, 1, 1)
    assert ranks.host_order == ("a", "b")
    assert ranks.as_cluster() is None
    assert ranks.to_dict()["hosts"][1] == {
        "name": "b",
        "first_rank": 4,
        "ranks": 2,
        "domains": [],
    }


def test_hosts_of_unknown_rack_break_the_uniform_case() -> None:
    """An unknown rack is a domain of its own, so racks of two hosts are no longer uniform."""
    hosts = [Host("a", 4, ("r1",)), Host("b", 4, ("r1",)), Host("c", 4, (None,))]
    hosts.append(Host("d", 4, ("r2",)))
    assert Allocation(hosts, (RACK,)).rank_map(16).as_cluster() is None
    short_last = Allocation(hosts[:3], (RACK,)).rank_map(12).as_cluster()
    assert short_last == Cluster(4, 3, 8)


def test_repr_is_short() -> None:
    """repr never lists thousands of hosts or ranks."""
    alloc = Allocation([Host(f"n{i}", 8) for i in range(2048)])
    assert len(repr(alloc)) < 100
    assert len(repr(alloc.rank_map(16384))) < 100


# ---- errors ----


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Host("", 4), "non-empty name"),
        (lambda: Host(" a", 4), "non-empty name"),
        (lambda: Host("a", 0), "Host.gpus must be a positive int"),
        (lambda: Host("a", True), "Host.gpus must be a positive int"),
        (lambda: Host("a", 4, ("",)), "Host.domains must be a tuple of domain names"),
        (lambda: Tier("t", bandwidth=0), "Tier.bandwidth must be positive"),
        (lambda: Tier("t", latency=-1.0), "Tier.latency must be a finite number"),
        (lambda: Tier("t", latency=float("nan")), "Tier.latency must be a finite number"),
        (lambda: Tier("t", nvlink=1), "Tier.nvlink must be True or False"),
        (lambda: Allocation([]), "Allocation.hosts must be a non-empty tuple of Host"),
        (lambda: Allocation("ab"), "Allocation.hosts must be a non-empty tuple of Host"),
        (lambda: Allocation([Host("a", 1)], (LEAF, LEAF)), "leaf appears twice"),
        (lambda: Allocation([Host("a", 1), Host("a", 2)]), "'a' is listed twice"),
        (lambda: Allocation([Host("a", 1)], (LEAF,)), "names 0 domains for 1 tiers \\(leaf\\)"),
    ],
)
def test_invalid_parts_raise(build: object, message: str) -> None:
    """Every malformed host, tier or allocation raises a TopologyError naming the value."""
    with pytest.raises(TopologyError, match=message):
        build()  # type: ignore[operator]


def test_bad_queries_raise() -> None:
    """Unknown orders, tiers, world sizes, ranks and host orders are named with what is valid."""
    alloc = Allocation([Host("a", 2, ("r",)), Host("b", 2, ("r",))], (RACK,))
    with pytest.raises(TopologyError, match="launcher order must be one of listed, lexico"):
        alloc.ordered("torchrun")
    with pytest.raises(TopologyError, match="tier 'spine' is not in this allocation; valid: rack"):
        alloc.rank_map(4).domain_ids("spine")
    with pytest.raises(TopologyError, match="world_size must be at most 4"):
        alloc.rank_map(5)
    with pytest.raises(TopologyError, match="rank 4 is out of range for 4 ranks; valid: 0 to 3"):
        alloc.rank_map(4)[4]
    with pytest.raises(TopologyError, match="host order names 'c', which is not in"):
        alloc.with_order(["c", "a"])
