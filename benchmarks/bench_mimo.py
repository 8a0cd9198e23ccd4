"""MIMO process groups: ``new_group`` calls per rank, ours against Megatron-LM's.

Two disjoint modules of half the world each, a vision encoder (tp, pp) and the language model
(tp, pp, ep), built by ``topology_torch.compat.megatron.mimo.create_topology`` on the ``fake``
backend (``init_process_group("fake", store=FakeStore(), ...)``: nothing is sent; each ``new_group``
is counted). Ours is measured on the first rank of each module (the larger count is shown). A
``split_group`` default group (bound NCCL) makes one collective per schedule call instead: that
count is the schedule's length. Megatron's count is its own ``create_topology``
(``examples/mimo/training/topology.py``, Megatron-LM main) run on the fake backend at 64 ranks
under megatron-core 0.19.2 (``.venv/oracles``, ``$MEGATRON_MIMO`` the file; its ``backend="nccl"``
becomes the fake default), and the formula read from its code at every size (every rank calls
``new_group`` for every group of every family of every module, plus two embedding groups per
pipeline of the language module); the two agree where both exist.

Run: ``.venv/bin/python benchmarks/bench_mimo.py`` (writes ``benchmarks/results/mimo.json``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ORACLE = ROOT / ".venv" / "oracles" / "megatron-core-0.19.2"
MIRROR = os.environ.get("MEGATRON_MIRROR", "/work/.mirror/NVIDIA+Megatron-LM/repo")
SCENARIOS = (
    {"world": 64, "tp": 2, "pp": 2, "ep": 1},
    {"world": 16_384, "tp": 8, "pp": 8, "ep": 1},
    {"world": 131_072, "tp": 8, "pp": 16, "ep": 64},
)

# one rank of a fake world: build the MIMO topology and print the calls it made
OURS = """
import json, sys
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore
from topology_torch.compat.megatron.mimo import create_topology
sys.path.insert(0, {bench!r})
from bench_mimo import specs
world, rank = {world}, {rank}
dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
topo = create_topology(specs(ModuleGridSpec, **{scenario!r}))
print(json.dumps({{"calls": topo.calls, "schedule": len(topo.modules.schedule(spans=True))}}))
"""

MEGATRON = """
import json, os, sys, types
import megatron.core as core
root = os.path.dirname(core.__file__)
mimo = "megatron.core.models.mimo"
for name in ("megatron.core.models", mimo, mimo + ".config"):
    package = types.ModuleType(name)
    package.__path__ = [os.path.join(root, *name.split(".")[2:])]
    sys.modules[name] = package  # role.py without the model stack's __init__ (triton)
sys.path[:0] = [{folder!r}, {bench!r}]
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.testing._internal.distributed.fake_pg import FakeStore
import mimo_topology
from bench_mimo import specs
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size={world})
calls = 0
original = c10d.new_group
def counted(*args, **kwargs):
    global calls
    calls += 1
    if kwargs.get("backend") == "nccl":
        kwargs["backend"] = None
    return original(*args, **kwargs)
dist.new_group = c10d.new_group = counted
mimo_topology.create_topology(specs(mimo_topology.ModuleGridSpec, **{scenario!r}))
print(json.dumps({{"calls": calls}}))
"""


def specs(spec: Any, *, world: int, tp: int, pp: int, ep: int) -> list[Any]:
    """The two modules: a vision encoder (tp, pp) and the language model (tp, pp, ep)."""
    half = world // 2
    return [
        spec("vision", half, tp=tp, pp=pp),
        spec("language", half, tp=tp, pp=pp, ep=ep, rank_offset=half),
    ]


def megatron_formula(world: int, tp: int, pp: int, ep: int) -> int:
    """Megatron's calls per rank from its code: every group of every family of every module."""
    from topology_torch.compat.megatron.mimo import FAMILIES, ModuleGridSpec

    total = 0
    for spec in specs(ModuleGridSpec, world=world, tp=tp, pp=pp, ep=ep):
        for _, _, _, dims, _ in FAMILIES:
            size = 1
            for dim in dims:  # Megatron's grid dims are the spec's fields (tp, expt_dp, ...)
                size *= getattr(spec, dim)
            total += spec.num_ranks // size
        if spec.name == "language":
            total += 2 * (spec.num_ranks // spec.pp)  # embd and pos_embd per pipeline
    return total


def _run(code: str, env: dict[str, str]) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=1800
    )
    if result.returncode:
        raise RuntimeError(result.stderr[-2000:])
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def megatron_measured(scenario: dict[str, int]) -> int | None:
    """Megatron's own create_topology on the fake backend (None without the oracle or file)."""
    if not ORACLE.is_dir():
        return None
    with tempfile.TemporaryDirectory() as folder:
        source = subprocess.run(
            ["git", f"--git-dir={MIRROR}", "show", "main:examples/mimo/training/topology.py"],
            capture_output=True,
            text=True,
        )
        if source.returncode:
            return None
        Path(folder, "mimo_topology.py").write_text(source.stdout)
        code = MEGATRON.format(
            folder=folder, bench=str(ROOT / "benchmarks"), **scenario_args(scenario)
        )
        env = {**os.environ, "PYTHONPATH": f"{ORACLE}"}
        return int(_run(code, env)["calls"])


def scenario_args(scenario: dict[str, int]) -> dict[str, Any]:
    return {"world": scenario["world"], "scenario": scenario}


def ours(scenario: dict[str, int]) -> tuple[int, int]:
    """Our calls per rank (the larger of each module's first rank) and the schedule's length."""
    counts, schedule = [], 0
    for rank in (0, scenario["world"] // 2):
        code = OURS.replace(
            "from bench_mimo import specs",
            "from bench_mimo import specs\n"
            "from topology_torch.compat.megatron.mimo import ModuleGridSpec",
        )
        code = code.format(bench=str(ROOT / "benchmarks"), rank=rank, **scenario_args(scenario))
        answer = _run(code, {**os.environ, "PYTHONPATH": str(ROOT / "src")})
        counts.append(answer["calls"])
        schedule = answer["schedule"]
    return max(counts), schedule


def main() -> None:
    rows = []
    for scenario in SCENARIOS:
        calls, schedule = ours(scenario)
        measured = megatron_measured(scenario) if scenario["world"] <= 64 else None
        formula = megatron_formula(**scenario)
        rows.append(
            {
                **scenario,
                "ours": calls,
                "ours_split": schedule,
                "megatron_formula": formula,
                "megatron_measured": measured,
                "ratio": round(formula / calls, 1),
            }
        )
        print(rows[-1], flush=True)
    out = ROOT / "benchmarks" / "results" / "mimo.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(
        "\n| ranks | tp | pp | ep | Megatron (measured) | Megatron (formula) | ours "
        "| ours, split | ratio |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        shown = "" if r["megatron_measured"] is None else f"{r['megatron_measured']:,}"
        print(
            f"| {r['world']:,} | {r['tp']} | {r['pp']} | {r['ep']} | {shown} | "
            f"{r['megatron_formula']:,} | {r['ours']} | {r['ours_split']} | {r['ratio']:,}x |"
        )


if __name__ == "__main__":
    main()
