"""Laws of the transfer plan: every destination element arrives exactly once, bytes add up,
the plan is deterministic and no rank sends less than the lower bound says it must."""

from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from topology import Allocation, Host, RankMap, Tier, Topology
from topology._transfer.param_placement import param_placement
from topology._transfer.params import Param
from topology._transfer.plan import transfer
from topology.strategies import topologies

LAYOUTS = topologies(max_world_size=16, max_size=4, max_vpp=2, max_hcp_levels=0, gtp=True)
PLAIN = topologies(max_world_size=16, max_size=4, max_vpp=2, max_hcp_levels=0)
"""Layouts without Megatron's GTP axes (what the reference planner places)."""
GTP = st.one_of(
    topologies(max_world_size=16, max_size=4, max_vpp=2, max_hcp_levels=0, gtp=True, kinds=[k])
    for k in ("gtp", "egtp")
)
"""Layouts with a GTP axis (gtp or egtp > 1)."""


@st.composite
def cases(
    draw: st.DrawFn, gtp: bool = True, sources: st.SearchStrategy[Topology] | None = None
) -> tuple[Topology, Topology, list[Param], int, RankMap | None]:
    """Two layouts (Megatron's GTP axes included unless ``gtp=False``; the source drawn from
    ``sources`` when given), a few weights both can shard (sizes multiples of both sides'
    splits; row-parallel ones, which GTP cuts in 2-D blocks, 40 rows tall under GTP (blocks of
    32 + 8 for gtp 2, 16 + 16 + 8 (+ padding) for 3 and 4); one wide enough for unpadded GTP
    blocks, the others padded; a bias, which GTP leaves whole) and, sometimes, NVLink racks of
    two hosts to prefer sources in."""
    layouts = LAYOUTS if gtp else PLAIN
    src, dst = draw(sources if sources is not None else layouts), draw(layouts)
    world = max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)
    gpus = draw(st.sampled_from((1, 2, 4)))
    hosts = [Host(f"n{i}", gpus, (f"r{i // 2}",)) for i in range(-(-world // gpus))]
    racks = Allocation(hosts, [Tier("rack", nvlink=True)]).rank_map(world)
    rank_map = draw(st.sampled_from((None, racks)))
    unit = math.lcm(src.tp, src.etp, dst.tp, dst.etp)
    experts = src.ep * dst.ep
    chunks = max(src.pp * (src.vpp or 1), dst.pp * (dst.vpp or 1))
    layers = chunks + draw(st.integers(0, 2))
    k = draw(st.integers(1, 2))
    params = [
        Param("embed", (unit * k, 3), sharding="vocab", position=draw(st.sampled_from(POS))),
        Param("qkv", (unit * 3, 4), sharding="column", parts=(unit * 2, unit), layer=0),
        Param("qkv.bias", (unit * 3,), sharding="column", parts=(unit * 2, unit), layer=0),
        Param("wide", (unit * 64, 1), sharding="column", layer=draw(st.integers(0, layers - 1))),
        Param("norm", (7,), layer=draw(st.integers(0, layers - 1))),
        Param("out", (unit, 2), sharding="vocab", position="last", itemsize=4),
    ]
    tall = 5 if src.gtp == dst.gtp == src.egtp == dst.egtp == 1 else 40
    params.append(Param("proj", (tall, unit * k), sharding="row", layer=layers - 1))
    layer = draw(st.integers(0, layers - 1))
    for e in sorted(set(draw(st.lists(st.integers(0, experts - 1), min_size=1, max_size=3)))):
        params.append(
            Param(
                f"fc1.{e}",
                (unit * 2, 3),
                sharding="expert-column",
                parts=(unit, unit),
                layer=layer,
                expert=e,
                num_experts=experts,
            )
        )
        params.append(
            Param(
                f"fc2.{e}.bias",
                (3,),
                sharding="expert-replicated",
                layer=layer,
                expert=e,
                num_experts=experts,
            )
        )
        params.append(
            Param(
                f"fc2.{e}",
                (3 if tall == 5 else tall, unit),
                sharding="expert-row",
                layer=layer,
                expert=e,
                num_experts=experts,
            )
        )
    return src, dst, params, layers, rank_map


POS = ("first", "last", "tied")
Case = tuple[Topology, Topology, list[Param], int, RankMap | None]


def _local_rows(topo: Topology, param: Param, layers: int) -> dict[int, _Holding]:
    """Each holder's global indices, in local order: along dim 0 (a weight cut on dim 0, or
    1-D, has the one index 0 there) and along the cut dim."""
    rows: dict[int, _Holding] = {}
    for shard in param_placement(topo, param, num_layers=layers).shards:
        local = [g for lo, hi in shard.ranges for g in range(lo, hi)]
        for r in shard.ranks:
            rows[r] = (list(_dim0(param, shard.rows)), local)
    return rows


_Holding = tuple[list[int], list[int]]


def _dim0(param: Param, rows: tuple[int, int] | None) -> range:
    """The dim-0 indices of a holder of ``rows`` (when dim 0 is not the cut dim)."""
    if param.cut_dim == 0 or len(param.shape) < 2:
        return range(1)
    return range(*rows) if rows is not None else range(param.shape[0])


def _cells(holding: _Holding) -> set[tuple[int, int]]:
    return {(d, g) for d in holding[0] for g in holding[1]}


def _cell_bytes(param: Param) -> int:
    """Bytes of one (dim-0 index, cut-dim index) element."""
    return param.row_bytes // len(_dim0(param, None))


@settings(max_examples=30)
@given(cases())
def test_every_destination_element_arrives_exactly_once(
    case: Case,
) -> None:
    """Held rows plus received rows cover each receiver's shard once, from the right source rows."""
    _arrives_exactly_once(case)


@settings(max_examples=15)
@given(cases(sources=GTP))
def test_every_gtp_block_element_arrives_exactly_once(case: Case) -> None:
    """From a source with a GTP axis (blocks, padding, holders of none) too."""
    src = case[0]
    assert src.gtp > 1 or src.egtp > 1
    _arrives_exactly_once(case)


def _arrives_exactly_once(case: Case) -> None:
    """Each receiver's elements: held or received once, each op's block at both ends' local
    positions (dim 0 and the cut dim)."""
    src, dst, params, layers, rank_map = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    for index, param in enumerate(params):
        have = _local_rows(src, param, layers)
        want = _local_rows(dst, param, layers)
        counts = {
            r: Counter(c for c in _cells(rows) if c in _cells(have.get(r, ([], []))))
            for r, rows in want.items()
        }
        for op in plan.ops:
            if op.param is not param or plan.params.index(op.param) != index:
                continue
            n = op.stop - op.start
            dims = list(_dim0(param, op.rows[:2] if op.rows is not None else None))
            tops = op.rows[2:] if op.rows is not None else (0, 0)
            for (d0, g0), at, top in (
                (have[op.src], op.src_start, tops[0]),
                (want[op.dst], op.dst_start, tops[1]),
            ):
                assert g0[at : at + n] == list(range(op.start, op.stop))
                assert d0[top : top + len(dims)] == dims
            assert op.nbytes == n * len(dims) * _cell_bytes(param)
            counts[op.dst].update((d, g) for d in dims for g in range(op.start, op.stop))
        for r, rows in want.items():
            assert counts[r] == Counter(_cells(rows)), (param.name, r)


@settings(max_examples=30)
@given(cases())
def test_bytes_equal_destination_shards_less_what_is_held(
    case: Case,
) -> None:
    """The plan moves exactly the destination shards' bytes that their ranks do not hold."""
    src, dst, params, layers, rank_map = case
    plan = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    expected = 0
    for param in params:
        have = _local_rows(src, param, layers)
        for r, rows in _local_rows(dst, param, layers).items():
            held = _cells(have.get(r, ([], [])))
            expected += len(_cells(rows) - held) * _cell_bytes(param)
    assert plan.stats["bytes_total"] == expected == sum(op.nbytes for op in plan.ops)


@settings(max_examples=20)
@given(cases())
def test_the_plan_is_deterministic(case: Case) -> None:
    """Planning twice gives the same operations in the same order."""
    src, dst, params, layers, rank_map = case
    first = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    again = transfer(src, dst, params, num_layers=layers, allocation=rank_map)
    assert first.rows == again.rows, "the plan changed between two calls"
    assert first == again


@settings(max_examples=30)
@given(cases())
def test_no_rank_sends_less_than_the_bound(
    case: Case,
) -> None:
    """max_send_bytes >= max_send_bound and receivers get exactly what they lack."""
    src, dst, params, layers, rank_map = case
    stats = transfer(src, dst, params, num_layers=layers, allocation=rank_map).stats
    assert stats["max_send_bytes"] >= stats["max_send_bound"]
    assert stats["max_recv_bytes"] == stats["max_recv_bound"]
