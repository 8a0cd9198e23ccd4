"""The transfer plan against megatron-core 0.19.2's own resharding planner.

Megatron's planner all-gathers every weight's ``ParameterMetadata`` and replays a deterministic
schedule (``_iter_global_transfer_ops``). Here the metadata is what our layouts say each rank
holds (local shape, tp / etp, dp and ep groups, Megatron's ``partition_stride`` for equal fused
parts and ``partition_sizes`` for unequal ones), fed to Megatron's schedule in one oracle
subprocess (``resharding_oracle.py``), without a process group. Laws, on random layout pairs
(tp, cp, pp, vpp, ep, etp, dp, any order; colocated, apart and overlapping rank offsets):

- Megatron's operations and ours (with what a rank already holds) write the same elements of the
  same destination shards, each once, and every Megatron source holds the slice it sends, per
  our :func:`param_placement`;
- the bench's ``megatron`` baseline (``tests/transfer_peers.py``) picks Megatron's sender for every
  element (a rank that holds an element already is its own sender in Megatron).

Then a table: the GTP blocks of :func:`param_placement` are the rows GTP's own
``gtp_remat_shard_dim0`` gives each GTP rank (its padding included). Megatron's resharding
planner knows no GTP (a GTP shard fails its tp size check), so GTP layouts stay out of the laws.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.transfer_peers import plan_rows
from topology import Topology
from topology._transfer.param_placement import param_placement
from topology._transfer.params import Param
from topology._transfer.plan import transfer
from topology.strategies import topologies

from .oracle import LineOracle, oracle_0_19

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parent / "resharding_oracle.py"
LAYOUTS = topologies(max_world_size=16, max_size=4, max_vpp=2, max_hcp_levels=0)
Case = tuple[Topology, Topology, list[Param], int]
Elements = dict[tuple[int, int, int], list[int]]
"""(destination rank, weight index, global row of the cut dim) -> the ranks sending it."""


@pytest.fixture(scope="module")
def oracle() -> Iterator[LineOracle]:
    """Megatron's resharding planner in a subprocess (skips without it, fails under CI)."""
    process = LineOracle(SCRIPT, oracle_0_19(), "resharding oracle")
    yield process
    process.close()


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Two layouts (colocated, apart or as drawn), and weights of every sharding both can cut."""
    src, dst = draw(LAYOUTS), draw(LAYOUTS)
    mode = draw(st.sampled_from(("colocated", "apart", "drawn")))
    if mode != "drawn":
        offset = src.rank_offset + (src.world_size if mode == "apart" else 0)
        dst = attrs.evolve(dst, rank_offset=offset)
    unit = math.lcm(src.tp, src.etp, dst.tp, dst.etp)
    experts = src.ep * dst.ep
    chunks = max(src.pp * (src.vpp or 1), dst.pp * (dst.vpp or 1))
    layers = chunks + draw(st.integers(0, 1))
    k = draw(st.integers(1, 2))
    last = layers - 1
    params = [
        Param("embed", (unit * k, 3), sharding="vocab", position=draw(st.sampled_from(POS))),
        Param("qkv", (unit * 3, 4), sharding="column", parts=(unit * 2, unit), layer=0),
        Param("fc1", (unit * 2 * k, 3), sharding="column", parts=(unit * k,) * 2, layer=last),
        Param("proj", (5, unit * k), sharding="row", layer=draw(st.integers(0, last))),
        Param("norm", (7,), layer=draw(st.integers(0, last))),
        Param("final", (6,), position="last"),
        Param("out", (unit, 2), sharding="vocab", position="last", itemsize=4),
    ]
    layer = draw(st.integers(0, last))
    for e in sorted(set(draw(st.lists(st.integers(0, experts - 1), min_size=1, max_size=2)))):
        fused = {"parts": (unit, unit), "layer": layer, "expert": e, "num_experts": experts}
        params.append(Param(f"e{e}.fc1", (unit * 2, 3), sharding="expert-column", **fused))
        params.append(
            Param(
                f"e{e}.fc2",
                (3, unit),
                sharding="expert-row",
                layer=layer,
                expert=e,
                num_experts=experts,
            )
        )
    return src, dst, params, layers


POS = ("first", "last", "tied")


def _rows(topo: Topology, param: Param, layers: int) -> dict[int, list[int]]:
    """Each holder's local rows along the cut dim, as global rows."""
    rows: dict[int, list[int]] = {}
    for shard in param_placement(topo, param, num_layers=layers).shards:
        local = [g for lo, hi in shard.ranges for g in range(lo, hi)]
        for r in shard.ranks:
            rows[r] = local
    return rows


def _metadata(topo: Topology, params: list[Param], layers: int) -> list[dict[str, Any]]:
    """``ParameterMetadata`` fields of every (rank, weight) ``topo`` holds, in rank order, as
    Megatron's ``extract_param_metadata`` would give them."""
    found = []
    for param in params:
        placement = param_placement(topo, param, num_layers=layers)
        row, split = param.row, placement.split
        expert = row.grid == "expert"
        parts = param.part_sizes
        for shard in placement.shards:
            shape = list(param.shape)
            shape[param.cut_dim] = sum(hi - lo for lo, hi in shard.ranges)
            for rank in shard.ranks:
                found.append(
                    {
                        "name": param.name,
                        "shape": shape,
                        "element_size": param.itemsize,
                        "is_tp": row.dim is not None,
                        "partition_dim": param.cut_dim,
                        "partition_stride": len(parts) if len(set(parts)) == 1 else 1,
                        "partition_sizes": (
                            [n // split for n in parts] if len(set(parts)) > 1 else None
                        ),
                        "is_ep": expert,
                        "num_experts": param.num_experts,
                        "owner_rank": rank,
                        "tensor_parallel_group_ranks": list(
                            topo.group_of(rank, "etp" if expert else "tp")
                        ),
                        "expert_parallel_group_ranks": (
                            list(topo.group_of(rank, "ep")) if expert else None
                        ),
                        "data_parallel_group_ranks": list(topo.group_of(rank, "dp")),
                        "pipeline_parallel_group_ranks": list(topo.group_of(rank, "pp")),
                        "global_expert_index": param.expert,
                    }
                )
    found.sort(key=lambda fields: fields["owner_rank"])
    return found


def _megatron(oracle: LineOracle, case: Case) -> Elements:
    """Megatron's elements and senders; asserts each source holds the rows it sends."""
    src, dst, params, layers = case
    answer = oracle.ask(
        {"src": _metadata(src, params, layers), "dst": _metadata(dst, params, layers)}
    )
    assert "ops" in answer, f"Megatron refused {src} -> {dst}: {answer.get('error')}"
    index = {p.name: i for i, p in enumerate(params)}
    have = [_rows(src, p, layers) for p in params]
    want = [_rows(dst, p, layers) for p in params]
    found: Elements = defaultdict(list)
    for to, sender, name, _, src_lo, src_hi, dst_lo, dst_hi in answer["ops"]:
        i = index[name]
        assert sender in have[i], f"Megatron reads {name} from rank {sender}, which lacks it"
        sent = have[i][sender][src_lo:src_hi]
        put = want[i][to][dst_lo:dst_hi]
        assert sent == put, (name, sender, to, sent, put)
        for g in put:
            found[(to, i, g)].append(sender)
    return found


def _ours(case: Case) -> Elements:
    src, dst, params, layers = case
    plan = transfer(src, dst, params, num_layers=layers)
    found: Elements = defaultdict(list)
    for op in plan.ops:
        for g in range(op.start, op.stop):
            found[(op.dst, plan.params.index(op.param), g)].append(op.src)
    for r in range(dst.rank_offset, dst.rank_offset + dst.world_size):
        for op in plan.held(r):
            for g in range(op.start, op.stop):
                found[(r, plan.params.index(op.param), g)].append(r)
    return found


@settings(max_examples=15, deadline=None)
@given(cases())
def test_megatron_writes_the_same_elements_from_their_holders(
    oracle: LineOracle, case: Case
) -> None:
    """Megatron's ops and ours (with held rows) fill the same destination elements, once each."""
    theirs, ours = _megatron(oracle, case), _ours(case)
    assert all(len(senders) == 1 for senders in theirs.values())
    assert all(len(senders) == 1 for senders in ours.values())
    assert theirs.keys() == ours.keys()


@settings(max_examples=15, deadline=None)
@given(cases())
def test_the_bench_megatron_baseline_picks_megatrons_senders(
    oracle: LineOracle, case: Case
) -> None:
    """The ``megatron`` peer policy (tests/transfer_peers.py) sends each element from Megatron's
    rank."""
    src, dst, params, layers = case
    theirs = _megatron(oracle, case)
    planner = plan_rows(src, dst, params, "megatron", num_layers=layers)
    mine: dict[tuple[int, int, int], int] = {}
    for sender, to, i, lo, hi, *_ in planner.rows:
        for g in range(lo, hi):
            mine[(to, i, g)] = sender
    for (to, i, g), (sender,) in theirs.items():
        assert mine.get((to, i, g), to) == sender, (params[i].name, to, g, sender)


def test_gtp_blocks_are_megatrons(oracle: LineOracle) -> None:
    """Each GTP rank's rows of a tp shard are those ``gtp_remat_shard_dim0`` sizes and pads, for
    a column-parallel weight (its cut dim) and a row-parallel one (dim 0 of a 2-D block)."""
    asks = [(rows, size) for rows in range(1, 140, 3) for size in (2, 3, 4, 8)]
    answer = oracle.ask({"gtp": asks})
    for (rows, size), (step, pad) in zip(asks, answer["gtp"], strict=True):
        assert step * size == rows + pad
        shards = param_placement(
            Topology(size, gtp=size), Param("w", (rows, 2), sharding="column"), num_layers=1
        ).shards
        expected = [
            ((j * step, min((j + 1) * step, rows)),) if j * step < rows else () for j in range(size)
        ]
        assert [s.ranges for s in shards] == expected, (rows, size)
        # a row-parallel weight: Megatron's _gtp_pre_init cuts its tp shard's dim 0 (all of
        # out_features, out_split_size 1) by the same gtp_remat_shard_dim0
        row = Param("r", (rows, 4), sharding="row")
        blocks = param_placement(Topology(2 * size, tp=2, gtp=size), row, num_layers=1).shards
        assert [(s.rows, s.ranges) for s in blocks[:size]] == [
            ((j * step, min((j + 1) * step, rows)), ((0, 2),)) if j * step < rows else (None, ())
            for j in range(size)
        ], (rows, size)
