"""One rank's transfer plan, and every rank's plan written to files, at 16,384 -> 16,384 ranks
(issue 32, item 3).

Model: the ``deepseek-v3`` preset (30,428 weights, 61 layers). Layouts: training ``tp8 x pp16 x
ep64`` (etp 1, dp 128, NeMo-RL's pp 16 split: 3 layers on the first stage, 2 on the last) ->
generation ``tp8 x ep64`` (etp 1, pp 1, dp 2,048) on the next 16,384 ranks (apart: the
generation engine on its own GPUs), 32,768 ranks in all. ``--world N`` measures N -> N instead.

Rows, each in a fresh process (its CPU seconds, user + system, and its peak resident memory,
from ``os.wait4``'s rusage of that child, and its wall time; for the core rows also ``call s``,
the call alone, timed inside the child, without the interpreter's start and imports):

- ``whole plan``: ``topology.transfer`` (the plan and its statistics): the baseline;
- ``one rank, sender`` (rank 0) and ``one rank, receiver`` (the first generation rank):
  ``topology.transfer_rank``, without the whole plan (the classes of every weight, the pieces
  of those the rank depends on, one pass in plan order through them);
- ``into vllm``: the same two ranks with the generation side vLLM's layout
  (``engine=vllm,tp=8,dp=world/8,ep=world``, ``topology.refit_rank``; the call includes the
  Megatron weight list, made once per model and cached, so these children make none before
  the call, the Hugging Face tensors of the weights placed (one per class; never the whole
  list) and the engine's placements);
- ``--write-plans``: ``topology transfer ... --write-plans DIR`` (the plan once, then one
  JSON-lines file per rank, streamed, and ``manifest.json``), with the lines and bytes written;
  its manifest gives the most bytes a rank sends over that statistic's lower bound.

Goals (the issue's): one rank under 1 s and 200 MB; ``--write-plans`` within 120 s and 500 MB;
max send within 1.05x of its bound. Medians of ``--repeat`` runs (``--write-plans`` once unless
``--repeat-write``). A benchmark, not a test: the numbers depend on the machine and its load.

Run: ``python benchmarks/bench_transfer_rank.py [--world N] [--repeat K] [--out FILE]``; prints a
table and writes ``benchmarks/results/transfer_rank.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import write_result

SRC = "tp=8,pp=16,ep=64,etp=1,first_stage_layers=3,last_stage_layers=2"
DST = "tp=8,ep=64,etp=1"
RESULTS = Path(__file__).resolve().parent / "results"
CONFIG = Path(__file__).resolve().parents[1] / "src/topology/_architecture/configs/deepseek-v3.json"
"""DeepSeek-V3's shipped ``config.json`` (the model is read from it, as ``--model PATH``)."""

CORE = """
import json, sys, time
from topology import (PipelineSplit, Topology, read_model_config, refit_rank, transfer,
                      transfer_rank, weights)
world, what = int(sys.argv[1]), sys.argv[2]
ENGINE = f"engine=vllm,tp=8,dp={world // 8},ep={world}"
model = read_model_config(sys.argv[3])
params = [] if what.startswith("engine") else weights(model)  # the engine rows list their own
src = Topology(world, tp=8, pp=16, ep=64, etp=1)
dst = Topology(world, tp=8, ep=64, etp=1, rank_offset=world)
split = PipelineSplit(first_stage_layers=3, last_stage_layers=2)
start = time.perf_counter()
if what == "whole":
    plan = transfer(src, dst, params, src_pipeline_split=split)
    found = {"ops": len(plan), "max_send_bytes": plan.stats["max_send_bytes"],
             "max_send_bound": plan.stats["max_send_bound"]}
elif what.startswith("engine"):
    mine = refit_rank(src, ENGINE, model, int(what[6:]), rank_offset=world,
                      src_pipeline_split=split)
    found = {"ops": len(mine.ops), "sends": len(mine.sends), "recvs": len(mine.recvs)}
else:
    mine = transfer_rank(src, dst, params, int(what), src_pipeline_split=split)
    found = {"ops": len(mine.ops), "sends": len(mine.sends), "recvs": len(mine.recvs)}
found["seconds"] = time.perf_counter() - start
print(json.dumps(found))
"""
"""The child of the core rows: ``python -c CORE WORLD whole|RANK|engineRANK CONFIG``."""


def child_run(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` as a child and return its wall, CPU seconds and peak RSS from rusage."""
    start = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = child.stdout.read() if child.stdout else b""
    err = child.stderr.read() if child.stderr else b""
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if status:
        raise SystemExit(f"{' '.join(argv[-4:])} failed: {err.decode()[-400:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
        "stdout": out.decode(),
    }


def median_run(argv: list[str], repeat: int) -> dict[str, Any]:
    """:func:`child_run` ``repeat`` times: the median of each number, the last stdout."""
    runs = [child_run(argv) for _ in range(repeat)]
    row: dict[str, Any] = {
        key: statistics.median(r[key] for r in runs) for key in ("wall_s", "cpu_s", "peak_mb")
    }
    row["repeat"] = repeat
    row["stdout"] = runs[-1]["stdout"]
    return row


def core_row(name: str, world: int, what: str, repeat: int) -> dict[str, Any]:
    row = median_run([sys.executable, "-c", CORE, str(world), what, str(CONFIG)], repeat)
    found = json.loads(row.pop("stdout"))
    row["name"], row["in_process_s"] = name, found.pop("seconds")
    row.update(found)
    return row


def write_row(world: int, repeat: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        argv = [
            sys.executable,
            "-m",
            "topology",
            "transfer",
            "--from",
            SRC,
            "--to",
            DST,
            "-w",
            str(world),
            "--to-offset",
            str(world),
            "--model",
            "deepseek-v3",
            "--write-plans",
            folder,
        ]
        row = median_run(argv, repeat)
        row.pop("stdout")
        manifest = json.loads((Path(folder) / "manifest.json").read_text())
        files = manifest["files"]
        row["name"] = "--write-plans"
        row["files"] = len(files)
        row["lines"] = sum(f["sends"] + f["recvs"] for f in files)
        row["bytes_written"] = sum(os.path.getsize(Path(folder) / f["path"]) for f in files)
        stats = manifest["stats"]
        row["ops"] = stats["ops"]
        row["max_send_bytes"], row["max_send_bound"] = (
            stats["max_send_bytes"],
            stats["max_send_bound"],
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=16384, help="ranks of each layout")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each core row")
    parser.add_argument("--repeat-write", type=int, default=1, help="runs of --write-plans")
    parser.add_argument("--skip-write", action="store_true", help="no --write-plans row")
    parser.add_argument("--out", default=str(RESULTS / "transfer_rank.json"))
    args = parser.parse_args()
    world = args.world
    rows = [
        core_row("whole plan (baseline)", world, "whole", args.repeat),
        core_row("one rank, sender (0)", world, "0", args.repeat),
        core_row(f"one rank, receiver ({world})", world, str(world), args.repeat),
        core_row("into vllm: sender (0)", world, "engine0", args.repeat),
        core_row(f"into vllm: receiver ({world})", world, f"engine{world}", args.repeat),
    ]
    if not args.skip_write:
        rows.append(write_row(world, args.repeat_write))
    print(f"deepseek-v3, {SRC} -> {DST}, {world:,} -> {world:,} ranks (apart)")
    print(f"{'row':<28} {'wall s':>8} {'CPU s':>8} {'call s':>8} {'peak MB':>8} {'ops':>12}  notes")
    for row in rows:
        notes = ""
        if "sends" in row:
            notes = f"{row['sends']:,} sends, {row['recvs']:,} recvs"
        if "lines" in row:
            gigabytes = row["bytes_written"] / 1e9
            notes = f"{row['files']:,} files, {row['lines']:,} lines, {gigabytes:.2f} GB"
        if "max_send_bound" in row:
            ratio = row["max_send_bytes"] / row["max_send_bound"]
            notes += f"{'; ' if notes else ''}max send {ratio:.4f}x its bound"
        call = f"{row['in_process_s']:.2f}" if "in_process_s" in row else "-"
        print(
            f"{row['name']:<28} {row['wall_s']:>8.2f} {row['cpu_s']:>8.2f} {call:>8} "
            f"{row['peak_mb']:>8.0f} {row['ops']:>12,}  {notes}"
        )
    write_result(
        args.out,
        {"model": "deepseek-v3", "from": SRC, "to": DST, "world": world, "rows": rows},
    )


if __name__ == "__main__":
    main()
