"""What a re-layout after one lost node keeps: ``topology.reshape`` against shift-left.

At W = 16,384 (tp 8, pp 8, dp 256, 8 GPUs a node), node 3 lost:

- ``shift-left``: nvidia-resiliency-ext's rank assignment, re-implemented here: the healthy ranks
  keep their order and close the gap (new rank = position among the survivors), on the largest
  multiple of one model replica (tp * pp ranks), blind to the layout;
- ``reshape``: ``topology.reshape`` with no spare (``auto``: drops the lost node's replica);
- ``reshape + spare``: one spare host in the lost host's rack (``policy="spares"``).

Per row, over every kind: communicators reused (an old group, mapped), shrunk (an old group
minus the ranks that leave) and rebuilt (anything else), counted here independently of
``reshape``'s own counts (sets of mapped groups), the active survivors that keep their shard
coordinates (every axis but dp / edp) and those that change pipeline stage. Then the median
time of ``reshape`` at W = 131,072 (same layout; wall and this process's CPU time, which a
shared machine disturbs less), and at 16,384 as the in-run baseline; then the CPU time of each
policy forced (``drop``, ``spares`` with one spare host, ``shrink``) at 131,072. Then on real
hosts (the issue's goal: < 1 s CPU, < 200 MB): ``reshape`` with a lost host given by name on a
16,384-host allocation of 8 GPUs (131,072 ranks; ``auto`` drops, and with one spare host after
the layout's takes it), its ``relaunch`` (the new hostfile, idle hosts, sources by host)
included, median CPU and peak traced memory next to the host-number call above; and the whole
``topology reshape --hosts ... --lost node4`` command in a subprocess (interpreter start and
imports included), its CPU time and peak resident memory.
Prints a table and writes ``benchmarks/results/bench_reshape.json``.

Run: ``python benchmarks/bench_reshape.py`` (``--quick``: 1 timing run, W = 32,768 for the big one).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from _timing import median_seconds, write_result

from topology import Allocation, Host, Tier, Topology, reshape

GPUS = 8
LOST_HOST = 3


def shift_left(topo: Topology, lost: set[int]) -> tuple[Topology, list[int | None]]:
    """Healthy ranks shifted left onto the largest whole number of replicas (layout-blind)."""
    alive = [r for r in range(topo.world_size) if r not in lost]
    replica = topo.tp * topo.pp * topo.cp
    world = len(alive) // replica * replica
    new = Topology.from_dict({**topo.to_dict(), "world_size": world, "dp": None})
    rank_of: list[int | None] = [None] * topo.world_size
    for position, rank in enumerate(alive[:world]):
        rank_of[rank] = position
    return new, rank_of


def count(old: Topology, new: Topology, rank_of: Sequence[int | None]) -> dict[str, Any]:
    """Communicators reused / trimmed / rebuilt over every kind, shards kept, stages moved."""
    totals = {"reuse": 0, "trim": 0, "rebuild": 0}
    kinds: dict[str, dict[str, int]] = {}
    for kind in new.kinds:
        kinds[kind] = {"reuse": 0, "trim": 0, "rebuild": 0}
        whole, part = set(), set()
        for group in old.groups(kind):
            mapped = [rank_of[r] for r in group]
            kept = tuple(m for m in mapped if m is not None)
            (whole if len(kept) == len(mapped) else part).add(kept)
        for group in new.groups(kind):
            key = tuple(group)
            bucket = "reuse" if key in whole else "trim" if key in part else "rebuild"
            totals[bucket] += 1
            kinds[kind][bucket] += 1
    active = keep = moved_stage = 0
    for rank, target in enumerate(rank_of):
        if target is None:
            continue
        active += 1
        a, b = old.dense.coord(rank), new.dense.coord(target)
        keep += all(a[x] == b[x] for x in a if x != "dp")
        moved_stage += a["pp"] != b["pp"]
    return {
        **totals,
        "active": active,
        "keeps_shard": keep,
        "stage_moved": moved_stage,
        "kinds": kinds,
    }


def rows(world: int) -> list[dict[str, Any]]:
    topo = Topology(world, tp=8, pp=8)
    lost = set(range(LOST_HOST * GPUS, (LOST_HOST + 1) * GPUS))
    new, rank_of = shift_left(topo, lost)
    out = [{"method": "shift-left", **count(topo, new, rank_of)}]
    ours = reshape(topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS)
    # 18 hosts a rack (NVL72-like racks of 72 GPUs hold 9; any size works), plus two spare
    # hosts: the first in another rack, the second in the lost host's rack
    hosts = world // GPUS
    racks = [f"rack{h // 18}" for h in range(hosts)] + ["rack-spare", f"rack{LOST_HOST // 18}"]
    allocation = Allocation(
        [Host(f"n{h}", GPUS, (rack,)) for h, rack in enumerate(racks)], (Tier("rack"),)
    )
    spared = reshape(
        topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS, allocation=allocation, policy="spares"
    )
    for name, r in (("reshape", ours), ("reshape + spare", spared)):
        counted = count(topo, r.new, r.mapping)
        assert (counted["reuse"], counted["trim"]) == (r.counts()["reuse"], r.counts()["trim"])
        out.append({"method": name, "policy": r.policy, **counted, "spare": list(r.replaced)})
    return out


def _median_cpu(fn: Callable[[], object], repeat: int) -> float:
    """The median CPU time of ``repeat`` calls (this process; robust to a shared machine)."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def _peak_mb(fn: Callable[[], object]) -> float:
    """The peak memory Python allocates during one call of ``fn`` (tracemalloc), in MB."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def by_name(world: int, repeat: int) -> dict[str, Any]:
    """``reshape`` with a host name on an allocation of ``world / 8`` hosts (and one spare more),
    ``relaunch`` included: median CPU seconds and peak MB, each case."""
    hosts = [Host(f"node{h + 1}", GPUS, (f"rack{h // 18}",)) for h in range(world // GPUS + 1)]
    topo = Topology(world, tp=8, pp=8)
    out: dict[str, Any] = {}
    for case, count in (("no spare", len(hosts) - 1), ("one spare", len(hosts))):
        allocation = Allocation(hosts[:count], (Tier("rack"),))

        def call(allocation: Allocation = allocation) -> object:
            return reshape(
                topo, lost_hosts=[f"node{LOST_HOST + 1}"], allocation=allocation
            ).relaunch

        policy = reshape(topo, lost_hosts=[f"node{LOST_HOST + 1}"], allocation=allocation).policy
        out[case] = {
            "policy": policy,
            "cpu_s": _median_cpu(call, repeat),
            "peak_mb": _peak_mb(call),
        }
    return out


_CHILD = """
import runpy, sys
sys.argv = ["topology", *sys.argv[1:]]
try:
    runpy.run_module("topology", run_name="__main__")
except SystemExit:
    pass
with open("/proc/self/status") as status:  # VmHWM: this process's own peak, not its parent's
    peak = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
print(peak, file=sys.stderr)
"""
"""Runs ``topology`` as ``python -m topology`` does, then reports its peak resident kB (Linux;
``ru_maxrss`` would count the forked parent's pages)."""


def command(world: int, repeat: int) -> dict[str, float]:
    """The whole ``topology reshape`` command on ``--hosts node[1-H]`` in a subprocess: median
    CPU seconds (user + system) and the largest peak resident MB over ``repeat`` runs."""
    hosts = f"node[1-{world // GPUS}]"
    args = [sys.executable, "-c", _CHILD, "reshape", "-w", str(world), "--tp", "8", "--pp", "8"]
    args += ["--hosts", hosts, "--gpus-per-host", str(GPUS), "--lost", f"node{LOST_HOST + 1}"]
    cpu, peak = [], 0.0
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        peak = max(peak, int(done.stderr.split()[-1]) / 1e3)
    return {"cpu_s": statistics.median(cpu), "peak_rss_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 timing run, smaller big W")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs (median)")
    parser.add_argument("--out", default="benchmarks/results/bench_reshape.json")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    big = 32768 if args.quick else 131072
    table = rows(16384)
    header = (
        f"{'method':16} {'reuse':>7} {'trim':>7} {'rebuild':>8} {'keeps shard':>14} "
        f"{'stage moved':>12}"
    )
    print(f"W = 16,384, tp 8, pp 8, node {LOST_HOST} of 8 GPUs lost")
    print(header)
    for row in table:
        share = 100 * row["keeps_shard"] / row["active"]
        print(
            f"{row['method']:16} {row['reuse']:>7} {row['trim']:>7} {row['rebuild']:>8} "
            f"{share:>13.2f}% {row['stage_moved']:>12}"
        )
    timings, cpu = {}, {}
    for world in (16384, big):
        topo = Topology(world, tp=8, pp=8)
        call = partial(reshape, topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS)
        timings[world] = median_seconds(call, repeat)
        cpu[world] = _median_cpu(call, repeat)
        print(
            f"reshape at W = {world:,}: {timings[world]:.3f} s wall, {cpu[world]:.3f} s CPU "
            f"(medians of {repeat})"
        )
    ratio = timings[big] / timings[16384]
    print(f"ratio {big:,} / 16,384: {ratio:.1f}x for {big // 16384}x the ranks")
    topo = Topology(big, tp=8, pp=8)
    spare = [big // GPUS]  # one spare host after the layout's
    policies = {}
    for policy in ("drop", "spares", "shrink"):
        call = partial(
            reshape, topo, lost_hosts=[LOST_HOST], gpus_per_node=GPUS, spares=spare, policy=policy
        )
        policies[policy] = _median_cpu(call, repeat)
    print(
        f"per policy at W = {big:,} (CPU, medians of {repeat}): "
        + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in policies.items())
    )
    names = by_name(big, repeat)
    print(f"\nhosts by name, W = {big:,} on {big // GPUS:,} hosts of {GPUS} GPUs, lost node4:")
    print(f"{'call':52} {'policy':8} {'CPU s':>7} {'peak MB':>8}")
    print(f"{'reshape(lost_hosts=[3], gpus_per_node=8)':52} {'drop':8} {cpu[big]:>7.3f} {'':>8}")
    for case, row in names.items():
        label = f"reshape(lost_hosts=['node4'], allocation) {case}"
        print(f"{label:52} {row['policy']:8} {row['cpu_s']:>7.3f} {row['peak_mb']:>8.1f}")
    cli = command(big, repeat)
    print(
        f"{'topology reshape --hosts ... --lost node4':52} {'drop':8} {cli['cpu_s']:>7.3f} "
        f"{cli['peak_rss_mb']:>8.1f}  (subprocess: start, imports, output; peak RSS)"
    )
    write_result(
        args.out,
        {
            "rows": table,
            "seconds": {str(k): v for k, v in timings.items()},
            "cpu_seconds": {str(k): v for k, v in cpu.items()},
            "policy_cpu_seconds": policies,
            "by_name": {"world_size": big, "hosts": big // GPUS, **names, "command": cli},
            "repeat": repeat,
            "ratio": ratio,
        },
    )


if __name__ == "__main__":
    main()
