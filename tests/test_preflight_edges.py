"""Edges of the pre-launch check: Cluster's optional sizes, crosses_domains on irregular kinds
and the order a crossing finding suggests.

Expected values are counted by hand (node = rank // gpus_per_node, domain = rank // domain) or
by listing every group of a kind; neither reuses the code's layout algebra. Rules are built by
calling their factory in the test (as in tests/test_rule_findings.py), so that mutation testing
reaches the rule's body.
"""

from __future__ import annotations

import itertools
import re

import pytest

from topology import Cluster, Topology, TopologyError
from topology._machine.cluster import _optional_size
from topology._megatron.shapes import shape_of
from topology._preflight.communicators import communicators
from topology._preflight.placement import crosses_domains, placements
from topology._preflight.rules import _Context, _crossing

# -- Cluster: the validator of nodes and nvlink_domain ------------------------------------------


def test_optional_size_accepts_none_and_positive_ints() -> None:
    """The optional-size validator lets None and positive ints through."""
    check = _optional_size("nodes")
    check(None, None, None)
    check(None, None, 3)


@pytest.mark.parametrize("value", [0, -2, True, 2.0])
def test_optional_size_names_the_field_and_shows_the_value(value: object) -> None:
    """A non-size raises an error that names the field and shows the value and its type."""
    with pytest.raises(
        TopologyError, match=rf"^nvlink_domain must be a positive int, got {value!r} \("
    ):
        _optional_size("nvlink_domain")(None, None, value)


# -- crosses_domains on a kind with no translate structure --------------------------------------

IRREGULAR = Topology(24, cp=3, pp=2, order="cp-pp-dp-tp-ep", dist_opt_instances=3)
"""dp-cp groups are cp (stride 1) x dp (4 at stride 6): 0, 1, 2, 6, 7, 8, 12, ... 20 and the same
from 3; dist_opt_instances=3 cuts each into chunks of 4: (0, 1, 2, 6), (7, 8, 12, 13),
(14, 18, 19, 20), (3, 4, 5, 9), (10, 11, 15, 16), (17, 21, 22, 23)."""


def test_the_irregular_kind_really_has_no_shape() -> None:
    """intra-dp-cp of IRREGULAR takes the fallback path (no translate structure)."""
    assert shape_of(IRREGULAR, "intra-dp-cp") is None
    assert [tuple(g) for g in IRREGULAR.groups("intra-dp-cp")] == [
        (0, 1, 2, 6),
        (7, 8, 12, 13),
        (14, 18, 19, 20),
        (3, 4, 5, 9),
        (10, 11, 15, 16),
        (17, 21, 22, 23),
    ]


@pytest.mark.parametrize(
    ("domain", "crosses"),
    [
        (24, False),  # every rank in domain 0
        (12, True),  # (7, 8, 12, 13) holds domains 0 and 1: exactly two
        (3, True),  # (0, 1, 2, 6) holds domains 0 and 2
        (1, True),  # one rank per domain: every group holds four
    ],
)
def test_crosses_domains_of_irregular_chunks_by_hand(domain: int, crosses: bool) -> None:
    """The chunks counted by hand against NVLink domains of 24, 12, 3 and 1 GPUs."""
    assert crosses_domains(IRREGULAR, Cluster(4, nvlink_domain=domain), "intra-dp-cp") is crosses


@pytest.mark.parametrize("domain", [1, 2, 3, 4, 5, 6, 8, 12, 16, 24])
def test_crosses_domains_of_irregular_chunks_equals_listing_them(domain: int) -> None:
    """crosses_domains is True exactly when a listed chunk holds ranks of two domains."""
    groups = [tuple(g) for g in IRREGULAR.groups("intra-dp-cp")]
    expected = any(len({r // domain for r in g}) > 1 for g in groups)
    assert crosses_domains(IRREGULAR, Cluster(4, nvlink_domain=domain), "intra-dp-cp") is expected


# -- the order a crossing finding suggests --------------------------------------------------------


def spans(topo: Topology, kind: str, unit: int) -> int:
    """The most units of ``unit`` consecutive ranks one group of ``kind`` touches (listed)."""
    return max(len({r // unit for r in group}) for group in topo.groups(kind))


def other_orders(topo: Topology) -> list[Topology]:
    """``topo`` under every valid order of its five axes but its own."""
    found = []
    for tokens in itertools.permutations(("tp", "cp", "ep", "dp", "pp")):
        order = "-".join(tokens)
        if order == topo.order:
            continue
        try:
            found.append(Topology.from_dict({**topo.to_dict(), "order": order}))
        except TopologyError:
            continue
    return found


def suggested_order(kind: str, topo: Topology, cluster: Cluster) -> str:
    """The order named by the ``kind``-crosses-nodes finding (built from its factory)."""
    rows = {row.kind: row for row in placements(topo, cluster)}
    (finding,) = _crossing(kind)(_Context(topo, cluster, rows, communicators(topo), 64))
    assert finding.code == f"{kind}-crosses-nodes"
    found = re.search(r"; order '([a-z-]+)' keeps each", finding.message)
    assert found is not None, finding.message
    return found.group(1)


@pytest.mark.parametrize(
    ("topo", "kind", "best"),
    [
        # ep (0, 4) crosses. Order ep-tp-pp-dp-cp keeps ep (0, 1) and tp (0, 1) in a node (the
        # dense grid has no ep axis); only etp (0, 2) crosses. ep and etp of 2 cannot share one
        # 2-GPU node, so (ep, tp, etp) spans of (1, 1, 2) are the best any order achieves.
        (Topology(8, tp=2, ep=2, order="tp-cp-pp-dp-ep"), "ep", (1, 1, 2)),
        # cp (0, 4) crosses. cp and tp of 2 cannot share a node, so a cp-first order costs tp 2
        # nodes; cp-tp-... keeps etp (0, 1) in one (the expert grid has no cp axis): (1, 2, 1).
        (Topology(8, tp=2, cp=2, order="tp-dp-ep-cp-pp"), "cp", (1, 2, 1)),
    ],
)
def test_suggested_order_keeps_tp_and_etp_in_as_few_nodes_as_any(
    topo: Topology, kind: str, best: tuple[int, int, int]
) -> None:
    """Among the orders that keep the crossing kind in fewest nodes, the named one also keeps tp,
    then etp, in the fewest (hand count, and brute force over every order; 2-GPU nodes)."""
    named = Topology.from_dict({**topo.to_dict(), "order": suggested_order(kind, topo, Cluster(2))})

    def cost(candidate: Topology) -> tuple[int, ...]:
        return tuple(spans(candidate, k, 2) for k in (kind, "tp", "etp"))

    assert cost(named) == best
    assert min(cost(candidate) for candidate in other_orders(topo)) == best


# -- placement rows of the irregular kind, measured group by group --------------------------------


@pytest.mark.parametrize(
    ("cluster", "nodes", "nodes_min", "domains"),
    [
        # 12-GPU nodes: chunks (7, 8, 12, 13) and (10, 11, 15, 16) straddle rank 12, the other
        # four stay in one node; the first, middle and last chunks all stay in one.
        (Cluster(12), 2, 1, 2),
        # 8-GPU nodes, 3-GPU domains: chunk nodes 1, 2, 2, 2, 2, 1; every chunk spans 2 domains
        # ((0, 1, 2, 6) holds domains 0 and 2), so the widest chunk by domains is no widest by
        # nodes.
        (Cluster(8, nvlink_domain=3), 2, 1, 2),
        # 4-GPU nodes, 12-GPU domains: nodes 2, 3, 3, 3, 3, 2; domains 1, 2, 1, 1, 2, 1.
        (Cluster(4, nvlink_domain=12), 3, 2, 2),
    ],
)
def test_irregular_rows_of_a_small_world_count_every_chunk(
    cluster: Cluster, nodes: int, nodes_min: int, domains: int
) -> None:
    """A small world's irregular row is measured on every chunk, by hand (chunks listed above)."""
    row = next(r for r in placements(IRREGULAR, cluster) if r.kind == "intra-dp-cp")
    assert (row.nodes, row.nodes_min, row.domains, row.exact) == (nodes, nodes_min, domains, True)
    assert len({r // cluster.gpus_per_node for r in row.example}) == nodes


LARGE_IRREGULAR = Topology(98304, cp=3, pp=2, order="cp-pp-dp-tp-ep", dist_opt_instances=3)
"""IRREGULAR scaled past 2**16 ranks: dp 16384, dp-cp groups of 49152 cut into chunks of 16384."""


@pytest.mark.parametrize(
    "cluster",
    # Chunk node counts differ by one between chunks (on 5-GPU nodes chunk 2 alone spans 6555,
    # on 9-GPU nodes chunks 0 and 4 span 3641, on 10-GPU nodes chunks 1, 2 and 5 span 3278), so
    # measuring other chunks than 0, 3 and 5 shows in the row.
    [Cluster(5), Cluster(9), Cluster(10), Cluster(6, nvlink_domain=9)],
)
def test_a_large_irregular_row_is_measured_on_first_middle_and_last_chunks(
    cluster: Cluster,
) -> None:
    """Past 2**16 ranks the row measures chunks 0, count // 2 and count - 1 and says so."""
    groups = LARGE_IRREGULAR.groups("intra-dp-cp")
    count = len(groups)
    sample = [tuple(groups[i]) for i in (0, count // 2, count - 1)]
    nodes = [len({r // cluster.gpus_per_node for r in g}) for g in sample]
    domains = [len({r // cluster.domain_size for r in g}) for g in sample]
    row = next(r for r in placements(LARGE_IRREGULAR, cluster) if r.kind == "intra-dp-cp")
    assert (row.nodes, row.nodes_min, row.domains) == (max(nodes), min(nodes), max(domains))
    assert row.exact is False and row.groups == count == 6
    assert tuple(row.example) in sample
    assert len({r // cluster.gpus_per_node for r in row.example}) == row.nodes
