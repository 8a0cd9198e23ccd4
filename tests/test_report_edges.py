"""Report.to_dict on a real rank map: the ``allocation`` and ``crossings`` entries.

The expected values are worked out by hand from a two-host allocation (say how beside each one);
the crossing counts are also compared with ``crossings()`` called on its own.
"""

from __future__ import annotations

import json

from topology import Allocation, Cluster, Host, Tier, Topology, check, crossings


def as_json(value: object) -> object:
    """The value after a JSON round trip."""
    return json.loads(json.dumps(value))


def two_racks() -> Allocation:
    """Hosts listed as b (rack r1), a (rack r2), 4 GPUs each, under one NVLink tier ``rack``."""
    return Allocation([Host("b", 4, ("r1",)), Host("a", 4, ("r2",))], [Tier("rack", nvlink=True)])


def test_to_dict_names_hosts_in_launcher_order_and_the_tiers() -> None:
    """``allocation`` lists the hosts in the launcher's order (a before b) and the tier names."""
    rank_map = two_racks().rank_map(8, order="lexicographic")
    data = as_json(check(Topology(8, tp=8), rank_map).to_dict())
    assert isinstance(data, dict)
    assert data["allocation"] == {"hosts": ["a", "b"], "tiers": ["rack"]}


def test_to_dict_holds_the_crossing_counts() -> None:
    """``crossings``: the one tp (= etp) group of 8 spans hosts a and b, so racks r2 and r1."""
    topo = Topology(8, tp=8)
    rank_map = two_racks().rank_map(8, order="listed")
    data = as_json(check(topo, rank_map).to_dict())
    assert isinstance(data, dict)
    # tp = etp = 8 leaves every other placed kind (ep, cp, pp, dp, edp) with 8 singleton groups.
    none = {"node": 0, "rack": 0}
    assert data["crossings"] == {
        "tiers": ["node", "rack"],
        "groups": {"tp": 1, "etp": 1, "ep": 8, "cp": 8, "pp": 8, "dp": 8, "edp": 8},
        "crossing": {
            "tp": {"node": 1, "rack": 1},
            "etp": {"node": 1, "rack": 1},
            "ep": none,
            "cp": none,
            "pp": none,
            "dp": none,
            "edp": none,
        },
    }
    assert data["crossings"] == as_json(crossings(topo, rank_map).to_dict())


def test_a_map_too_small_for_the_layout_has_an_allocation_but_no_crossings() -> None:
    """8 mapped ranks for a 16-rank layout: hosts and tiers are reported, crossings are not."""
    data = check(Topology(16, tp=4), two_racks().rank_map(8, order="listed")).to_dict()
    assert data["allocation"] == {"hosts": ["b", "a"], "tiers": ["rack"]}
    assert "crossings" not in data


def test_a_map_too_small_for_the_layout_says_how_many_ranks_it_runs() -> None:
    """The map's own world-size error: 2 hosts of 4 GPUs run 8 ranks, the layout needs 16."""
    report = check(Topology(16, tp=4), two_racks().rank_map(8, order="listed"))
    assert [f.code for f in report.errors] == ["world-size-mismatch", "world-size-mismatch"]
    assert report.errors[1].message == (
        "the allocation runs 8 ranks on 2 hosts but the layout needs rank_offset + world_size = "
        "16; add hosts or shrink the layout"
    )


def test_a_cluster_check_has_neither_entry() -> None:
    """Checked against a Cluster (no rank map), to_dict has no allocation and no crossings."""
    data = check(Topology(8, tp=8), Cluster(4)).to_dict()
    assert "allocation" not in data and "crossings" not in data


# -- the Cluster a rank map is checked as -------------------------------------------------------


def test_a_uniform_map_is_checked_as_its_whole_cluster() -> None:
    """Two full 4-GPU hosts, no NVLink tier: the report's cluster is 2 nodes of 4 GPUs."""
    alloc = Allocation([Host("a", 4), Host("b", 4)])
    assert check(Topology(8), alloc.rank_map(8)).cluster == Cluster(4, nodes=2)


def test_a_part_filled_map_without_nvlink_is_checked_on_its_node_size() -> None:
    """6 ranks on two 4-GPU hosts (b runs 2) is no Cluster; the rules run on 4-GPU nodes."""
    alloc = Allocation([Host("a", 4), Host("b", 4)])
    assert check(Topology(6), alloc.rank_map(6)).cluster == Cluster(4)


def test_an_interleaved_rack_map_is_checked_on_its_largest_rack() -> None:
    """Racks r1 = {a, c} and r2 = {b, d} are no consecutive hosts; the largest holds 2 * 4 GPUs."""
    alloc = Allocation(
        [Host(n, 4, (r,)) for n, r in [("a", "r1"), ("b", "r2"), ("c", "r1"), ("d", "r2")]],
        [Tier("rack", nvlink=True)],
    )
    assert check(Topology(16, tp=4), alloc.rank_map(16)).cluster == Cluster(4, nvlink_domain=8)


def test_one_host_racks_are_checked_as_plain_nodes() -> None:
    """6 ranks on two 4-GPU hosts, each its own rack: a domain is one node, so none is named."""
    alloc = Allocation([Host("a", 4, ("r1",)), Host("b", 4, ("r2",))], [Tier("rack", nvlink=True)])
    assert check(Topology(6), alloc.rank_map(6)).cluster == Cluster(4)
