"""Time and memory independent of the world size: check, rank_info and reprs at up to 2**40."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import AxisGroups, Cluster, Topology, check

BIG = 1 << 40
REPR_LIMIT = 2000


def _peak_bytes(action: object) -> int:
    assert callable(action)
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_check_memory_does_not_grow_with_the_largest_group() -> None:
    """check() on 2**26 ranks (a dp group of 2**20) peaks far below one materialised group."""
    topo = Topology(1 << 26, tp=8, pp=8)
    assert _peak_bytes(lambda: check(topo, Cluster(8, nvlink_domain=72))) < 4 << 20


def test_rank_info_memory_does_not_grow_with_the_world() -> None:
    """rank_info and pipeline at 2**40 ranks hold no world-sized tuple."""
    topo = Topology(BIG, tp=8, pp=1 << 10)
    assert _peak_bytes(lambda: (topo.rank_info(BIG - 1), topo.pipeline(12345))) < 1 << 20


def test_check_at_2_40_gives_the_arithmetic_answer() -> None:
    """At 2**40 ranks (tp 8, pp 8, 8-GPU nodes, 72-GPU domains) rows match hand arithmetic."""
    report = check(Topology(BIG, tp=8, pp=8), Cluster(8, nvlink_domain=72))
    dp = BIG // 64
    rows = {row.kind: row for row in report.placements}
    assert (rows["tp"].nodes, rows["tp"].nodes_min) == (1, 1)
    # dp ranks are 8 apart: one per node, so a dp group touches dp nodes.
    assert (rows["dp"].nodes, rows["dp"].nodes_min) == (dp, dp)
    # pp ranks are 8 * dp apart: every stage on its own node.
    assert rows["pp"].nodes == 8 and rows["tp-pp"].nodes == 8
    # a dp group is b, b + 8, ... for b = tp rank + stage * 8 * dp; its ranks are never 72
    # apart, so it covers every domain from b // 72 to its last rank's.
    bases = [t + stage * 8 * dp for t in range(8) for stage in range(8)]
    span = max((b + 8 * (dp - 1)) // 72 - b // 72 + 1 for b in bases)
    assert rows["dp"].domains == span
    assert all(row.exact for row in report.placements)
    groups = {"dp-cp": 64, "tp-pp": BIG // 64, "tp": BIG // 8, "pp": BIG // 8}
    groups |= {"embedding": BIG // 8, "tp-dp-cp": 8}  # one per pipeline; one per stage
    assert report.communicators.all == sum(groups.values())
    assert report.ok


def test_check_at_2_40_with_a_huge_node_completes() -> None:
    """A billion GPUs per node at 2**40 ranks: the world fills whole nodes, tp stays inside."""
    report = check(Topology(BIG, tp=8, pp=8, cp=4, ep=8), Cluster(1_000_000_000))
    assert report.placement("tp").nodes == 1
    assert report.placement("pp").nodes == 8
    assert "partial-node" in report.codes()


def test_irregular_kind_at_2_40_is_measured_from_structure() -> None:
    """intra-dp-cp chunks that cut cp unevenly at 3 * 2**38 ranks are measured, not built."""
    dp = 1 << 36
    topo = Topology(12 * dp, cp=3, tp=2, pp=2, order="cp-tp-dp-ep-pp", dist_opt_instances=3)
    row = check(topo, Cluster(4)).placement("intra-dp-cp")
    # dp-cp position p is rank base + 6 * (p // 3) + p % 3; rows of 3 ranks 6 apart leave no
    # 4-GPU node empty, so a chunk covers every node from its first rank's to its last's.
    spans = []
    for base in (0, 3, 6 * dp, 6 * dp + 3):
        for j in range(3):
            first = base + 6 * (j * dp // 3) + j * dp % 3
            end = (j + 1) * dp - 1
            spans.append((base + 6 * (end // 3) + end % 3) // 4 - first // 4 + 1)
    assert min(spans) <= row.nodes_min <= row.nodes <= max(spans)
    assert row.example[-1] // 4 - row.example[0] // 4 + 1 == row.nodes
    assert (row.size, len(row.example), row.exact) == (dp, dp, False)


@st.composite
def huge_topologies(draw: st.DrawFn) -> Topology:
    """Topologies built from sizes directly, with worlds up to 2**40."""
    exponents = draw(st.lists(st.integers(0, 12), min_size=5, max_size=5))
    while sum(exponents) > 40:
        exponents[exponents.index(max(exponents))] -= 1
    tp, pp, cp, dp, extra = (1 << e for e in exponents)
    world = tp * pp * cp * dp
    if world * 3 <= BIG:
        world *= draw(st.sampled_from([1, 3]))
    ep = draw(st.sampled_from([1, 2, 4]))
    if (world // (tp * pp)) % ep:
        ep = 1
    order = draw(st.permutations(["tp", "cp", "ep", "dp", "pp"]))
    order_text = "-".join(order if order[-1] == "pp" or ep == 1 else [*order[:4], "pp"])
    if ep > 1 and "pp" in order_text[:-2]:
        order_text = "tp-cp-ep-dp-pp"
    instances = draw(st.sampled_from([1, 2])) if extra > 1 else 1
    try:
        return Topology(
            world,
            tp=tp,
            pp=pp,
            cp=cp,
            ep=ep,
            order=order_text,
            rank_offset=draw(st.sampled_from([0, 3, 1 << 30])),
            dist_opt_instances=instances,
            vpp=2 if pp > 1 else None,
        )
    except Exception:  # an order the expert grid cannot share: fall back to Megatron's
        return Topology(world, tp=tp, pp=pp, cp=cp)


@settings(max_examples=25, deadline=None)
@given(huge_topologies(), st.sampled_from([1, 4, 8, 72, 1 << 20]))
def test_every_repr_is_short_at_any_world_size(topo: Topology, gpus: int) -> None:
    """Topology, grids, AxisGroups, groups, RankInfo, Pipeline, Report, findings, rows: < 2000."""
    last = topo.rank_offset + topo.world_size - 1
    report = check(topo, Cluster(gpus, nvlink_domain=None if gpus > 8 else 72))
    objects: list[object] = [topo, topo.dense, topo.expert, report, report.cluster]
    objects += [topo.groups(kind) for kind in topo.kinds]
    objects += [topo.rank_info(last), topo.pipeline(last), report.communicators]
    objects += [*report.findings, *report.placements]
    every_axis_set = AxisGroups(topo.dense, kinds=["-".join(topo.dense.axes), *topo.dense.axes])
    objects += [every_axis_set, every_axis_set.groups("-".join(topo.dense.axes))]
    for value in objects:
        assert len(repr(value)) < REPR_LIMIT, type(value).__name__


def test_reprs_at_2_40_are_short() -> None:
    """The largest layout's report, rank info and dp groups print in under 2000 characters."""
    topo = Topology(BIG, tp=2, pp=2)
    report = check(topo, Cluster(8))
    for value in (report, *report.placements, topo.rank_info(7), topo.groups("dp")):
        assert len(repr(value)) < REPR_LIMIT
    assert "ranks" in repr(topo.pipeline(0).ranks) or topo.pp <= 16
