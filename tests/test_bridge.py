"""The bridge between two modules: every activation slice arrives exactly once where it is needed.

Laws over random pairs of layouts (dp, cp, tp, pp and Megatron's gtp, counts that need not
divide): each receiving rank gets exactly the cells of its lane and its cp chunks, once each,
from a rank of the sender's last stage that holds them; the send and receive lists agree; the
copies of a sending block share its handoffs. Then golden cases, including those Megatron's
``BridgeCommunicator`` refuses (cp > 1, 3 lanes into 2), and the errors.

The receiving side's needs are computed here from the Topology's own queries (``stage``,
``local_rank``), not from the grid coordinates the bridge reads.
"""

from __future__ import annotations

from collections import Counter
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topology import AxisGroups, Bridge, Grid, Module, Topology, TopologyError, bridge
from topology.strategies import topologies

LAWS = settings(max_examples=30)


def _lane(topo: Topology, rank: int) -> tuple[int, int]:
    """(lane, lanes): dp outermost, then gtp, as the bridge documents."""
    gtp = topo.local_rank(rank, "gtp") if topo.gtp > 1 else 0
    return topo.local_rank(rank, "dp") * topo.gtp + gtp, topo.dp * topo.gtp


def _holder(unit: int, units: int, ranks: int, zigzag: bool) -> int:
    """The cp rank of ``ranks`` that holds sequence unit ``unit`` of ``units``."""
    if not zigzag:
        return unit * ranks // units
    chunk = unit * 2 * ranks // units
    return min(chunk, 2 * ranks - 1 - chunk)


def _cells(topo: Topology, rank: int, link: Bridge, zigzag: bool) -> set[tuple[int, int]]:
    """The (batch unit, sequence unit) cells ``rank`` holds (or needs) on its boundary stage."""
    lane, lanes = _lane(topo, rank)
    cp = topo.local_rank(rank, "cp")
    L, M = link.batch_units, link.sequence_units
    return {
        (b, u)
        for b, u in product(range(L), range(M))
        if b * lanes // L == lane and _holder(u, M, topo.cp, zigzag) == cp
    }


PAIRS = st.tuples(
    topologies(max_world_size=16, max_rank_offset=0, moe=False, gtp=True),
    topologies(max_world_size=16, max_rank_offset=0, moe=False, gtp=True),
    st.booleans(),
    st.booleans(),
)


def _modules(a: Topology, b: Topology, colocated: bool) -> tuple[Module, Module]:
    if colocated:
        b = Topology(a.world_size, tp=b.tp if a.world_size % b.tp == 0 else 1)
    return Module("s", a), Module("r", b, rank_offset=0 if colocated else a.world_size)


@LAWS
@given(PAIRS)
def test_every_slice_arrives_exactly_once_from_a_holder(
    pair: tuple[Topology, Topology, bool, bool],
) -> None:
    """Each first-stage receiver gets its cells once each, each from a last-stage holder."""
    a, b, zigzag, colocated = pair
    send, recv = _modules(a, b, colocated)
    link = bridge(send, recv, zigzag=zigzag)
    src_topo, dst_topo = send.layout, recv.layout
    assert isinstance(src_topo, Topology) and isinstance(dst_topo, Topology)
    got: dict[int, Counter[tuple[int, int]]] = {}
    for t in link.handoffs:
        assert src_topo.stage(t.src) == src_topo.pp - 1 and dst_topo.stage(t.dst) == 0
        cells = set(product(range(*t.batch), range(*t.sequence)))
        assert cells <= _cells(src_topo, t.src, link, zigzag)
        got.setdefault(t.dst, Counter()).update(cells)
    for rank in recv.span:
        if dst_topo.stage(rank) != 0:
            assert rank not in got
            continue
        assert set(got[rank]) == _cells(dst_topo, rank, link, zigzag)
        assert set(got[rank].values()) == {1}


@LAWS
@given(PAIRS)
def test_send_and_receive_lists_agree(pair: tuple[Topology, Topology, bool, bool]) -> None:
    """dst is in sends(src) exactly when src is in receives(dst); roles follow the lists."""
    a, b, zigzag, colocated = pair
    link = bridge(*_modules(a, b, colocated), zigzag=zigzag)
    ranks = range(a.world_size + (0 if colocated else b.world_size))
    sent = {(s, d) for s in ranks for d in link.sends(s)}
    received = {(s, d) for d in ranks for s in link.receives(d)}
    assert sent == received == {(t.src, t.dst) for t in link.handoffs}
    for rank in ranks:
        expected = {(True, True): "both", (True, False): "sender", (False, True): "receiver"}
        key = (bool(link.sends(rank)), bool(link.receives(rank)))
        assert link.role(rank) == expected.get(key, "none")


@LAWS
@given(PAIRS)
def test_per_rank_queries_equal_filtering_every_handoff(
    pair: tuple[Topology, Topology, bool, bool],
) -> None:
    """sends, receives and handoffs_of (read from an index) equal a scan of every handoff."""
    a, b, zigzag, colocated = pair
    link = bridge(*_modules(a, b, colocated), zigzag=zigzag)
    for rank in range(-1, a.world_size + b.world_size + 1):
        assert link.sends(rank) == tuple(sorted({t.dst for t in link.handoffs if t.src == rank}))
        assert link.receives(rank) == tuple(sorted({t.src for t in link.handoffs if t.dst == rank}))
        assert link.handoffs_of(rank) == tuple(t for t in link.handoffs if rank in (t.src, t.dst))


@LAWS
@given(PAIRS)
def test_the_copies_of_a_block_share_its_sends(pair: tuple[Topology, Topology, bool, bool]) -> None:
    """Disjoint modules: the copies (tp ranks) of one sending block differ by at most one send."""
    a, b, zigzag, _ = pair
    send, recv = _modules(a, b, False)
    link = bridge(send, recv, zigzag=zigzag)
    topo = send.layout
    assert isinstance(topo, Topology)
    load = Counter(t.src for t in link.handoffs)
    blocks: dict[tuple[int, int], list[int]] = {}
    for rank in send.span:
        if topo.stage(rank) == topo.pp - 1:
            blocks.setdefault((_lane(topo, rank)[0], topo.local_rank(rank, "cp")), []).append(rank)
    for ranks in blocks.values():
        counts = [load[r] for r in ranks]
        assert max(counts) - min(counts) <= 1


# -- golden ----------------------------------------------------------------------------------------


def test_fan_in_matches_megatrons_leaders() -> None:
    """dp 4 into dp 2 (Megatron's fan-in): receiver lane i gets sender lanes 2i and 2i + 1."""
    link = bridge(Module("enc", Topology(4)), Module("llm", Topology(4, tp=2), rank_offset=4))
    assert (link.batch_units, link.sequence_units) == (4, 2)
    assert [link.receives(r) for r in (4, 5, 6, 7)] == [(0, 1), (0, 1), (2, 3), (2, 3)]
    assert link.sends(0) == (4, 5) and link.role(0) == "sender" and link.role(6) == "receiver"


def test_three_lanes_into_two_split_the_middle_lane() -> None:
    """dp 3 into dp 2 (Megatron refuses): lcm 6 units; sender lane 1 feeds both receivers."""
    link = bridge(Module("enc", Topology(3)), Module("llm", Topology(2), rank_offset=3))
    assert link.batch_units == 6
    assert link.sends(1) == (3, 4) and link.receives(3) == (0, 1) and link.receives(4) == (1, 2)
    halves = [(t.src, t.dst, t.batch) for t in link.handoffs if t.src == 1]
    assert halves == [(1, 3, (2, 3)), (1, 4, (3, 4))]


def test_context_parallel_zigzag_chunks() -> None:
    """cp 2 into cp 1 (Megatron refuses): chunks 0 and 3 come from cp 0, 1 and 2 from cp 1."""
    link = bridge(Module("enc", Topology(2, cp=2)), Module("llm", Topology(1), rank_offset=2))
    assert link.sequence_units == 4
    assert [(t.src, t.sequence) for t in link.handoffs] == [
        (0, (0, 1)),
        (0, (3, 4)),
        (1, (1, 3)),
    ]


def test_pipeline_stages_bound_the_bridge() -> None:
    """Only the sender's last stage sends and only the receiver's first stage receives."""
    link = bridge(Module("enc", Topology(4, pp=2)), Module("llm", Topology(4, pp=2), rank_offset=4))
    assert [link.role(r) for r in range(8)] == ["none"] * 2 + ["sender"] * 2 + ["receiver"] * 2 + [
        "none"
    ] * 2


def test_colocated_modules_copy_locally() -> None:
    """Colocated modules with the same lanes send nothing: every rank copies its own slice."""
    link = bridge(Module("a", Topology(4)), Module("b", Topology(4)))
    assert all(t.src == t.dst for t in link.handoffs)
    assert [link.role(r) for r in range(4)] == ["both"] * 4


def test_colocated_copies_share_what_is_not_local() -> None:
    """tp-fastest lanes into dp-fastest lanes on the same ranks: 2 local copies, 1 send each."""
    send = Module("a", Topology(4, tp=2, order="tp-dp"))
    recv = Module("b", Topology(4, tp=2, order="dp-tp"))
    link = bridge(send, recv, zigzag=False)
    assert [(t.src, t.dst) for t in link.handoffs] == [(0, 0), (1, 2), (2, 1), (3, 3)]


def test_bridge_errors() -> None:
    """A non-module, a module bridged to itself and a non-bool zigzag are refused."""
    one = Module("a", Topology(4))
    with pytest.raises(TopologyError, match=r"sender must be a topology.Module, got"):
        bridge(Topology(4), one)  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"a bridge joins two modules, got 'a' \[0, 4\) twice"):
        bridge(one, one)
    with pytest.raises(TopologyError, match=r"zigzag must be True or False, got 1"):
        bridge(one, Module("b", Topology(4)), zigzag=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_axes": "dp"}, r"batch_axes must be a list of axis names, got 'dp'; e\.g\."),
        ({"batch_axes": ("dp", "dpp")}, r"batch_axes names 'dpp', an axis of neither module"),
        ({"sequence_axes": [1]}, r"sequence_axes must be a list of axis names, got \[1\]"),
        ({"sequence_axes": ("cp", "cq")}, r"sequence_axes names 'cq'.*valid: cp, dp, gtp, pp, tp$"),
        ({"stage_axis": ["pp"]}, r"stage_axis must be one axis name, got \['pp'\]"),
        ({"stage_axis": "ppp"}, r"stage_axis names 'ppp'"),
    ],
)
def test_bridge_refuses_axes_it_would_misread(options: dict[str, object], message: str) -> None:
    """A string where a list of axes is meant (read letter by letter it gave one lane) and a
    name no module has (a typo was skipped) are refused, naming the value and the valid names."""
    one, two = Module("a", Topology(4)), Module("b", Topology(4), rank_offset=4)
    with pytest.raises(TopologyError, match=message):
        bridge(one, two, **options)  # type: ignore[arg-type]


def test_a_grid_modules_own_axes_are_valid_bridge_axes() -> None:
    """A grid module's axis names are valid beside Megatron's: 'data' makes 2 sender lanes
    (lcm with the receiver's 3 dp lanes: 6 units; 3 if it were skipped)."""
    grid = AxisGroups(Grid(("data", "model"), (2, 2)))
    link = bridge(
        Module("a", grid), Module("b", Topology(3), rank_offset=4), batch_axes=("data", "dp")
    )
    assert link.batch_units == 6
