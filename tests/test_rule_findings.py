"""The size and crossing rules of ``check()``, built and run one at a time.

Each rule is made by a factory per kind (``_too_large("tp")``, ``_crossing("cp")``); the tests
call the factory themselves, so that the rule they run is the one they built (mutation testing
then reaches the rule's body). Expected spans are counted by hand from ``node = rank // G``.
"""

from __future__ import annotations

import itertools
import re

import pytest

from topology import Cluster, Topology, check
from topology._preflight.communicators import communicators
from topology._preflight.findings import Finding
from topology._preflight.placement import placements
from topology._preflight.rules import (
    _Context,
    _crossing,
    _partial_node,
    _pipeline_vs_data,
    _rank_offset,
    _too_large,
    _world_size,
)


def run(rule_factory: object, kind: str, topo: Topology, cluster: Cluster) -> list[Finding]:
    """Build the rule for ``kind`` and run it on ``topo`` and ``cluster``."""
    rows = {row.kind: row for row in placements(topo, cluster)}
    ctx = _Context(topo, cluster, rows, communicators(topo), 32)
    return rule_factory(kind)(ctx)  # type: ignore[operator, no-any-return]


def spans(group: tuple[int, ...], unit: int) -> int:
    """Units of ``unit`` consecutive ranks that ``group`` touches."""
    return len({r // unit for r in group})


# -- larger than a node ---------------------------------------------------------------------------


def test_tp_larger_than_a_node_is_an_error_with_an_example() -> None:
    """tp(16) on 8-GPU nodes: an error naming the node size, with a tp group as example."""
    (finding,) = run(_too_large, "tp", Topology(16, tp=16), Cluster(8))
    assert (finding.severity, finding.code) == ("error", "tp-larger-than-node")
    assert finding.message == (
        "tp(16) is larger than one 8-GPU node, so every tp collective crosses the network; "
        "use tp <= 8 and grow another axis instead"
    )
    assert finding.example == tuple(range(16))


def test_larger_than_an_nvlink_domain_names_the_domain() -> None:
    """With NVLink domains of 4 GPUs the limit is the domain, and the message says so."""
    (finding,) = run(_too_large, "tp", Topology(16, tp=16), Cluster(8, nvlink_domain=4))
    assert "one 4-GPU NVLink domain" in finding.message and "use tp <= 4" in finding.message


@pytest.mark.parametrize(
    ("topo", "cluster"),
    [
        (Topology(16, tp=8), Cluster(8)),  # exactly a node
        (Topology(16, tp=16), Cluster(8, nvlink_domain=16)),  # fits the domain
        (Topology(16, tp=2), Cluster(1, nvlink_domain=2)),
    ],
)
def test_groups_that_fit_the_unit_are_not_too_large(topo: Topology, cluster: Cluster) -> None:
    """A tp group no larger than the node (or domain) raises nothing."""
    assert run(_too_large, "tp", topo, cluster) == []


def test_etp_equal_to_tp_is_reported_once_as_tp() -> None:
    """When the etp groups are the tp groups, only the tp rule fires."""
    topo = Topology(16, tp=16)
    assert [f.code for f in run(_too_large, "tp", topo, Cluster(8))] == ["tp-larger-than-node"]
    assert run(_too_large, "etp", topo, Cluster(8)) == []
    assert check(topo, Cluster(8)).codes().count("tp-larger-than-node") == 1
    assert "etp-larger-than-node" not in check(topo, Cluster(8)).codes()


def test_etp_larger_than_a_node_is_its_own_error() -> None:
    """etp(16) with tp(2) on 4-GPU nodes: an etp error, with an etp group as example."""
    topo = Topology(32, tp=2, etp=16, order="dp-tp-ep")
    (finding,) = run(_too_large, "etp", topo, Cluster(4))
    assert (finding.severity, finding.code) == ("error", "etp-larger-than-node")
    assert finding.message.startswith("etp(16) is larger than one 4-GPU node")
    assert finding.example == tuple(range(0, 32, 2))  # dp(16) fastest, then etp
    assert run(_too_large, "tp", topo, Cluster(4)) == []


# -- crossing nodes -------------------------------------------------------------------------------


def test_tp_spread_by_the_order_is_an_error_naming_a_better_order() -> None:
    """tp(8) strided by dp(4) spans 4 of the 8-GPU nodes; Megatron's order keeps it in one."""
    topo = Topology(32, tp=8, order="dp-tp")
    (finding,) = run(_crossing, "tp", topo, Cluster(8))
    assert (finding.severity, finding.code) == ("error", "tp-crosses-nodes")
    assert finding.example == (0, 4, 8, 12, 16, 20, 24, 28)
    assert spans(tuple(finding.example), 8) == 4
    assert finding.message == (
        "order 'dp-tp-pp-ep-cp' spreads each tp group of 8 ranks over up to 4 nodes although 1 "
        "would do; order 'tp-cp-ep-dp-pp' keeps each tp group within 1"
    )


def test_crossing_nvlink_domains_counts_domains() -> None:
    """With 16-GPU domains the same tp group spans 2 domains, and the message says domains."""
    topo = Topology(32, tp=8, order="dp-tp")
    (finding,) = run(_crossing, "tp", topo, Cluster(8, nvlink_domain=16))
    assert "over up to 2 NVLink domains although 1 would do" in finding.message


@pytest.mark.parametrize(
    ("topo", "kind", "severity", "example", "best"),
    [
        (Topology(32, cp=4, order="dp-cp"), "cp", "warning", (0, 8, 16, 24), "tp-cp-ep-dp-pp"),
        (Topology(32, ep=4, order="dp-ep"), "ep", "warning", (0, 8, 16, 24), "tp-cp-ep-dp-pp"),
        (
            Topology(32, ep=2, etp=4, order="dp-tp-ep"),
            "etp",
            "error",
            (0, 4, 8, 12),
            "tp-cp-ep-dp-pp",
        ),
    ],
)
def test_crossing_severity_depends_on_the_kind(
    topo: Topology, kind: str, severity: str, example: tuple[int, ...], best: str
) -> None:
    """tp and etp crossing nodes are errors; cp and ep are warnings; each names a better order."""
    (finding,) = run(_crossing, kind, topo, Cluster(4))
    assert (finding.severity, finding.code) == (severity, f"{kind}-crosses-nodes")
    assert finding.example == example
    size = len(example)
    assert finding.message.endswith(f"order {best!r} keeps each {kind} group within 1")
    assert f"each {kind} group of {size} ranks over up to {spans(example, 4)} nodes" in (
        finding.message
    )


def test_straddling_without_a_better_order_is_a_warning() -> None:
    """Offset 1 on 4-GPU nodes: tp (3, 4) straddles a boundary and no order helps."""
    topo = Topology(8, tp=2, pp=2, order="tp-cp-pp-dp-ep", rank_offset=1)
    (finding,) = run(_crossing, "tp", topo, Cluster(4))
    assert (finding.severity, finding.code) == ("warning", "tp-straddles-nodes")
    assert finding.example == (3, 4)
    assert finding.message == (
        "order 'tp-cp-pp-dp-ep' spreads each tp group of 2 ranks over up to 2 nodes although 1 "
        "would hold it, and no order does better because tp(2) or rank_offset(1) does not "
        "divide the 4 GPUs of one 4-GPU node; make both multiples or divisors of 4"
    )


@pytest.mark.parametrize(
    ("topo", "cluster", "kind"),
    [
        (Topology(32, tp=8), Cluster(8), "tp"),  # inside the node
        (Topology(16, tp=16), Cluster(8), "tp"),  # 2 nodes, and 2 are needed
        (Topology(32, tp=8, order="dp-tp"), Cluster(8), "cp"),  # size 1
        (Topology(32, tp=8, order="dp-tp"), Cluster(8), "etp"),  # the tp groups, reported as tp
    ],
)
def test_no_crossing_finding(topo: Topology, cluster: Cluster, kind: str) -> None:
    """No finding when groups use as few nodes as possible, are singletons, or duplicate tp."""
    assert run(_crossing, kind, topo, cluster) == []


def test_etp_crossing_differs_from_tp_crossing() -> None:
    """etp(4) != tp(1): etp crossing is reported under its own code, tp has nothing to say."""
    topo = Topology(32, ep=2, etp=4, order="dp-tp-ep")
    assert [f.code for f in run(_crossing, "etp", topo, Cluster(4))] == ["etp-crosses-nodes"]
    assert run(_crossing, "tp", topo, Cluster(4)) == []


# -- allocation size and partial nodes ------------------------------------------------------------


def run_plain(rule: object, topo: Topology, cluster: Cluster) -> list[Finding]:
    """Run a rule that is not made per kind on ``topo`` and ``cluster``."""
    rows = {row.kind: row for row in placements(topo, cluster)}
    return rule(_Context(topo, cluster, rows, communicators(topo), 32))  # type: ignore[operator, no-any-return]


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("nodes", [1, 2, 3])
@pytest.mark.parametrize("world", [1, 2, 3, 5, 6, 8, 12, 16, 24, 30])
def test_world_size_mismatch_names_the_allocation_and_a_fix(
    gpus: int, nodes: int, world: int
) -> None:
    """A world that is not nodes * gpus is an error naming both; --nodes is offered when some
    whole node count holds exactly the world, or when the world needs more nodes."""
    have = gpus * nodes
    findings = run_plain(_world_size, Topology(world), Cluster(gpus, nodes=nodes))
    if world == have:
        assert findings == []
        return
    (finding,) = findings
    assert (finding.severity, finding.code) == ("error", "world-size-mismatch")
    assert finding.message.startswith(
        f"world_size {world} does not match the allocation of "
        f"nodes({nodes}) * gpus_per_node({gpus}) = {have} GPUs; use world_size {have}"
    )
    fitting = next(n for n in range(1, world + 1) if n * gpus >= world)
    exact = any(n * gpus == world for n in range(1, world + 1))
    if exact or world > have:
        assert finding.message.endswith(f" or --nodes {fitting}")
    else:
        assert finding.message.endswith(f"use world_size {have}")


def test_offset_layout_beyond_the_allocation_is_an_error() -> None:
    """rank_offset 4 + world 8 on 2 nodes of 4 GPUs ends past the allocation: an error."""
    (finding,) = run_plain(_world_size, Topology(8, rank_offset=4), Cluster(4, nodes=2))
    assert (finding.severity, finding.code) == ("error", "world-size-mismatch")
    assert finding.message == (
        "rank_offset(4) + world_size(8) = 12 exceeds the allocation of "
        "nodes(2) * gpus_per_node(4) = 8 GPUs; shrink the layout or add nodes"
    )


@pytest.mark.parametrize("gpus", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("world", [1, 2, 3, 5, 6, 7, 9, 12, 20])
@pytest.mark.parametrize("offset", [0, 1, 4, 5])
def test_partial_node_points_at_the_ranks_of_the_short_node(
    gpus: int, world: int, offset: int
) -> None:
    """Cut the layout's ranks into nodes of ``gpus``; a short last node is a warning with its
    ranks as the example."""
    ranks = list(range(offset, offset + world))
    blocks = [ranks[i : i + gpus] for i in range(0, world, gpus)]
    findings = run_plain(_partial_node, Topology(world, rank_offset=offset), Cluster(gpus))
    if len(blocks[-1]) == gpus:
        assert findings == []
        return
    (finding,) = findings
    assert (finding.severity, finding.code) == ("warning", "partial-node")
    assert tuple(finding.example) == tuple(blocks[-1])
    assert f"one node runs only {len(blocks[-1])} of its {gpus} GPUs" in finding.message


@pytest.mark.parametrize("gpus", [2, 3, 4, 8])
@pytest.mark.parametrize("offset", [0, 1, 2, 5, 7, 8, 11])
def test_unaligned_offset_names_the_node_it_shares(gpus: int, offset: int) -> None:
    """An offset inside a node warns with that node's ranks and the two aligned offsets."""
    node = next(n for n in range(offset + 1) if n * gpus <= offset < (n + 1) * gpus)
    first = node * gpus
    findings = run_plain(_rank_offset, Topology(4, rank_offset=offset), Cluster(gpus))
    if first == offset:
        assert findings == []
        return
    (finding,) = findings
    assert (finding.severity, finding.code) == ("warning", "rank-offset-unaligned")
    assert tuple(finding.example) == tuple(r for r in range(first + gpus) if r >= first)
    assert finding.message.endswith(
        f"shares node {node} with other work; use rank_offset {first} or {first + gpus}"
    )


@pytest.mark.parametrize(
    ("topo", "gpus"),
    [
        (Topology(16, pp=2, order="tp-cp-ep-pp-dp"), 8),  # dp of 8 over 2 nodes, 1 would do
        (Topology(4, pp=2, order="tp-cp-ep-pp-dp"), 2),  # dp of 2
        (Topology(24, pp=3, order="tp-cp-ep-pp-dp"), 4),  # pp of 3
    ],
)
def test_stages_sharing_nodes_while_dp_spreads_is_a_warning(topo: Topology, gpus: int) -> None:
    """Stages on one node with dp spread: a warning whose order really puts dp on fewer nodes."""
    assert min(spans(tuple(g), gpus) for g in topo.groups("pp")) < topo.pp
    spread = max(spans(tuple(g), gpus) for g in topo.groups("dp"))
    (finding,) = run_plain(_pipeline_vs_data, topo, Cluster(gpus))
    assert (finding.severity, finding.code) == ("warning", "stages-share-node")
    assert f"each dp group of {topo.dp} spans {spread} nodes" in finding.message
    found = re.search(r"order '([a-z-]+)' puts each dp group on (\d+) node", finding.message)
    assert found is not None
    better = Topology(topo.world_size, pp=topo.pp, order=found[1])
    claimed = int(found[2])
    assert max(spans(tuple(g), gpus) for g in better.groups("dp")) == claimed < spread
    assert tuple(finding.example) in [tuple(g) for g in topo.groups("dp")]


@pytest.mark.parametrize(
    ("topo", "gpus"),
    [
        (Topology(12, tp=2, pp=2), 3),  # stages on distinct nodes although dp spreads
        (Topology(16, tp=2, pp=2), 3),
        (Topology(16, pp=2), 8),  # dp already inside a node
    ],
)
def test_no_stage_warning_when_stages_do_not_share_nodes(topo: Topology, gpus: int) -> None:
    """No stages-share-node warning when every pp group spans pp nodes."""
    assert min(spans(tuple(g), gpus) for g in topo.groups("pp")) == topo.pp
    assert run_plain(_pipeline_vs_data, topo, Cluster(gpus)) == []


def test_crossing_suggestion_moves_the_fewest_axes() -> None:
    """Among the orders that keep cp inside a node, the one named changes the fewest positions."""
    topo, gpus = Topology(8, tp=2, cp=2, rank_offset=2), 4
    findings = check(topo, Cluster(gpus)).findings
    (finding,) = [f for f in findings if f.code == "cp-crosses-nodes"]
    found = re.search(r"order '([a-z-]+)' keeps each cp group within 1$", finding.message)
    assert found is not None
    current = topo.order.split("-")

    def moves(order: str) -> int:
        return sum(a != b for a, b in zip(order.split("-"), current, strict=True))

    def cp_nodes(order: str) -> int:
        other = Topology(8, tp=2, cp=2, rank_offset=2, order=order)
        return max(spans(tuple(g), gpus) for g in other.groups("cp"))

    fitting = [
        "-".join(p)
        for p in itertools.permutations(current)
        if "-".join(p) != topo.order and cp_nodes("-".join(p)) == 1
    ]
    assert cp_nodes(found[1]) == 1
    assert moves(found[1]) == min(moves(order) for order in fitting)
