"""How long a 16-rank gloo job (tp 2, pp 2, dp 4) takes to train on after each of three failures,
and to grow back to its layout when new processes join.

The scenario is ``tests/torch/recovery_run.py`` (the one ``tests/torch/test_recovery.py``
checks): at steps 2, 4 and 6 torch ranks 10, 5 and 15 SIGKILL themselves; the survivors' next
collective raises (a closed connection at once, or the groups' ``timeout``), they run
``recovery.agree_lost(groups, ...)`` (which waits its ``deadline`` for ranks that never
announce), ``topology.reshape`` (drop the dead rank's replica: dp 4 -> 3 -> 2 -> 1) and
``recovery.apply`` (tp and pp communicators kept, dp ones made among survivors), and redo the
step. Times are rank 0's wall clock (one host):

- kill -> failed: until rank 0's collective raised (detection; at most ``timeout``);
- failed -> agreed: ``agree_lost`` (rank 0 is the lowest survivor and waits ``deadline``);
- agreed -> first step: ``reshape`` + ``apply`` + the redone step;
- kill -> first step: the total, at the first, second and third failure (the goal: within
  two step times plus ``timeout`` and ``deadline``);
- rejoin -> grown / first step: a second scenario (``tests/torch/grow_run.py``): after one kill
  (dp 4 -> 3) and two steps, 4 new processes start and every process calls
  ``recovery.grow`` back to dp 4; from the joining processes' start (spawned, as a returning
  host starts them) to ``grow`` returning, and to the first step of the original layout done
  (the last stage's first rank's clock);
- baseline: a restart of the same job (spawn, import torch, init, ``ProcessGroups.create``),
  measured in the same run from spawning to rank 0's groups; the ratio is the first
  failure's total / restart.
  Ranks start as a relaunch starts them, fresh interpreters (``spawn``), not forked from the
  test suite's preloaded server (``--start forkserver``, which hides the imports a restart pays).

Medians over ``--repeat`` runs. Prints a table and writes ``benchmarks/results/
bench_recovery.json``.

Run: ``python benchmarks/bench_recovery.py`` (``--quick``: one run; ``--timeout``,
``--deadline`` in seconds, default the test's).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
import torch.multiprocessing as mp
from _timing import write_result
from tests.torch import grow_run, recovery_run
from tests.torch import world as test_world
from tests.torch.world import run_world

COLUMNS = (
    ("kill -> failed", "killed 1", "failed 1"),
    ("failed -> agreed", "failed 1", "agreed 1"),
    ("agreed -> first step", "agreed 1", "first step 1"),
    ("kill -> first step", "killed 1", "first step 1"),
    ("2nd kill -> first step", "killed 2", "first step 2"),
    ("3rd kill -> first step", "killed 3", "first step 3"),
    ("restart (baseline)", "spawned", "created"),
)
GROWTH = (
    ("rejoin -> grown", "spawned", "grown"),
    ("rejoin -> first step", "spawned", "first step"),
)


def once(timeout: float, deadline: float) -> dict[str, float]:
    """One run of the scenario: each phase's seconds."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "times.json")
        spawned = time.time()
        run_world(
            16,
            recovery_run.run,
            out,
            timeout,
            deadline,
            killed=recovery_run.VICTIMS,
            store="tcp",
        )
        times = {**json.loads(Path(out).read_text()), "spawned": spawned}
    phases = {name: times[end] - times[start] for name, start, end in COLUMNS}
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "grow.json")
        run_world(
            16,
            grow_run.run,
            out,
            timeout,
            deadline,
            killed=(grow_run.VICTIM,),
            store="agent",
            joining=grow_run.JOINING,
            join=grow_run.join,
        )
        times = json.loads(Path(out).read_text())
    return {**phases, **{name: times[end] - times[start] for name, start, end in GROWTH}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run")
    parser.add_argument("--repeat", type=int, default=3, help="runs (median)")
    parser.add_argument("--timeout", type=float, default=recovery_run.TIMEOUT)
    parser.add_argument("--deadline", type=float, default=recovery_run.DEADLINE)
    parser.add_argument("--out", default="benchmarks/results/bench_recovery.json")
    parser.add_argument("--start", choices=("spawn", "forkserver"), default="spawn")
    args = parser.parse_args()
    if args.start == "spawn":
        test_world.context = lambda: mp.get_context("spawn")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # store waits that time out warn
    runs = [once(args.timeout, args.deadline) for _ in range(1 if args.quick else args.repeat)]
    medians = {name: statistics.median(r[name] for r in runs) for name, _, _ in COLUMNS + GROWTH}
    ratio = medians["kill -> first step"] / medians["restart (baseline)"]
    print(
        f"16 gloo ranks (tp 2, pp 2, dp 4), ranks {recovery_run.VICTIMS} killed; group timeout "
        f"{args.timeout} s, agree_lost deadline {args.deadline} s; median of {len(runs)} runs"
    )
    for name, _, _ in COLUMNS + GROWTH:
        print(f"  {name:<22} {medians[name]:7.2f} s")
    print(f"  recovery / restart     {ratio:7.2f}x")
    write_result(
        args.out,
        {
            "world": 16,
            "layout": "tp 2, pp 2, dp 4 -> 3 -> 2 -> 1; grown: dp 4 -> 3 -> 4",
            "victims": list(recovery_run.VICTIMS),
            "start": args.start,
            "timeout_s": args.timeout,
            "deadline_s": args.deadline,
            "runs": runs,
            "median_s": medians,
            "recovery_over_restart": ratio,
        },
    )


if __name__ == "__main__":
    main()
