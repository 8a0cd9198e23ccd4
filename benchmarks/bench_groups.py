"""How much it costs one rank to create a layout's torch process groups, per strategy.

Under torch's ``fake`` backend (one simulated rank per world size, no data moves) it measures,
for W = 2^12 ... 2^20 and two layouts (dense tp8 pp4, MoE tp2 pp4 ep8 etp1):

- ``local``: ``ProcessGroups.create(strategy="local")``: members-only ``new_group`` calls;
- ``all``: ``ProcessGroups.create(strategy="all")``: every distinct group, every rank;
- ``naive``: a straightforward adapter: every rank calls ``new_group`` for every group of every
  kind, singletons included, without deduplication (what a first version would do);
- ``megatron``: Megatron-core's ``initialize_model_parallel`` (if installed;
  ``create_gloo_process_groups=False``, since gloo groups cannot be made under the fake backend).

``split`` needs NCCL with a bound device and is reported as unavailable on CPU.

Per row: ``new_group``/``split_group`` calls by the rank, the median seconds of the runs, peak
Python memory of one run (tracemalloc, measured in a separate run), and the communicators the
rank holds (torch groups it is a member of, after asking for every kind). A configuration is not run
at a W where its time, extrapolated linearly from the previous W, would exceed ``--cap`` seconds
(reported as ``capped``).
Prints a table (rich if installed) and writes ``benchmarks/results/bench_groups.json``.

Run: ``python benchmarks/bench_groups.py`` (``--quick``: W = 2^12 and 2^14, fewer repeats).
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch.distributed as dist
from _fake_world import counting, fake_world
from _timing import write_result

from topology import Topology
from topology_torch import ProcessGroups

LAYOUTS: dict[str, dict[str, Any]] = {
    "tp8 pp4": dict(tp=8, pp=4),
    "tp2 pp4 ep8 etp1": dict(tp=2, pp=4, ep=8, etp=1),
}
MEGATRON_ARGS = {
    "tp8 pp4": dict(tensor_model_parallel_size=8, pipeline_model_parallel_size=4),
    "tp2 pp4 ep8 etp1": dict(
        tensor_model_parallel_size=2,
        pipeline_model_parallel_size=4,
        expert_model_parallel_size=8,
        expert_tensor_parallel_size=1,
    ),
}
RANK = 0  # the simulated rank: first stage, so it also holds the embedding groups


def _held() -> int:
    """Torch groups this rank is a member of, besides the default group."""
    return len(dist.distributed_c10d._world.pg_map) - 1


# -- the four contenders: each creates, reports communicators held, and cleans up ----------------


def run_ours(strategy: str, layout: str, world: int) -> int:
    groups = ProcessGroups.create(Topology(world, **LAYOUTS[layout]), strategy=strategy)
    for kind in groups.kinds:
        if groups.has_group(kind):
            groups.group(kind)
    held = groups.communicators
    groups.destroy()
    return held


def run_naive(layout: str, world: int) -> int:
    topo = Topology(world, **LAYOUTS[layout])
    made = []
    for kind in topo.kinds:
        for ranks in topo.groups(kind):
            group = dist.new_group(list(ranks))
            if RANK in ranks:
                made.append(group)
    held = _held()
    for group in made:
        dist.destroy_process_group(group)
    stray: Any = dist.GroupMember.NON_GROUP_MEMBER  # torch files non-members' results here
    dist.distributed_c10d._world.pg_group_ranks.pop(stray, None)
    return held


def run_megatron(layout: str, world: int) -> int:
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(
        **MEGATRON_ARGS[layout], create_gloo_process_groups=False
    )
    held = _held()
    parallel_state.destroy_model_parallel()  # forgets its groups; the world's destroy frees them
    return held


def measure(fn: Callable[[], int], world: int, repeat: int, cap: float) -> dict[str, Any]:
    """Median seconds of up to ``repeat`` runs (one if a run takes over cap / 3), calls and
    communicators of the last run, and the tracemalloc peak of one more run."""
    times: list[float] = []
    calls = held = 0
    while len(times) < repeat and (not times or times[0] <= cap / 3):
        with fake_world(world, RANK), counting() as counted:
            start = time.perf_counter()
            held = fn()
            times.append(time.perf_counter() - start)
            calls = len(counted)
    with fake_world(world, RANK):
        tracemalloc.start()
        fn()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return {
        "calls": calls,
        "seconds": statistics.median(times),
        "runs": len(times),
        "peak_mib": peak / 2**20,
        "communicators": held,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="W = 2^12 and 2^14 only")
    parser.add_argument("--cap", type=float, default=30.0, help="seconds; stop growing W above")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results/bench_groups.json"))
    args = parser.parse_args()
    exponents = [12, 14] if args.quick else [12, 14, 16, 18, 20]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import megatron.core.parallel_state  # noqa: F401
        has_megatron = True
    except ImportError:
        has_megatron = False

    contenders: dict[str, Callable[[str, int], int]] = {
        "local": lambda layout, w: run_ours("local", layout, w),
        "all": lambda layout, w: run_ours("all", layout, w),
        "naive": run_naive,
    }
    if has_megatron:
        contenders["megatron"] = run_megatron
    rows: list[dict[str, Any]] = []
    previous = 1
    for layout in LAYOUTS:
        for name, fn in contenders.items():
            last = 0.0
            for exponent in exponents:
                world = 2**exponent
                # skip when the time extrapolated linearly from the previous W exceeds the cap
                if last and last * world / previous > args.cap:
                    rows.append(
                        {"layout": layout, "strategy": name, "world_size": world, "capped": True}
                    )
                    continue
                repeat = 2 if args.quick else 5
                result = measure(lambda: fn(layout, world), world, repeat, args.cap)  # noqa: B023
                rows.append(
                    {
                        "layout": layout,
                        "strategy": name,
                        "world_size": world,
                        "capped": False,
                        **result,
                    }
                )
                last, previous = result["seconds"], world
        rows.append(
            {
                "layout": layout,
                "strategy": "split",
                "world_size": None,
                "capped": False,
                "note": "needs NCCL + bound device",
            }
        )
    meta = {
        "backend": "fake",
        "rank": RANK,
        "cap_seconds": args.cap,
        "megatron": has_megatron,
        "notes": "calls = new_group/split_group calls by one rank; communicators = torch groups "
        "the rank holds; megatron without gloo groups; seconds are medians of 'runs'",
    }
    write_result(args.out, {"meta": meta, "rows": rows})
    _print(rows)


def _print(rows: list[dict[str, Any]]) -> None:
    header = ["layout", "strategy", "W", "calls", "seconds", "peak MiB", "communicators"]
    lines = []
    for row in rows:
        if row.get("world_size") is None:
            lines.append([row["layout"], row["strategy"], "-", "-", "-", "-", row["note"]])
        elif row["capped"]:
            lines.append(
                [
                    row["layout"],
                    row["strategy"],
                    f"2^{row['world_size'].bit_length() - 1}",
                    "capped",
                    "",
                    "",
                    "",
                ]
            )
        else:
            lines.append(
                [
                    row["layout"],
                    row["strategy"],
                    f"2^{row['world_size'].bit_length() - 1}",
                    str(row["calls"]),
                    f"{row['seconds']:.4f}",
                    f"{row['peak_mib']:.2f}",
                    str(row["communicators"]),
                ]
            )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(header)]
        print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
        for line in lines:
            print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)))
        return
    table = Table(title="process-group creation, one rank, fake backend")
    for name in header:
        table.add_column(name, justify="left" if name in ("layout", "strategy") else "right")
    for line in lines:
        table.add_row(*line)
    Console().print(table)


if __name__ == "__main__":
    main()
