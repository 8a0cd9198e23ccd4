"""Crossings at its edges: host sets and kind sharing against brute force, then the value object's
validation, lookups and priority key on hand-built tables, and the example group a crossing
finding names.

The brute forces share no code with :mod:`topology._preflight.crossings`: host sets come straight
from ``Topology.groups`` and a host list, and kinds are "the same" when their groups are equal as
sets of rank tuples. Golden values are worked out by hand in each test's comment.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, Tier, Topology, TopologyError, check, crossings
from topology._megatron.shapes import shape_of
from topology._preflight.crossings import Crossings, distinct_kinds, host_sets
from topology.strategies import topologies

# -- laws: host sets and kind sharing equal brute force -------------------------------------------


@settings(max_examples=40, deadline=None)
@given(topologies(max_world_size=32), st.data())
def test_host_sets_equal_brute_force(topo: Topology, data: st.DataObject) -> None:
    """Host sets, any host per rank (not only consecutive), equal a count over every group."""
    end = topo.rank_offset + topo.world_size
    nodes = data.draw(st.lists(st.integers(0, 5), min_size=end, max_size=end), label="nodes")
    for kind in ("tp", "cp", "ep", "pp", "dp", "edp"):
        expected: Counter[frozenset[int]] = Counter()
        for group in topo.groups(kind):
            hosts = frozenset(nodes[r] for r in group)
            if len(hosts) > 1:
                expected[hosts] += 1
        assert host_sets(topo, kind, nodes) == expected


def test_host_sets_count_a_group_whose_ends_share_a_host() -> None:
    """tp group (0, 1, 2, 3) on hosts 0, 1, 1, 0 spans two hosts although its ends share one."""
    topo = Topology(8, tp=4)
    nodes = [0, 1, 1, 0, 2, 2, 2, 2]
    assert host_sets(topo, "tp", nodes) == Counter({frozenset({0, 1}): 1})


def test_host_sets_count_two_rank_groups_and_multiplicities() -> None:
    """tp2 on 8 ranks, host = rank % 2: all four pairs run on hosts {0, 1}, so one set, 4 groups."""
    assert host_sets(Topology(8, tp=2), "tp", [r % 2 for r in range(8)]) == Counter(
        {frozenset({0, 1}): 4}
    )


@settings(max_examples=40, deadline=None)
@given(topologies(max_world_size=32))
def test_distinct_kinds_map_to_the_first_kind_with_equal_groups(topo: Topology) -> None:
    """A regular kind maps to the first regular kind with the same groups; an irregular one to
    itself."""
    groups = {kind: {tuple(g) for g in topo.groups(kind)} for kind in topo.kinds}
    regular = [kind for kind in topo.kinds if shape_of(topo, kind) is not None]
    first = distinct_kinds(topo, topo.kinds)
    assert list(first) == list(topo.kinds)
    for kind in topo.kinds:
        if kind not in regular:
            assert first[kind] == kind
        else:
            assert first[kind] == next(k for k in regular if groups[k] == groups[kind])


def test_distinct_kinds_keeps_equal_irregular_kinds_apart() -> None:
    """24 ranks, cp2 pp2, 4 optimizer instances: dp-cp (12 ranks) splits into uneven chunks of 3,
    so intra-dp-cp has no shape and is its own representative, as is intra-edp with equal
    groups; etp equals tp (1 rank) and maps to the earlier kind."""
    topo = Topology(24, cp=2, pp=2, dist_opt_instances=4, order="tp-cp-ep-pp-dp")
    first = distinct_kinds(topo, ["intra-dp-cp", "intra-edp", "tp", "etp"])
    assert first == {
        "intra-dp-cp": "intra-dp-cp",
        "intra-edp": "intra-edp",
        "tp": "tp",
        "etp": "tp",
    }


# -- the Crossings value: validation, lookups, the key --------------------------------------------

# Tiers node < rack < spine; kinds of three classes. Every count is made up but consistent.
TABLE = Crossings(
    tiers=("node", "rack", "spine"),
    kinds=("tp", "etp", "cp", "dp"),
    crossing=((5, 3, 1), (5, 3, 1), (4, 2, 0), (7, 6, 5)),
    totals=(8, 8, 6, 4),
)


def test_key_sums_each_kind_class_per_tier_from_the_rack() -> None:
    """Classes (tp, etp), (ep, cp), (pp, dp, edp), tiers rack, spine: (3+3, 1+1), (2, 0), (6, 5)."""
    assert TABLE.key() == (6, 2, 2, 0, 6, 5)


def test_key_from_the_node_tier_includes_it() -> None:
    """With first_tier=0 each class also sums its node column: 5+5, 4, 7 come first."""
    assert TABLE.key(first_tier=0) == (10, 6, 2, 4, 2, 0, 7, 6, 5)


def test_count_takes_a_tier_name_or_index() -> None:
    """Index 0 is node, 2 is spine; groups() reads the totals."""
    assert [TABLE.count("dp", t) for t in (0, 1, 2, "node", "rack", "spine")] == [7, 6, 5, 7, 6, 5]
    assert (TABLE.groups("tp"), TABLE.groups("cp")) == (8, 6)


@pytest.mark.parametrize("tier", [3, -1, True, "leaf", 1.0])
def test_count_refuses_an_unknown_tier(tier: object) -> None:
    """An index outside 0..2, a bool, a float or an unknown name is no tier."""
    shown = re.escape(repr(tier))
    with pytest.raises(
        TopologyError, match=rf"^tier {shown} is not known; valid: node, rack, spine$"
    ):
        TABLE.count("tp", tier)  # type: ignore[arg-type]


def test_count_refuses_an_uncounted_kind() -> None:
    """pp is not in the table: the message names it and lists the kinds."""
    with pytest.raises(TopologyError, match=r"^kind 'pp' is not counted; valid: tp, etp, cp, dp$"):
        TABLE.count("pp", "rack")
    with pytest.raises(TopologyError, match="kind 'ep' is not counted"):
        TABLE.groups("ep")


@pytest.mark.parametrize(
    ("crossing", "totals", "rows"),
    [(((0, 0),), (1, 1), 1), (((0, 0), (0, 0)), (1,), 2), (((0, 0), (0, 0), (0, 0)), (1, 1), 3)],
)
def test_crossings_need_one_row_and_one_total_per_kind(
    crossing: tuple[tuple[int, ...], ...], totals: tuple[int, ...], rows: int
) -> None:
    """Two kinds need two rows and two totals; either one short or long is refused."""
    with pytest.raises(
        TopologyError,
        match=rf"one total per kind \(2 kinds\), got {rows} rows and {len(totals)} totals$",
    ):
        Crossings(tiers=("node", "rack"), kinds=("tp", "dp"), crossing=crossing, totals=totals)


@pytest.mark.parametrize("row", [(0,), (0, 0, 0), (1, -1), (True, 0), (0, 1.0)])
def test_each_crossing_row_holds_one_count_per_tier(row: tuple[object, ...]) -> None:
    """A row of the wrong length, a negative count, a bool or a float is refused, and shown."""
    with pytest.raises(
        TopologyError,
        match=rf"one count >= 0 per tier \(2 tiers\), got {re.escape(repr(row))}$",
    ):
        Crossings(tiers=("node", "rack"), kinds=("tp",), crossing=(row,), totals=(1,))  # type: ignore[arg-type]


def test_zero_counts_are_valid() -> None:
    """A table where nothing crosses is a valid table."""
    found = Crossings(tiers=("node", "rack"), kinds=("tp",), crossing=((0, 0),), totals=(4,))
    assert found.count("tp", "rack") == 0


# -- crossings() on real maps ---------------------------------------------------------------------


def _racks(names: str, gpus: int = 4) -> Allocation:
    """One host per letter, in that rack, listed in that order."""
    hosts = [Host(f"h{i}", gpus, (rack,)) for i, rack in enumerate(names)]
    return Allocation(hosts, [Tier("rack", nvlink=True)])


def test_crossings_refuse_a_wrong_topology_or_map() -> None:
    """The messages name the argument and the type given."""
    rank_map = _racks("ab").rank_map(8)
    with pytest.raises(TopologyError, match=r"^topology must be a Topology, got str$"):
        crossings("tp8", rank_map)  # type: ignore[arg-type]
    with pytest.raises(
        TopologyError, match=r"^rank_map must be a RankMap, got list; use Allocation\.rank_map"
    ):
        crossings(Topology(8, tp=8), [0] * 8)  # type: ignore[arg-type]


def test_crossings_accept_a_map_of_exactly_offset_plus_world_ranks() -> None:
    """tp4 at rank_offset 4 on hosts a, b of 4 GPUs: 8 ranks suffice, ranks 4..7 sit on b."""
    found = crossings(Topology(4, tp=4, rank_offset=4), _racks("ab").rank_map(8))
    assert (found.count("tp", "node"), found.count("tp", "rack")) == (0, 0)


def test_a_crossing_finding_names_a_group_that_crosses() -> None:
    """Racks a a b a a b b b, tp8 on 4-GPU hosts: tp groups 1 (ranks 8..15, racks b a) and 2
    (a b) cross, group 0 (a a) does not; ordering a-hosts first fixes both, so the error names
    the first crossing group, ranks 8..15."""
    topo = Topology(32, tp=8)
    report = check(topo, _racks("aabaabbb").rank_map(32))
    finding = next(f for f in report.errors if f.code == "tp-crosses-tier")
    assert finding.message.startswith("2 of 4 tp groups span two or more rack domains")
    assert tuple(finding.example) == tuple(range(8, 16))


def test_etp_equal_to_tp_is_reported_once() -> None:
    """On the racks above etp groups are the tp groups: one error, for tp, not a second for etp."""
    report = check(Topology(32, tp=8), _racks("aabaabbb").rank_map(32))
    assert [f.code for f in report.findings if f.code.endswith("-crosses-tier")] == [
        "tp-crosses-tier"
    ]


def test_a_crossing_no_host_order_avoids_is_not_blamed_on_the_order() -> None:
    """tp8 on racks a a a b b b of 4-GPU hosts: the pair (a, b) of hosts 2, 3 crosses, and any
    order pairs one a with one b (3 a's, 3 b's, pairs of hosts): 1 of 3 is the best, no finding."""
    report = check(Topology(24, tp=8), _racks("aaabbb").rank_map(24))
    assert report.crossings is not None and report.crossings.count("tp", "rack") == 1
    assert not [f for f in report.findings if f.code.endswith("-crosses-tier")]


def test_a_kind_the_order_cannot_help_does_not_hide_the_next() -> None:
    """tp4 cp2 on 2-GPU hosts in racks a a a b b b a a. tp groups are host pairs: (a, b) of hosts
    2, 3 crosses, and 5 a's and 3 b's always leave one mixed pair, so tp gets no finding. cp
    pairs rank r with r + 4: hosts 1 and 3 (a, b) give 2 crossing groups, hosts 4..7 (b b a a)
    give 4: 6 of 8, where a b b b beside a a a a would cross only 2."""
    report = check(Topology(16, tp=4, cp=2), _racks("aaabbbaa", gpus=2).rank_map(16))
    crossing = [f for f in report.findings if f.code.endswith("-crosses-tier")]
    assert [(f.severity, f.code) for f in crossing] == [("warning", "cp-crosses-tier")]
    assert crossing[0].message.startswith(
        "6 of 8 cp groups span two or more rack domains in this host order although 2 would"
    )
