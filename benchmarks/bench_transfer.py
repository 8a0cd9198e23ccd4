"""The transfer plan's balance and rack traffic against the peers' source choices, and its time.

Layouts: NeMo-RL's published refits (Qwen3-4B-like dp8 -> tp8, with the ``llama-7b`` preset in
place of Qwen3-4B; DSV3 pp16 x ep16 -> tp32 x dp8; tp8 x pp8 x ep32 -> tp16 x dp16, with etp 1
on both sides and generation ep = tp, the one NeMo-RL's refit accepts), each for ``llama-70b``
and ``deepseek-v3`` (and ``llama-7b`` for the first), colocated (both layouts on the same
ranks, as NeMo-RL runs them: what a rank holds already moves nothing) and apart (the generation
layout on the next ranks). The ranks run on a ragged NVL72 allocation: racks of 18, 18, 16 and
12 four-GPU trays, repeated. DeepSeek-V3's 61 layers are split as the recipes split them
(:data:`SPLITS`: NeMo-RL's first 3 / last 2 at pp 16, Megatron-Bridge's layout at pp 8).

Source choices compared, on the same pieces (so the bytes moved are equal):

- ``balanced``: :func:`topology.transfer` (balanced round-robin over every holder, preferring the
  receiver's rack);
- ``first``: NeMo-RL's ``nccl_reshard``, the first holder of each slice;
- ``megatron``: megatron-core 0.19's resharding planner: per receiver and weight one
  representative source (the receiver itself when colocated, else the holders' dp groups taken
  round-robin by the receiver's global rank; the first holder when they form one dp group),
  whose tp group sends every slice
  (``tests/transfer_peers.py``; ``tests/torch/test_transfer_megatron.py`` checks it sends every
  element from the rank Megatron's own planner does).

Columns: the most bytes a rank sends over the lower bound (``max_send_bound``, see
``topology._transfer.bounds``), the bytes crossing racks, and the most peers a rank sends to and
receives from (``send/recv``); the last column gives the peer bounds every plan meets.

Timing: the median of ``--repeat`` plans for the first layout of each model, and one
4,096 -> 4,096-rank plan (tp8 x pp8 x dp64 -> tp16 x dp256, colocated) of a 999-weight
Llama-70B-shaped model (166 layers): the plan with its statistics (median of ``--repeat``),
making every operation's row, one rank's ``sends``, ``recvs`` and ``held`` (the first call
builds the index), and, unless ``--skip-reference``, the same plan by the reference planner (the
planner before classes and patterns, kept in ``tests/test_transfer_reference.py``) in the same
run, with the ratio.

Run: ``python benchmarks/bench_transfer.py [--out benchmarks/results/transfer.json]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from _timing import median_seconds, write_result
from tests.transfer_peers import POLICIES as PEER_POLICIES
from tests.transfer_peers import plan_rows

from topology import (
    Allocation,
    Architecture,
    Host,
    Param,
    PipelineSplit,
    Tier,
    Topology,
    transfer,
    weights,
)

POLICIES = ("balanced", *PEER_POLICIES)

LAYOUTS = [
    (
        "dp8 -> tp8",
        Topology(8),
        {"tp": 8, "ep": 8, "etp": 1},
        ("llama-7b", "llama-70b", "deepseek-v3"),
    ),
    (
        "pp16 x ep16 -> tp32 x dp8",
        Topology(256, pp=16, ep=16, etp=1),
        {"tp": 32, "ep": 32, "etp": 1},
        ("llama-70b", "deepseek-v3"),
    ),
    (
        "tp8 x pp8 x ep32 -> tp16 x dp16",
        Topology(256, tp=8, pp=8, ep=32, etp=1),
        {"tp": 16, "ep": 16, "etp": 1},
        ("llama-70b", "deepseek-v3"),
    ),
]
SPLITS = {
    ("pp16 x ep16 -> tp32 x dp8", "deepseek-v3"): PipelineSplit(
        first_stage_layers=3, last_stage_layers=2
    ),
    ("tp8 x pp8 x ep32 -> tp16 x dp16", "deepseek-v3"): PipelineSplit(layout="Et*8|(t*8|)*6,t*5mL"),
}
"""The training side's pipeline split where 61 layers do not divide: NeMo-RL's DeepSeek-V3 pp 16
recipe (first 3, last 2) and Megatron-Bridge's pp 8 layout (8 layers per stage, 5 on the last)."""


def ragged_nvl72(ranks: int) -> Allocation:
    """Racks of 18, 18, 16, 12 four-GPU trays, repeated, until ``ranks`` GPUs."""
    hosts, trays, rack = [], (18, 18, 16, 12), 0
    while sum(h.gpus for h in hosts) < ranks:
        for _ in range(trays[rack % len(trays)]):
            hosts.append(Host(f"n{len(hosts)}", 4, (f"rack{rack}",)))
        rack += 1
    return Allocation(hosts, [Tier("rack", nvlink=True)])


def plan_stats(
    src: Topology,
    dst: Topology,
    params: list[Param],
    policy: str,
    alloc: Allocation | None,
    split: PipelineSplit | None = None,
) -> dict[str, Any]:
    """The statistics of one plan under ``policy`` (``balanced`` is :func:`topology.transfer`)."""
    world = max(src.world_size + src.rank_offset, dst.world_size + dst.rank_offset)
    rank_map = None if alloc is None else alloc.rank_map(world)
    if policy == "balanced":
        return transfer(src, dst, params, allocation=rank_map, src_pipeline_split=split).stats
    return plan_rows(src, dst, params, policy, rank_map, splits=(split, None)).stats()


def compare(repeat: int) -> list[dict[str, Any]]:
    rows = []
    for name, src, dst_fields, models in LAYOUTS:
        for model in models:
            params = weights(model)
            for mode, offset in (("colocated", 0), ("apart", src.world_size)):
                dst = Topology(src.world_size, rank_offset=offset, **dst_fields)
                alloc = ragged_nvl72(src.world_size + offset)
                split = SPLITS.get((name, model))
                row: dict[str, Any] = {"layout": name, "model": model, "mode": mode}
                row["src_pipeline_split"] = None if split is None else str(split)
                for policy in POLICIES:
                    stats = plan_stats(src, dst, params, policy, alloc, split)
                    bound = stats["max_send_bound"]
                    row[policy] = {
                        "max_send_bytes": stats["max_send_bytes"],
                        "max_send_bound": bound,
                        "ratio": stats["max_send_bytes"] / bound if bound else 1.0,
                        "cross_rack_bytes": stats["bytes_by_tier"]["world"],
                        "bytes_total": stats["bytes_total"],
                        "max_send_peers": stats["max_send_peers"],
                        "max_recv_peers": stats["max_recv_peers"],
                    }
                row["peer_bounds"] = [stats["max_send_peers_bound"], stats["max_recv_peers_bound"]]
                if mode == "apart" and name == LAYOUTS[0][0]:
                    row["plan_seconds"] = median_seconds(
                        lambda s=src, d=dst, w=params, a=alloc: plan_stats(s, d, w, "balanced", a),
                        repeat,
                    )
                rows.append(row)
                print(_line(row), flush=True)
    return rows


def _line(row: dict[str, Any]) -> str:
    cells = " ".join(
        (f"{row[p]['ratio']:>8.3f}x" if row[p]["max_send_bound"] else f"{'-':>9}")
        + f" {row[p]['cross_rack_bytes'] / 1e9:>9.1f}"
        + f" {row[p]['max_send_peers']:>4}/{row[p]['max_recv_peers']:<4}"
        for p in POLICIES
    )
    bounds = "/".join(map(str, row["peer_bounds"]))
    return f"{row['layout']:<32} {row['model']:<12} {row['mode']:<9} {cells} {bounds:>7}"


def big_plan_seconds(repeat: int, reference: bool) -> dict[str, Any]:
    """One plan of 999 weights, 4,096 -> 4,096 ranks (colocated), its rows and queries."""
    params = weights(Architecture(166, 8192, 32000, 28672, 64, 8, 128))
    src, dst = Topology(4096, tp=8, pp=8), Topology(4096, tp=16)
    found: dict[str, Any] = {"weights": len(params), "ranks": 4096}
    found["seconds"] = median_seconds(lambda: transfer(src, dst, params), repeat)
    plan = transfer(src, dst, params)
    found["ops"] = len(plan)
    start = time.perf_counter()
    rows = len(plan.rows)
    found["rows_seconds"] = time.perf_counter() - start
    assert rows == found["ops"]
    for name, rank in (("first_query_seconds", 5), ("query_seconds", 6)):
        start = time.perf_counter()
        found[f"rank_{rank}_ops"] = len(plan.sends(rank)) + len(plan.recvs(rank))
        plan.held(rank)
        found[name] = time.perf_counter() - start
    if reference:
        from tests.test_transfer_reference import ReferencePlanner

        start = time.perf_counter()
        planner = ReferencePlanner(src, dst, None)
        for index, param in enumerate(params):
            planner.weight(index, param, 166)
        stats = planner.stats()
        found["reference_seconds"] = time.perf_counter() - start
        found["speedup"] = found["reference_seconds"] / found["seconds"]
        assert stats["ops"] == found["ops"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/transfer.json")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-big", action="store_true", help="skip the 4,096-rank plan")
    parser.add_argument(
        "--skip-reference", action="store_true", help="skip the reference planner's time"
    )
    args = parser.parse_args()
    header = " ".join(f"{p:>29}" for p in POLICIES)
    print(f"{'':<32} {'':<12} {'':<9} " + header + " peer bounds")
    cell = f"{'max/bound  xrack GB  peers':>29}"
    print(f"{'layout':<32} {'model':<12} {'mode':<9} " + " ".join([cell] * 3) + "   s/r")
    result: dict[str, Any] = {"rows": compare(args.repeat)}
    if not args.skip_big:
        result["big"] = big = big_plan_seconds(args.repeat, not args.skip_reference)
        print(
            f"plan {big['weights']} weights, {big['ranks']} -> {big['ranks']} ranks: "
            f"{big['ops']:,} ops in {big['seconds']:.3f} s (median of {args.repeat}); every row "
            f"made in {big['rows_seconds']:.2f} s; one rank's sends/recvs/held "
            f"({big['rank_5_ops']:,} ops) in {big['first_query_seconds']:.3f} s, the next rank's "
            f"in {big['query_seconds']:.3f} s"
        )
        if "reference_seconds" in big:
            print(
                f"reference planner: {big['reference_seconds']:.1f} s "
                f"({big['speedup']:.0f}x the time of this one, same run)"
            )
    write_result(args.out, result)


if __name__ == "__main__":
    main()
