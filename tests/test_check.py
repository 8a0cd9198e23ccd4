"""Pre-launch checks: placement and communicator counts against brute force, then every rule."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Cluster, Finding, Report, Topology, TopologyError, check
from topology._preflight.communicators import (
    communicators,
    megatron_new_group_calls,
    rank_communicators,
)
from topology._preflight.placement import placements
from topology.strategies import topologies

# -- laws: the analytic placement equals enumeration ------------------------------------------


def _all_groups(topo: Topology, kind: str) -> list[tuple[int, ...]]:
    return [tuple(g) for g in topo.groups(kind)]


@st.composite
def layouts(draw: st.DrawFn) -> tuple[Topology, Cluster]:
    """A small topology and a cluster whose node and domain sizes need not divide anything."""
    topo = draw(topologies(max_world_size=64))
    gpus = draw(st.integers(1, 12))
    domain = draw(st.none() | st.integers(1, 24))
    return topo, Cluster(gpus_per_node=gpus, nvlink_domain=domain)


@settings(max_examples=150)
@given(layouts())
def test_placement_equals_brute_force(layout: tuple[Topology, Cluster]) -> None:
    """Nodes and domains one group spans (max, min) equal a count over every group."""
    topo, cluster = layout
    for row in placements(topo, cluster):
        groups = _all_groups(topo, row.kind)
        nodes = [len({r // cluster.gpus_per_node for r in g}) for g in groups]
        domains = [len({r // cluster.domain_size for r in g}) for g in groups]
        assert (row.nodes, row.nodes_min, row.domains) == (max(nodes), min(nodes), max(domains))
        assert (row.size, row.groups) == (len(groups[0]), len(groups))
        assert row.example in groups
        assert len({r // cluster.gpus_per_node for r in row.example}) == row.nodes
        assert row.best_nodes == -(-row.size // cluster.gpus_per_node)


@settings(max_examples=80)
@given(topologies(max_world_size=64))
def test_communicator_counts_equal_brute_force(topo: Topology) -> None:
    """Per-rank distinct sets and strategy counts equal a count over every group of every kind."""
    per_rank = []
    everything: set[frozenset[int]] = set()
    for kind in topo.kinds:
        everything.update(frozenset(g) for g in topo.groups(kind) if len(g) > 1)
    ranks = range(topo.rank_offset, topo.rank_offset + topo.world_size)
    for rank in ranks:
        mine = {
            frozenset(topo.group_of(rank, kind))
            for kind in topo.kinds
            if topo.has_group(rank, kind) and topo.size(kind) > 1
        }
        per_rank.append(len(mine))
        assert len(rank_communicators(topo, rank)) == len(mine)
    counts = communicators(topo)
    assert (counts.per_rank_min, counts.per_rank_max) == (min(per_rank), max(per_rank))
    assert counts.all == len(everything)
    assert counts.local == max(per_rank)


@settings(max_examples=60)
@given(topologies(max_world_size=64))
def test_shared_kinds_have_identical_groups(topo: Topology) -> None:
    """Every (kind, earlier kind) pair reported as shared lists exactly the same groups."""
    for kind, earlier in communicators(topo).shared:
        assert set(_all_groups(topo, kind)) == set(_all_groups(topo, earlier))


# -- golden: Megatron's new_group calls -------------------------------------------------------

MEGATRON_CALLS = [
    # (layout, calls counted by hand from initialize_model_parallel's loops)
    # W=8 tp2 pp2: dp-cp 4*2 + dp 4*2 + cp 8 + mp 2 + tp 4 + pp 3*4 + tp-dp-cp 2 + tp-dp 2
    #   + tp-cp 4 + ep 8 + etp 4 + tp-ep 4 + tp-ep-pp 2 + edp 4*2 + intra-dist-opt 1 = 77
    (Topology(8, tp=2, pp=2), 77),
    # W=16 tp2 pp4: 16 + 16 + 16 + 2 + 8 + 12 + 4 + 4 + 8 + 16 + 8 + 8 + 2 + 16 + 1 = 137
    (Topology(16, tp=2, pp=4), 137),
    # W=8 tp8: dp-cp 8*2 + dp 8*2 + cp 8 + mp 1 + tp 1 + pp 3*8 + 1 + 1 + 1 + ep 8 + etp 1
    #   + 1 + 1 + edp 8*2 + 1 = 97
    (Topology(8, tp=8), 97),
]


@pytest.mark.parametrize(("topo", "calls"), MEGATRON_CALLS)
def test_megatron_call_formula_matches_hand_counts(topo: Topology, calls: int) -> None:
    """The formula reproduces hand counts of Megatron's group-creation loops."""
    assert megatron_new_group_calls(topo) == calls


def test_megatron_call_formula_without_gloo() -> None:
    """Without gloo companions the 4 dp-cp, 4 dp and 4 edp groups are made once (77 - 12)."""
    assert megatron_new_group_calls(Topology(8, tp=2, pp=2), gloo=False) == 65


@pytest.fixture(scope="module")
def megatron() -> Iterator[tuple[Any, Any]]:
    """Megatron's parallel_state with a fake default group factory (skipped when absent)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ps = pytest.importorskip("megatron.core.parallel_state")
        fake_pg = pytest.importorskip("torch.testing._internal.distributed.fake_pg")
    yield ps, fake_pg


@pytest.mark.parametrize(
    "topo",
    [
        Topology(16, tp=2, pp=4),
        Topology(64, tp=2, cp=2, ep=4, pp=2, dist_opt_instances=2, hcp_sizes=(2, 1)),
        Topology(32, tp=2, ep=4, etp=1, cp=2, order="tp-cp-ep-dp-pp"),
    ],
)
def test_megatron_call_formula_matches_megatron(megatron: tuple[Any, Any], topo: Topology) -> None:
    """Counting torch.distributed.new_group calls of the real initialize_model_parallel agrees."""
    import torch.distributed as dist

    ps, fake_pg = megatron
    dist.init_process_group(
        "fake",
        store=fake_pg.FakeStore(),
        rank=0,
        world_size=topo.world_size,
    )
    calls = 0
    real = dist.new_group

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal calls
        calls += 1
        return object()

    dist.new_group = counting
    try:
        ps.initialize_model_parallel(
            tensor_model_parallel_size=topo.tp,
            pipeline_model_parallel_size=topo.pp,
            context_parallel_size=topo.cp,
            expert_model_parallel_size=topo.ep,
            expert_tensor_parallel_size=topo.etp,
            num_distributed_optimizer_instances=topo.dist_opt_instances,
            hierarchical_context_parallel_sizes=list(topo.hcp_sizes) if topo.hcp_sizes else None,
            order=topo.order,
        )
    finally:
        dist.new_group = real
        ps.destroy_model_parallel()
        dist.destroy_process_group()
    assert calls == megatron_new_group_calls(topo)


# -- rules: each triggers on one layout and not on its fix ------------------------------------

G8 = Cluster(gpus_per_node=8)

RULE_CASES = [
    # (code, severity, triggering (topology, cluster), passing (topology, cluster))
    (
        "world-size-mismatch",
        "error",
        (Topology(24, tp=8), Cluster(8, nodes=4)),
        (Topology(32, tp=8), Cluster(8, nodes=4)),
    ),
    (
        "world-size-mismatch",
        "error",
        (Topology(16, tp=8, rank_offset=24), Cluster(8, nodes=4)),
        (Topology(16, tp=8, rank_offset=16), Cluster(8, nodes=4)),
    ),
    ("partial-node", "warning", (Topology(12, tp=4), G8), (Topology(16, tp=4), G8)),
    (
        "rank-offset-unaligned",
        "warning",
        (Topology(16, tp=4, rank_offset=4), G8),
        (Topology(16, tp=4, rank_offset=8), G8),
    ),
    ("tp-larger-than-node", "error", (Topology(32, tp=16), G8), (Topology(32, tp=8), G8)),
    (
        "tp-larger-than-node",
        "error",
        (Topology(32, tp=8), Cluster(8, nvlink_domain=4)),
        (Topology(32, tp=16), Cluster(8, nvlink_domain=16)),
    ),
    (
        "etp-larger-than-node",
        "error",
        (Topology(32, tp=8, etp=16), G8),
        (Topology(32, tp=8, etp=8), G8),
    ),
    (
        "tp-crosses-nodes",
        "error",
        (Topology(64, tp=8, pp=2, order="dp-tp-cp-ep-pp"), G8),
        (Topology(64, tp=8, pp=2), G8),
    ),
    (
        "etp-crosses-nodes",
        "error",
        (Topology(64, tp=2, ep=8, etp=2, order="ep-tp-dp-cp-pp"), G8),
        (Topology(64, tp=2, ep=8, etp=2), G8),
    ),
    (
        "cp-crosses-nodes",
        "warning",
        (Topology(16, tp=2, cp=4, order="tp-dp-cp-ep-pp"), G8),
        (Topology(16, tp=2, cp=4), G8),
    ),
    (
        "ep-crosses-nodes",
        "warning",
        (Topology(64, tp=8, ep=8, etp=1, order="tp-dp-ep-cp-pp"), G8),
        (Topology(64, tp=8, ep=8, etp=1), G8),
    ),
    ("tp-straddles-nodes", "warning", (Topology(48, tp=3), G8), (Topology(48, tp=4), G8)),
    (
        "stages-share-node",
        "warning",
        (Topology(64, tp=2, pp=4, order="tp-pp-dp"), G8),
        (Topology(64, tp=2, pp=4), G8),
    ),
]


@pytest.mark.parametrize(
    ("code", "severity", "bad", "good"),
    RULE_CASES,
    ids=[f"{c[0]}-{i}" for i, c in enumerate(RULE_CASES)],
)
def test_rule_triggers_and_does_not(
    code: str,
    severity: str,
    bad: tuple[Topology, Cluster],
    good: tuple[Topology, Cluster],
) -> None:
    """The rule fires on the bad layout with its severity and stays silent on the fixed one."""
    fired = [f for f in check(*bad).findings if f.code == code]
    assert [f.severity for f in fired] == [severity]
    assert fired[0].message[0].islower() and "\n" not in fired[0].message
    assert code not in check(*good).codes()


def test_crossing_finding_names_an_order_that_fixes_it() -> None:
    """The order suggested by tp-crosses-nodes, when used, passes the check."""
    bad = Topology(4096, tp=8, pp=4, order="dp-tp-cp-ep-pp")
    (finding,) = [f for f in check(bad, G8).findings if f.code == "tp-crosses-nodes"]
    suggested = finding.message.split("order ")[-1].split("'")[1]
    fixed = check(Topology(4096, tp=8, pp=4, order=suggested), G8)
    assert fixed.ok and "tp-crosses-nodes" not in fixed.codes()


def test_crossing_example_group_really_crosses() -> None:
    """The example group of a crossing finding spans more than one node."""
    bad = Topology(64, tp=8, pp=2, order="dp-tp-cp-ep-pp")
    (finding,) = [f for f in check(bad, G8).findings if f.code == "tp-crosses-nodes"]
    assert finding.example in _all_groups(bad, "tp")
    assert len({r // 8 for r in finding.example}) > 1


def test_too_many_communicators_warns_above_the_budget() -> None:
    """too-many-communicators fires when one rank joins more sets than max_communicators."""
    topo = Topology(16, tp=2, pp=4)  # 6 distinct sets on the embedding stages (see doctest)
    assert "too-many-communicators" in check(topo, G8, max_communicators=5).codes()
    assert "too-many-communicators" not in check(topo, G8, max_communicators=6).codes()


def test_tp_spanning_nodes_inside_an_nvlink_domain_is_fine() -> None:
    """tp(16) on 8-GPU nodes inside a 72-GPU NVLink domain is not an error."""
    report = check(Topology(144, tp=16), Cluster(8, nvlink_domain=72))
    assert report.ok and not report.errors


# -- report -----------------------------------------------------------------------------------


def test_ok_is_false_exactly_when_an_error_is_found() -> None:
    """Report.ok is False with an error finding and True with only warnings."""
    assert not check(Topology(32, tp=16), G8).ok
    warned = check(Topology(12, tp=4), G8)
    assert warned.ok and warned.warnings


def test_findings_are_sorted_by_severity() -> None:
    """Errors come before warnings, warnings before info."""
    report = check(Topology(12, tp=3), Cluster(8, nodes=2))
    ranks = [("error", "warning", "info").index(f.severity) for f in report.findings]
    assert ranks == sorted(ranks) and ranks[0] == 0


def test_report_to_dict_is_json_and_complete() -> None:
    """to_dict survives json and carries ok, findings, one placement row per kind, counts."""
    topo = Topology(64, tp=8, pp=2)
    data = json.loads(json.dumps(check(topo, Cluster(8, nodes=8)).to_dict()))
    assert data["ok"] is True
    assert Topology.from_dict(data["topology"]) == topo
    assert [row["kind"] for row in data["placement"]] == list(topo.kinds)
    assert set(data["communicators"]) == {
        "per_rank_min",
        "per_rank_max",
        "strategies",
        "megatron",
        "shared",
    }
    assert {f["code"] for f in data["findings"]} == {"communicators"}


def test_placement_lookup_accepts_megatron_names() -> None:
    """Report.placement('mp') is the tp-pp row."""
    report = check(Topology(16, tp=2, pp=4), G8)
    assert report.placement("mp") == report.placement("tp-pp")


def test_check_rejects_wrong_argument_types() -> None:
    """check() raises TopologyError naming the argument for a non-Cluster or bad budget."""
    with pytest.raises(TopologyError, match="cluster must be a Cluster or a RankMap, got int"):
        check(Topology(8), 8)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="max_communicators must be a positive int"):
        check(Topology(8), G8, max_communicators=0)


def test_finding_rejects_unknown_severity() -> None:
    """A Finding's severity must be error, warning or info."""
    with pytest.raises(TopologyError, match="severity must be one of error, warning, info"):
        Finding("fatal", "x", "y")


def test_large_world_check_is_exact_and_quick() -> None:
    """A 2^20-rank layout is checked without enumerating its ranks (placement rows exact)."""
    report = check(Topology(1 << 20, tp=8, pp=8), G8)
    assert isinstance(report, Report) and report.ok
    assert all(row.exact for row in report.placements)
    assert report.placement("tp").intra_node and report.placement("dp").nodes == 1 << 14


IRREGULAR = Topology(24, cp=3, pp=2, order="cp-pp-dp-tp-ep", dist_opt_instances=3)
"""intra-dp-cp chunks of 2 cut the dp-cp group (cp stride 1, dp stride 6) unevenly."""


def test_irregular_kind_placement_equals_brute_force() -> None:
    """An intra-dp-cp whose chunks are no product of runs is still measured exactly."""
    cluster = Cluster(4)
    row = next(r for r in placements(IRREGULAR, cluster) if r.kind == "intra-dp-cp")
    groups = _all_groups(IRREGULAR, "intra-dp-cp")
    nodes = [len({r // 4 for r in g}) for g in groups]
    assert (row.nodes, row.nodes_min, row.exact) == (max(nodes), min(nodes), True)


def test_irregular_kind_communicators_equal_brute_force() -> None:
    """Communicator counts of a layout with an irregular kind equal enumeration."""
    everything = {frozenset(g) for k in IRREGULAR.kinds for g in IRREGULAR.groups(k) if len(g) > 1}
    assert communicators(IRREGULAR).all == len(everything)


def test_irregular_chunks_that_equal_other_groups_count_once() -> None:
    """intra-dp-cp chunks that coincide with some ep groups are counted once, per rank too."""
    topo = Topology(36, tp=3, cp=6, ep=4, etp=1, order="cp-tp-ep-dp-pp", dist_opt_instances=3)
    everything = {frozenset(g) for k in topo.kinds for g in topo.groups(k) if len(g) > 1}
    per_rank = [
        len({frozenset(topo.group_of(r, k)) for k in topo.kinds if topo.size(k) > 1})
        for r in range(36)
    ]
    counts = communicators(topo)
    assert counts.all == len(everything)
    assert (counts.per_rank_min, counts.per_rank_max) == (min(per_rank), max(per_rank))
