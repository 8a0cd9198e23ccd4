"""``place`` on hosts of different GPU counts (issue 31): ranks fill each host's GPUs in host
order, so a host order is all a launcher with per-host slots needs; the law is that the chosen
order never crosses more groups than the launcher's, counted on the real rank map."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, RankMap, Tier, Topology, crossings, place
from topology._preflight.place.place import _grouped_orders


@st.composite
def mixed(draw: st.DrawFn) -> tuple[Topology, Allocation, str]:
    """A layout on 1-7 hosts of 2, 4 or 8 GPUs in up to three racks, and a launcher order."""
    gpus = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=7))
    racks = draw(st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=7, max_size=7))
    hosts = [Host(f"n{i}", g, (racks[i],)) for i, g in enumerate(gpus)]
    alloc = Allocation(hosts, [Tier("rack", nvlink=True)])
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    groups = draw(st.integers(1, max(1, alloc.gpus // tp)))
    world = min(tp * groups, alloc.gpus)
    if world % tp:
        tp = 1
    order = draw(st.sampled_from(["listed", "lexicographic", "natural", "slurm"]))
    return Topology(world, tp=tp), alloc, order


@settings(max_examples=60, deadline=None)
@given(case=mixed())
def test_never_crosses_more_than_the_launcher_order(
    case: tuple[Topology, Allocation, str],
) -> None:
    """Law: before is the launcher's order, after the chosen one, both recounted on their rank
    maps; after is never worse (node crossings included); hosts and unused split the hosts."""
    topo, alloc, order = case
    found = place(topo, alloc, order=order)
    assert found.before == crossings(topo, alloc.rank_map(topo.world_size, order=order))
    assert found.after == crossings(topo, found.rank_map())
    assert found.after.key(first_tier=0) <= found.before.key(first_tier=0)
    assert sorted((*found.hosts, *found.unused)) == sorted(h.name for h in alloc.hosts)
    assert found.rank_map().host_order == found.hosts


def test_grouping_keeps_tp_inside_a_rack() -> None:
    """Golden: racks interleaved in the listed order, 8- and 4-GPU hosts; tp8 lands whole on
    the 8-GPU hosts and the tp groups of a rack's 4-GPU pair stay in that rack."""
    hosts = [Host("a", 4, ("r1",)), Host("b", 4, ("r2",)), Host("c", 8, ("r1",))]
    hosts += [Host("d", 4, ("r1",)), Host("e", 4, ("r2",)), Host("f", 8, ("r2",))]
    alloc = Allocation(hosts, [Tier("rack", nvlink=True)])
    found = place(Topology(32, tp=8), alloc)
    assert found.after.count("tp", "rack") == 0 and found.before.count("tp", "rack") > 0
    assert found.improved and not found.exact


def _grouped_case(tiers: int) -> Allocation:
    """Hosts h0..h4 of 4, 8, 8, 8 and 2 GPUs in racks rA, rB, rB, rA, rC (and, with two tiers,
    pods p1, p0, p0, p1, p1)."""
    racks, pods, gpus = (
        ["rA", "rB", "rB", "rA", "rC"],
        ["p1", "p0", "p0", "p1", "p1"],
        [4, 8, 8, 8, 2],
    )
    rows = [(r,) if tiers == 1 else (r, p) for r, p in zip(racks, pods, strict=True)]
    names = [Tier("rack", nvlink=True), Tier("pod")][:tiers]
    return Allocation(
        [Host(f"h{i}", g, d) for i, (g, d) in enumerate(zip(gpus, rows, strict=True))], names
    )


def test_grouped_orders_by_hand() -> None:
    """The four domain-grouped candidates, worked by hand. One tier: racks rA (h0, h3: 12
    GPUs), rB (h1, h2: 16), rC (h4: 2). Two tiers: pods p1 (h0, h3, h4: 14 GPUs, seen first)
    and p0 (h1, h2: 16) outside the racks; the outermost tier groups first. Without tiers:
    the listed order, and most GPUs first."""
    one = _grouped_orders(_grouped_case(1))
    assert one == [
        ("grouped by domain", (0, 3, 1, 2, 4)),
        ("grouped by domain, most GPUs first", (3, 0, 1, 2, 4)),
        ("grouped by domain, largest domains first", (1, 2, 0, 3, 4)),
        ("grouped by domain, largest domains first, most GPUs first", (1, 2, 3, 0, 4)),
    ]
    two = _grouped_orders(_grouped_case(2))
    assert two == [
        ("grouped by domain", (0, 3, 4, 1, 2)),
        ("grouped by domain, most GPUs first", (3, 0, 4, 1, 2)),
        ("grouped by domain, largest domains first", (1, 2, 0, 3, 4)),
        ("grouped by domain, largest domains first, most GPUs first", (1, 2, 3, 0, 4)),
    ]
    bare = Allocation([Host(h.name, h.gpus) for h in _grouped_case(1).hosts])
    assert _grouped_orders(bare) == [
        ("listed", (0, 1, 2, 3, 4)),
        ("listed, most GPUs first", (1, 2, 3, 0, 4)),
        ("listed", (0, 1, 2, 3, 4)),
        ("listed, most GPUs first", (1, 2, 3, 0, 4)),
    ]


def test_mixed_place_by_hand() -> None:
    """tp 8 on the hosts above (4, 8, 8, 8, 2 GPUs). The listed order (also lexicographic and
    natural here) puts ranks 0-3 on h0, 4-11 on h1, 12-15 on h2: both tp groups cross a node,
    the first also a rack (rA|rB). Largest domains first starts with rB's two 8-GPU hosts: no
    group crosses anything; it is the first candidate with that key (its most-GPUs twin ties
    and comes later). The step time, here the hosts a rank map uses, is 3 before and 2 after."""
    alloc = _grouped_case(1)

    def hosts_used(rank_map: RankMap) -> float:
        return float(len(rank_map.host_order))

    found = place(Topology(16, tp=8), alloc, step_time=hosts_used)
    assert (found.before.count("tp", "node"), found.before.count("tp", "rack")) == (2, 1)
    assert (found.after.count("tp", "node"), found.after.count("tp", "rack")) == (0, 0)
    assert found.hosts == ("h1", "h2") and found.unused == ("h0", "h3", "h4")
    assert found.method == "grouped by domain, largest domains first"
    assert (found.step_time_before, found.step_time_after) == (3.0, 2.0)
    assert found.improved and not found.exact and found.bound is None
    plain = place(Topology(16, tp=8), alloc, order="lexicographic")
    assert plain.baseline == "lexicographic" and plain.hosts == ("h1", "h2")


def test_the_launcher_order_wins_its_ties() -> None:
    """The same hosts listed with rB's 8-GPU hosts first: the listed order already crosses
    nothing, so it stays (method 'listed', not improved), ahead of the grouped orders that tie."""
    alloc = _grouped_case(1).with_order(["h1", "h2", "h0", "h3", "h4"])
    found = place(Topology(16, tp=8), alloc)
    assert found.method == "listed" and not found.improved
    assert found.hosts == ("h1", "h2") and found.after == found.before
