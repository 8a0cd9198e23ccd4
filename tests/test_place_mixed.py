"""``place`` on hosts of different GPU counts (issue 31): ranks fill each host's GPUs in host
order, so a host order is all a launcher with per-host slots needs; the law is that the chosen
order never crosses more groups than the launcher's, counted on the real rank map."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Tier, Topology, crossings, place


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
