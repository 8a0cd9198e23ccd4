"""Verdicts the pre-launch check must get right (issue 22, item 1), each pinned by a case that
was wrong before: budgets that count what ``create`` makes, crossings no host order avoids, and
tier names that cannot collide with the built-in ``node`` tier."""

from __future__ import annotations

from unittest import mock

import pytest

from topology import Allocation, Cluster, Host, Tier, Topology, TopologyError, check
from topology._preflight import check as check_module
from topology._preflight.budget import nvls_groups


def _nvls(report_findings: object) -> str:
    return next(f.message for f in report_findings if f.code == "too-many-nvls-groups")  # type: ignore[attr-defined]


def test_nvls_budget_counts_independent_copies() -> None:
    """tp2 pp2 on 16 ranks: 11 communicators in a node, 15 with a second tp communicator."""
    topo = Topology(16, tp=2, pp=2)
    assert check(topo, Cluster(8), nvls_limit=11).ok
    assert not any(
        f.code == "too-many-nvls-groups" for f in check(topo, Cluster(8), nvls_limit=11).findings
    )
    report = check(topo, Cluster(8), nvls_limit=11, independent=("tp",))
    assert "holds 15 communicators" in _nvls(report.findings)


def test_nvls_warning_names_the_default_limit_and_its_source() -> None:
    """Without nvls_limit the warning names NVLS_LIMIT's 128 and where that figure comes from."""
    topo = Topology(144, tp=2, cp=2, ep=2, pp=2)  # 153 communicators in one NVL72 domain
    message = _nvls(check(topo, Cluster(4, nvlink_domain=72)).findings)
    assert "more than the 128 NVLink SHARP multicast groups of an NVSwitch domain" in message
    assert "(NVLS_LIMIT, the default, NVIDIA/nccl#2077)" in message


def test_nvls_budget_counts_separate_kinds() -> None:
    """dp separate from dp-cp: its 2 groups of stage 0 are new communicators there (13)."""
    report = check(Topology(16, tp=2, pp=2), Cluster(8), nvls_limit=11, separate=("dp",))
    assert "holds 13 communicators" in _nvls(report.findings)


def test_budgets_count_kinds_with_their_own_pg_options() -> None:
    """dp given its own options object no longer shares dp-cp's (and edp's) communicators; the
    same object on all three keeps them shared."""
    topo = Topology(16, tp=2, pp=2)
    options = object()
    apart = check(topo, Cluster(8), nvls_limit=11, pg_options={"dp": options})
    assert "holds 13 communicators" in _nvls(apart.findings)
    assert (
        apart.communicators.per_rank_max == check(topo, Cluster(8)).communicators.per_rank_max + 1
    )
    shared = check(
        topo, Cluster(8), nvls_limit=11, pg_options=dict.fromkeys(("dp", "dp-cp", "edp"), options)
    )
    assert not any(f.code == "too-many-nvls-groups" for f in shared.findings)


def test_pg_options_must_be_a_mapping() -> None:
    """A list of kinds is not a pg_options mapping."""
    with pytest.raises(TopologyError, match=r"pg_options must map kinds to options objects"):
        check(Topology(8, tp=2), Cluster(8), pg_options=["tp"])  # type: ignore[arg-type]


def test_a_tier_cannot_be_named_node() -> None:
    """``node`` is the built-in tier of hosts; a tier of that name is refused where it is made."""
    with pytest.raises(TopologyError, match=r"Tier.name 'node' is the built-in tier of hosts"):
        Tier("node")
    assert Tier("Node").name == "Node"


def _racks(trays: tuple[int, ...]) -> Allocation:
    """NVL72-style racks of ``trays`` 4-GPU trays each, one NVLink domain per rack."""
    hosts = [
        Host(f"r{rack}t{tray:02d}", 4, (f"rack{rack}",))
        for rack, count in enumerate(trays)
        for tray in range(count)
    ]
    return Allocation(hosts, [Tier("rack", nvlink=True)])


def test_tp_crossing_no_host_order_avoids_is_an_error() -> None:
    """Racks of 72, 72, 68, 68 GPUs: three tp groups of 72 need three racks of 72, so one spans
    two racks in every order; an error, as tp(72) on uniform 68-GPU domains is."""
    report = check(Topology(216, tp=72), _racks((18, 18, 17, 17)).rank_map(216))
    assert not report.ok
    found = next(f for f in report.errors if f.code == "tp-crosses-tier")
    assert "1 of 3 tp groups span two or more rack domains" in found.message
    assert "no host order" in found.message
    assert len(found.example) == 72


def test_cp_crossing_no_host_order_avoids_is_a_warning() -> None:
    """The same racks with cp(72) instead: a warning, not an error."""
    report = check(Topology(216, cp=72), _racks((18, 18, 17, 17)).rank_map(216))
    assert report.ok
    assert any(f.code == "cp-crosses-tier" and f.severity == "warning" for f in report.findings)


def test_uniform_racks_keep_the_layout_rule() -> None:
    """Uniform 72-GPU racks hold every tp group of 72: no crossing finding at all."""
    report = check(Topology(216, tp=72), _racks((18, 18, 18)).rank_map(216))
    assert report.ok and not any("crosses" in f.code for f in report.findings)


def test_a_large_scattered_map_measures_nvls_on_sample_domains() -> None:
    """Racks scattered over the host order (host i in rack i % 4), the walk limit patched to 0:
    the NVLS count comes from sample racks, equals the exact count on this symmetric map, and
    says it was sampled."""
    hosts = [Host(f"n{i}", 4, (f"r{i % 4}",)) for i in range(16)]
    rank_map = Allocation(hosts, [Tier("rack", nvlink=True)]).rank_map(64)
    topo = Topology(64, tp=4, pp=2)
    exact = nvls_groups(topo, rank_map.domain_ids("rack"))[0]
    with mock.patch.object(check_module, "_WALK_LIMIT", 0):
        report = check(topo, rank_map)
    line = next(f.message for f in report.findings if f.code == "communicators")
    assert f"at most {exact} communicators have two or more ranks in one NVLink domain " in line
    assert "(measured on sample domains)" in line
