"""``reshape`` on real hosts: names and numbers, the allocation's GPU counts, the relaunch, and
the accumulation in exact integers.

Laws first (random allocations, ragged ones included, and random losses), then a few golden
cases and the errors, each pinned.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Reshape, Tier, Topology, TopologyError, reshape
from topology._reshape.reshape import nearest_steps
from topology.strategies import topologies

FEW = settings(max_examples=40, deadline=None)


@st.composite
def cases(
    draw: st.DrawFn, *, uniform: bool = False
) -> tuple[Topology, Allocation, list[int], list[int]]:
    """A layout (dp >= 2), an allocation whose hosts hold it in node order (1 to 4 GPUs each,
    the last host used possibly part full; ``uniform``: G GPUs each, G dividing the world) and
    up to three spare hosts after (1 to 8 GPUs; ``uniform``: G), one or two lost hosts and the
    spares to give (empty: the allocation's hosts after the layout's)."""
    topo = draw(topologies(max_world_size=48).filter(lambda t: t.dp >= 2))
    counts: list[int] = []
    if uniform:
        gpus = draw(st.sampled_from([g for g in (1, 2, 4, 8) if topo.world_size % g == 0]))
        counts = [gpus] * (topo.world_size // gpus)
    else:
        while sum(counts) < topo.world_size:
            counts.append(draw(st.integers(1, 4)))
    used = len(counts)
    spare_gpus = st.just(counts[0]) if uniform else st.integers(1, 8)
    counts += draw(st.lists(spare_gpus, max_size=3))
    names = draw(st.permutations([f"n{i:02d}" for i in range(len(counts))]))
    racks = draw(st.lists(st.sampled_from("ab"), min_size=len(counts), max_size=len(counts)))
    alloc = Allocation(
        [Host(name, g, (rack,)) for name, g, rack in zip(names, counts, racks, strict=True)],
        [Tier("rack")],
    )
    lost = draw(st.lists(st.integers(0, used - 1), min_size=1, max_size=2, unique=True))
    outside = range(used, len(counts))
    spares = draw(st.lists(st.sampled_from(outside), unique=True, max_size=3)) if outside else []
    return topo, alloc, lost, spares


def _try(topo: Topology, **kwargs: object) -> Reshape | None:
    try:
        return reshape(topo, **kwargs)  # type: ignore[arg-type]
    except TopologyError as error:
        assert "\n" not in str(error)
        return None


def _starts(alloc: Allocation) -> list[int]:
    out, total = [], 0
    for host in alloc.hosts:
        out.append(total)
        total += host.gpus
    return out


@FEW
@given(cases(), st.sampled_from(["auto", "drop", "spares", "shrink"]))
def test_hosts_by_name_and_by_number_give_one_reshape(case: tuple, policy: str) -> None:
    """Lost hosts and spares given by name are the hosts of those numbers, and the relaunch
    names the lost hosts back."""
    topo, alloc, lost, spares = case
    by_number = _try(topo, allocation=alloc, lost_hosts=lost, spares=spares, policy=policy)
    by_name = _try(
        topo,
        allocation=alloc,
        lost_hosts=[alloc.hosts[h].name for h in lost],
        spares=[alloc.hosts[s].name for s in spares],
        policy=policy,
    )
    assert by_number == by_name
    if by_name is not None:
        assert set(by_name.relaunch.lost) == {alloc.hosts[h].name for h in lost}


@FEW
@given(cases(), st.sampled_from(["auto", "drop", "spares", "shrink"]))
def test_the_allocation_gives_every_host_its_gpus(case: tuple, policy: str) -> None:
    """A lost host loses exactly the ranks its GPUs ran (ranks fill the hosts in node order),
    and no host of the relaunch runs more ranks than it has GPUs."""
    topo, alloc, lost, spares = case
    r = _try(topo, allocation=alloc, lost_hosts=lost, spares=spares, policy=policy)
    if r is None:
        return
    starts = _starts(alloc)
    expect = {
        topo.rank_offset + local
        for h in lost
        for local in range(starts[h], min(starts[h] + alloc.hosts[h].gpus, topo.world_size))
    }
    assert set(r.lost) == expect
    gpus = {h.name: h.gpus for h in alloc.hosts}
    launch = r.relaunch
    assert all(slots <= gpus[name] for name, slots in zip(launch.hosts, launch.slots, strict=True))
    assert all(max(g) < gpus[name] for name, g in zip(launch.hosts, launch.gpus, strict=True))


@FEW
@given(cases(uniform=True))
def test_a_gpus_per_node_that_agrees_changes_nothing(case: tuple) -> None:
    """On hosts of G GPUs each, gpus_per_node=G next to the allocation gives the same reshape;
    any other G contradicts it and is refused naming a host."""
    topo, alloc, lost, spares = case
    gpus = alloc.hosts[0].gpus
    kwargs = {"allocation": alloc, "lost_hosts": lost, "spares": spares}
    assert _try(topo, **kwargs) == _try(topo, gpus_per_node=gpus, **kwargs)
    with pytest.raises(TopologyError, match=rf"gpus_per_node\({gpus + 1}\) contradicts"):
        reshape(topo, gpus_per_node=gpus + 1, **kwargs)  # type: ignore[arg-type]


@FEW
@given(cases(), st.sampled_from(["auto", "drop", "spares", "shrink"]))
def test_the_relaunch_runs_every_new_rank_where_its_process_is(case: tuple, policy: str) -> None:
    """The hostfile in node order runs new ranks 0.. in blocks; a survivor's new rank runs on
    its own host and GPU, a fresh rank on the spare that replaced its host; the lost hosts,
    the hosts that run and the idle ones cover the allocation, idle and running apart."""
    topo, alloc, lost, spares = case
    r = _try(topo, allocation=alloc, lost_hosts=lost, spares=spares, policy=policy)
    if r is None:
        return
    launch = r.relaunch
    assert len(set(launch.hosts)) == len(launch.hosts)
    where: dict[int, tuple[str, int]] = {}
    rank = r.new.rank_offset
    for name, slots, first, gpus in zip(
        launch.hosts, launch.slots, launch.first_rank, launch.gpus, strict=True
    ):
        assert first == rank and len(gpus) == slots == len(set(gpus))
        for gpu in gpus:
            where[rank] = (name, gpu)
            rank += 1
    assert rank == r.new.rank_offset + r.new.world_size
    starts = _starts(alloc)
    for host, start in zip(alloc.hosts, starts, strict=True):
        for gpu in range(host.gpus):
            old = topo.rank_offset + start + gpu
            if start + gpu < topo.world_size and r.rank_of(old) is not None:
                assert where[r.rank_of(old)] == (host.name, gpu)  # type: ignore[index]
    for lost_host, spare in r.replaced:  # a spare runs the lost host's numbers, GPU for GPU
        start = starts[lost_host]
        for local in range(start, min(start + alloc.hosts[lost_host].gpus, topo.world_size)):
            expect = (alloc.hosts[spare].name, local - start)
            assert where[r.new.rank_offset + local] == expect
    names = {h.name for h in alloc.hosts}
    running, idle, gone = set(launch.hosts), set(launch.idle), set(launch.lost)
    assert not running & idle and not idle & gone and running | idle | gone == names
    for new, host, _, source in launch.sources:
        assert where[new][0] == host and source in names - gone


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 2**200), st.integers(1, 2**200))
def test_accumulation_is_the_nearest_exact_integer(total: int, dp: int) -> None:
    """The steps are round(total / dp) in exact arithmetic (ties to even), at least 1, for
    numbers far past a float's 2**53 and its range."""
    assert nearest_steps(total, dp) == max(1, round(Fraction(total, dp)))


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 2**40), st.integers(1, 2**40))
def test_accumulation_agrees_with_floats_where_they_are_exact(total: int, dp: int) -> None:
    """Below 2**53 the integer rule gives what round(total / dp) always gave."""
    assert nearest_steps(total, dp) == max(1, round(total / dp))


def test_huge_accumulation_keeps_the_batch_exactly() -> None:
    """An accumulation of 2**80 + 3 is kept exactly where floats overflowed or rounded."""
    steps = 2**1100 * 3  # past a float's range: total / dp raised OverflowError
    r = reshape(Topology(16, tp=2, pp=2), lost_ranks=[5], gpus_per_node=2, accumulation=steps)
    assert (r.accumulation, r.batch_kept, r.global_batch) == (2**1100 * 4, True, 2**1100 * 12)
    r = reshape(Topology(16, tp=2, pp=2), lost_ranks=[5], gpus_per_node=2, accumulation=2**80 + 3)
    assert r.old_global_batch == 4 * (2**80 + 3) and r.accumulation == (4 * (2**80 + 3) + 1) // 3
    assert not r.batch_kept


def test_given_spares_come_before_dropping_a_replica() -> None:
    """With a spare given, auto keeps the layout and the batch; with too few it drops and says
    why the spares were not taken; without any the batch may change, which the result says."""
    alloc = Allocation([Host(f"node{i}", 4) for i in range(1, 7)])
    r = reshape(Topology(16, tp=4), lost_hosts=["node2"], allocation=alloc)
    assert (r.policy, r.batch_kept, r.relaunch.idle) == ("spares", True, ("node6",))
    assert r.relaunch.hosts == ("node1", "node5", "node3", "node4")
    r = reshape(Topology(16, tp=4), lost_hosts=["node2", "node3"], allocation=alloc, spares=[4])
    assert (r.policy, r.new.dp, r.accumulation, r.global_batch) == ("drop", 2, 2, 4)
    assert r.rejected == (
        (
            "spares",
            "2 hosts are lost (node[2-3]) but only 1 spares are given; give more spares or "
            "use the drop policy",
        ),
    )
    r = reshape(Topology(16, tp=4), lost_hosts=["host1"], gpus_per_node=4)
    assert (r.policy, r.old_global_batch, r.global_batch, r.batch_kept) == ("drop", 4, 3, False)


def test_ragged_hosts_relaunch_with_their_own_slots() -> None:
    """Hosts of 8, 4 and 4 GPUs: losing the 4-GPU one drops its replica, the rest run on."""
    alloc = Allocation([Host("big", 8), Host("a", 4), Host("b", 4)])
    r = reshape(Topology(16, tp=4), lost_hosts=["a"], allocation=alloc)
    launch = r.relaunch
    assert (launch.hosts, launch.slots, launch.nproc_per_node) == (("big", "b"), (8, 4), None)
    assert launch.gpus == ((0, 1, 2, 3, 4, 5, 6, 7), (0, 1, 2, 3))


def test_a_spare_needs_gpus_for_every_rank_of_the_lost_host() -> None:
    """A 4-GPU spare cannot take an 8-GPU host's place."""
    alloc = Allocation([Host("a", 8), Host("b", 8), Host("s", 4)])
    with pytest.raises(TopologyError, match=r"lost host 'b' ran 8 ranks but no spare left has 8"):
        reshape(Topology(16, tp=8), lost_hosts=["b"], allocation=alloc, policy="spares")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"lost_hosts": ["node9"]},
            r"lost host 'node9' is not in the allocation; its hosts: "
            r"node\[1-6\]",
        ),
        (
            {"lost_hosts": ["node6"]},
            r"lost host 'node6' runs none of the layout's ranks; its "
            r"hosts: node\[1-4\]",
        ),
        ({"lost_hosts": [1], "spares": ["x"]}, r"spare host 'x' is not in the allocation"),
        (
            {"lost_hosts": [1], "spares": ["node2"]},
            r"spares must be distinct hosts outside the "
            r"layout's 0 to 3, got \['node2'\]",
        ),
        ({"lost_hosts": [1.5]}, r"lost_hosts\[0\] must be a non-negative int"),
        (
            {"lost_hosts": [1], "gpus_per_node": 8},
            r"gpus_per_node\(8\) contradicts the "
            r"allocation, whose host 'node1' has 4 GPUs; leave gpus_per_node out",
        ),
    ],
)
def test_host_errors_name_the_hosts(kwargs: dict, match: str) -> None:
    """A name no host has, a host outside the layout or a contradicting gpus_per_node is
    refused, the message listing the valid hosts (as a host list)."""
    alloc = Allocation([Host(f"node{i}", 4) for i in range(1, 7)])
    with pytest.raises(TopologyError, match=match):
        reshape(Topology(16, tp=4), allocation=alloc, **kwargs)


def test_a_long_host_list_is_cut_in_the_message() -> None:
    """16,384 irregular names are listed abbreviated, never in full."""
    alloc = Allocation([Host(f"n{7 * i}", 8) for i in range(16384)])
    with pytest.raises(TopologyError, match=r"its hosts: n\[0,7,14,.*…$") as error:
        reshape(Topology(131072, tp=8, pp=8), lost_hosts=["n1"], allocation=alloc)
    assert len(str(error.value)) < 140


def test_without_an_allocation_hosts_are_named_by_number() -> None:
    """host<h> names host h; other names and a missing host size are refused."""
    topo = Topology(16, tp=2, pp=2)
    assert reshape(topo, lost_hosts=["host1"], gpus_per_node=4) == reshape(
        topo, lost_hosts=[1], gpus_per_node=4
    )
    with pytest.raises(TopologyError, match=r"lost host 'node1' is no host: without an alloc"):
        reshape(topo, lost_hosts=["node1"], gpus_per_node=4)
    with pytest.raises(TopologyError, match=r"give gpus_per_node \(the GPUs of every host\)"):
        reshape(topo, lost_hosts=[1])


def _message(**kwargs: object) -> str:
    """The TopologyError ``reshape(**kwargs)`` raises."""
    with pytest.raises(TopologyError) as error:
        reshape(**kwargs)  # type: ignore[arg-type]
    return str(error.value)


@pytest.mark.parametrize("count", [20, 21])
def test_the_host_list_in_a_message_is_cut_at_60_characters(count: int) -> None:
    """Two-letter names share no number, so the host list is them joined by commas: 20 make 59
    characters, shown whole; 21 make 62, shown as their first 59 and an ellipsis."""
    names = [a + b for a in "abcdefghij" for b in "xyz"][:count]
    alloc = Allocation([Host(name, 2) for name in names])
    text = _message(layout=Topology(2 * count), lost_hosts=["zz"], allocation=alloc)
    listed = ",".join(names)
    shown = listed if count == 20 else listed[:59] + "…"
    assert text == f"lost host 'zz' is not in the allocation; its hosts: {shown}"


def test_a_host_list_of_exactly_60_characters_is_shown_whole() -> None:
    """19 two-letter names and one three-letter name share no number: joined by commas they are
    19 * 2 + 3 + 19 = 60 characters, the most shown whole (no ellipsis)."""
    names = [*[a + b for a in "abcdefghij" for b in "xyz"][:19], "kxy"]
    alloc = Allocation([Host(name, 2) for name in names])
    text = _message(layout=Topology(40), lost_hosts=["zz"], allocation=alloc)
    listed = ",".join(names)
    assert len(listed) == 60
    assert text == f"lost host 'zz' is not in the allocation; its hosts: {listed}"


def test_an_unknown_name_without_an_allocation_says_how_hosts_are_named() -> None:
    """The whole message: the hosts are host0 to host3 for 16 ranks on 4-GPU hosts."""
    text = _message(layout=Topology(16, tp=2, pp=2), lost_hosts=["node1"], gpus_per_node=4)
    assert text == (
        "lost host 'node1' is no host: without an allocation hosts are named host0 to host3 "
        "(host<number>); give a host number, or the allocation that names the hosts"
    )


def test_one_gpu_hosts_are_one_rank_each() -> None:
    """tp 2 x dp 2 on 1-GPU hosts, rank 3 lost: the replica {2, 3} is dropped, so host2 (rank
    2, alive) is idle and host3 lost; hosts 0 and 1 run the new ranks 0 and 1."""
    launch = reshape(Topology(4, tp=2), lost_ranks=[3], gpus_per_node=1).relaunch
    assert (launch.hosts, launch.slots, launch.idle, launch.lost) == (
        ("host0", "host1"),
        (1, 1),
        ("host2",),
        ("host3",),
    )


def test_an_allocation_host_neither_used_nor_a_given_spare_is_idle() -> None:
    """Six 4-GPU hosts, the layout on node1..node4, node6 given as the only spare: node6 takes
    lost node2's place and node5, alive and unused, is idle."""
    alloc = Allocation([Host(f"node{i}", 4) for i in range(1, 7)])
    r = reshape(Topology(16, tp=4), lost_hosts=["node2"], spares=["node6"], allocation=alloc)
    assert (r.policy, r.relaunch.hosts, r.relaunch.idle) == (
        "spares",
        ("node1", "node6", "node3", "node4"),
        ("node5",),
    )


def test_sources_name_hosts_of_an_offset_layout() -> None:
    """Ranks 8 to 15 (tp 2) on 2-GPU hosts host0..host3, host1 (ranks 10, 11) lost, spare
    host4: its new ranks 10 and 11 fetch tp ranks 0 and 1 from ranks 8 and 9 on host0."""
    r = reshape(Topology(8, tp=2, rank_offset=8), lost_hosts=[1], spares=[4], gpus_per_node=2)
    assert r.relaunch.sources == ((10, "host4", 8, "host0"), (11, "host4", 9, "host0"))
