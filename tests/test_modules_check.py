"""check_modules and place_modules: the job's communicators are the modules' own, a shared rank
set counted once (differential against ``check``'s single-layout counts), each finding names its
module, and one host order serves every module."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from topology import (
    Allocation,
    AxisGroups,
    Cluster,
    Grid,
    Host,
    Module,
    Modules,
    Tier,
    Topology,
    TopologyError,
    check,
    check_modules,
    place,
    place_modules,
)
from topology.strategies import topologies

LAWS = settings(max_examples=15)
NODE8 = Cluster(gpus_per_node=8)


@LAWS
@given(topologies(max_world_size=32, max_rank_offset=0))
def test_one_module_costs_what_check_counts(topo: Topology) -> None:
    """A lone module's communicators per rank equal check's count for the same layout."""
    report = check_modules(Modules([Module("only", topo)]), NODE8)
    counts = check(topo, NODE8).communicators
    assert (report.budget.per_rank_min, report.budget.per_rank_max) == (
        counts.per_rank_min,
        counts.per_rank_max,
    )


@LAWS
@given(
    topologies(max_world_size=16, max_rank_offset=0),
    topologies(max_world_size=16, max_rank_offset=0),
)
def test_disjoint_modules_cost_the_larger_of_their_counts(a: Topology, b: Topology) -> None:
    """Disjoint modules share no rank: the busiest rank is the busier module's busiest rank."""
    mods = Modules([Module("a", a), Module("b", b, rank_offset=a.world_size)])
    most = max(check(t, NODE8).communicators.per_rank_max for t in (a, b))
    assert check_modules(mods, NODE8).budget.per_rank_max == most


def test_colocated_twins_count_once() -> None:
    """Two colocated modules with the same layout cost one module's communicators."""
    topo = Topology(16, tp=2, pp=2)
    twins = Modules([Module("a", topo), Module("b", topo)])
    assert check_modules(twins, NODE8).budget.per_rank_max == (
        check(topo, NODE8).communicators.per_rank_max
    )


def test_findings_name_their_module() -> None:
    """A tp-16 language module on 8-GPU nodes is an error of that module, not of the job."""
    mods = Modules([Module("vision", Topology(16)), Module("language", Topology(16, tp=16), 16)])
    report = check_modules(mods, Cluster(8, nodes=4))
    assert not report.ok
    assert ("language", "tp-larger-than-node") in report.codes()
    assert ("vision", "tp-larger-than-node") not in report.codes()
    assert (None, "modules-communicators") in report.codes()
    assert report.report("vision") is not None and report.report("vision").ok  # type: ignore[union-attr]


def test_a_rank_map_holds_the_whole_job() -> None:
    """On a map of the job's 16 ranks, the module at rank 0 is not a world-size mismatch."""
    mods = Modules([Module("a", Topology(8)), Module("b", Topology(8, tp=2), rank_offset=8)])
    report = check_modules(mods, RACKS.rank_map(16))
    assert report.ok and "world-size-mismatch" not in {code for _, code in report.codes()}
    with pytest.raises(TopologyError, match=r"the rank map runs 8 ranks but the modules need 16"):
        check_modules(mods, RACKS.rank_map(8))


def test_a_grid_module_counts_but_is_not_checked() -> None:
    """An AxisGroups module gets an info finding and its communicators count in the job's."""
    grid = AxisGroups(Grid.from_sizes(data=4, model=2))
    mods = Modules([Module("g", grid), Module("t", Topology(8, tp=2))])
    report = check_modules(mods, NODE8)
    assert ("g", "module-not-checked") in report.codes() and report.report("g") is None
    assert report.budget.per_rank_max >= 3


def test_too_many_communicators_over_all_modules() -> None:
    """Colocated modules whose union exceeds max_communicators warn at the job level."""
    mods = Modules([Module("a", Topology(8, tp=2)), Module("b", Topology(8, tp=4))])
    report = check_modules(mods, NODE8, max_communicators=4)
    assert (None, "too-many-communicators") in report.codes()


def test_check_modules_refuses_a_layout() -> None:
    """check_modules takes a Modules value; a Topology is refused with the fix."""
    with pytest.raises(TopologyError, match=r"modules must be a topology.Modules, got .*Modules\("):
        check_modules(Topology(8), NODE8)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"cluster must be a Cluster or a RankMap, got int"):
        check_modules(Modules([Module("a", Topology(8))]), 8)  # type: ignore[arg-type]


RACKS = Allocation(
    [Host(n, 4, (r,)) for n, r in {"n1": "r1", "n2": "r2", "n3": "r1", "n4": "r2"}.items()],
    [Tier("rack", nvlink=True)],
)


def test_disjoint_modules_each_get_a_rack() -> None:
    """Two tp-8 modules of 8 ranks on racks of two 4-GPU hosts: each module in one rack."""
    mods = Modules([Module("a", Topology(8, tp=8)), Module("b", Topology(8, tp=8), 8)])
    found = place_modules(mods, RACKS)
    assert found.hosts == ("n1", "n3", "n2", "n4") and found.improved
    assert all(after is not None and after.count("tp", "rack") == 0 for after in found.after)


def test_colocated_modules_take_the_best_order_for_all() -> None:
    """Colocated modules get an order no worse in summed crossings than any module's own."""
    mods = Modules([Module("a", Topology(16, tp=8)), Module("b", Topology(16, tp=2))])
    found = place_modules(mods, RACKS)
    assert found.hosts == place(Topology(16, tp=8), RACKS).hosts


def test_a_module_inside_a_host_is_refused() -> None:
    """A disjoint module that starts inside a host cannot be placed by hosts."""
    mods = Modules([Module("a", Topology(2)), Module("b", Topology(14), 2)])
    with pytest.raises(TopologyError, match=r"module 'b' starts at rank 2, inside a host of 4"):
        place_modules(mods, RACKS)
