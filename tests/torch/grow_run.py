"""A 16-rank gloo job (tp 2, pp 2, dp 4) loses a rank, shrinks to dp 3, then grows back to dp 4.

Shared by ``test_recovery.py`` (the losses law) and ``benchmarks/bench_recovery.py`` (the
timing). The model, batches and step are ``recovery_run``'s (12 samples a step: dp 4 x 3
micro-batches, dp 3 x 4). At step ``KILL_STEP`` torch rank ``VICTIM`` SIGKILLs itself; the
survivors ``agree_lost``, ``reshape`` (its replica dropped: 3 ranks leave) and ``apply``, and train
on at dp 3. At step ``GROW_STEP`` new rank 0 asks the parent (``run_world(joining=...)``, whose
store every process reaches, as torchrun's agent hosts one) to start ``JOINING`` processes; every
survivor and every new process calls ``recovery.grow`` with ``topology.grow(layout, LAYOUT)``:
survivors keep their weights in memory, the new processes (random weights) receive theirs in
3 pieces from the 3 holders of their shard, and the original layout trains on at accumulation 3.

Checked on every rank of the grown world: the replicas hold bitwise equal weights right after the
growth; the losses after it equal, bitwise, a fresh run of the original layout from those
weights; and they equal an uninterrupted run (all steps at dp 4 from the first weights, run
afterwards on fresh groups) to ``RTOL``: the dp-3 steps sum the same 12 per-sample gradients in
another order (fp32), so the weights drift by rounding, a few ulp per step (the steps before the
kill are bitwise equal).
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn

from tests.torch.recovery_run import LAYOUT, SAMPLES, _Fresh, _stage, train_step
from tests.torch.world import JOIN
from topology import Growth, grow, reshape
from topology_torch import ProcessGroups, recovery

VICTIM, KILL_STEP, GROW_STEP, STEPS = 10, 2, 4, 7
JOINING = 4  # the original 16 ranks minus the 12 active survivors
TIMEOUT = 3.0  # seconds, every group's (recovery_run's)
DEADLINE = 5.0  # seconds, agree_lost's
WRITER = 8  # the last stage's first rank (a survivor, which computes the loss) writes ``out``
RTOL = 1e-5  # the drift of 2 fp32 steps with another summation order: ~1e-7 measured


def _plan(layout: Any) -> Growth:
    return grow(layout, LAYOUT, accumulation=SAMPLES // layout.dp)


def run(rank: int, world_size: int, out: str, timeout: float, deadline: float) -> None:
    """One of the original ranks (see the module's docstring)."""
    # the parent's TCPStore (every process reaches it), without the default group's prefix
    store = c10d._get_default_store().underlying_store
    wait = timedelta(seconds=timeout)
    groups: ProcessGroups | None = ProcessGroups.create(LAYOUT, timeout=wait)
    assert groups is not None
    model = _stage(groups.group("tp"), groups.rank("pp"))
    accumulation = SAMPLES // LAYOUT.dp
    losses: list[torch.Tensor] = []
    step = 0
    while step < GROW_STEP:
        if (rank, step) == (VICTIM, KILL_STEP):
            store.set("test/killed", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            losses.append(train_step(groups, model, accumulation, step))
            step += 1
        except RuntimeError:  # gloo: "Connection closed by peer" or "Timed out"
            assert step == KILL_STEP
            lost = recovery.agree_lost(groups, generation=0, deadline=timedelta(seconds=deadline))
            plan = reshape(groups.topology, lost_ranks=lost, gpus_per_node=2)
            groups = recovery.apply(groups, plan, generation=0)
            if groups is None:  # idle: its replica was dropped
                return
            for p in model.parameters():
                p.grad = None  # the failed step's partial gradients
            accumulation = SAMPLES // plan.new.dp
    assert groups.topology.dp == 3
    if groups.global_rank == 0:
        store.set(JOIN, "1")  # the parent starts the new processes
    kept = {k: v.clone() for k, v in model.state_dict().items()}

    def rebuilt(grown: ProcessGroups) -> dict[str, list[torch.Tensor]]:
        nonlocal model
        model = _stage(grown.group("tp"), grown.rank("pp"))  # layers on the new tp group
        model.load_state_dict(kept)
        return {"dense": list(model.parameters()), "expert": []}

    _grown(groups, _plan(groups.topology), rebuilt, lambda: model, losses, store, out, timeout)


def join(index: int, store: Any, out: str, timeout: float, deadline: float) -> None:
    """A new process: no weights; it joins the growth (see the module's docstring)."""
    model: nn.Module | None = None

    def fresh(grown: ProcessGroups) -> dict[str, list[torch.Tensor]]:
        nonlocal model
        model = _stage(grown.group("tp"), grown.rank("pp"))
        generator = torch.Generator().manual_seed(99 + index)
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, generator=generator))  # nothing like the job's
        return {"dense": list(model.parameters()), "expert": []}

    plan = _plan(reshape(LAYOUT, lost_ranks=[VICTIM], gpus_per_node=2).new)
    _grown(None, plan, fresh, lambda: model, [], store, out, timeout)


def _grown(
    groups: ProcessGroups | None,
    plan: Growth,
    tensors: Any,
    current: Any,
    losses: list[torch.Tensor],
    store: Any,
    out: str,
    timeout: float,
) -> None:
    """Grow, train the original layout on, and check it (every rank of the grown world)."""
    wait = timedelta(seconds=timeout)
    entered = time.time()
    grown = recovery.grow(
        groups, plan, tensors, generation=0, store=store, backend="gloo", timeout=wait
    )
    returned = time.time()
    assert grown.topology == LAYOUT and dist.get_world_size() == LAYOUT.world_size
    me, model = grown.global_rank, current()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    replicas = [torch.empty_like(flat) for _ in range(LAYOUT.dp)]
    dist.all_gather(replicas, flat, group=grown.group("dp"))
    assert all(torch.equal(r, flat) for r in replicas), me  # the joiners got their holders'
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    after = []
    for step in range(GROW_STEP, STEPS):
        after.append(train_step(grown, model, plan.accumulation, step))
        if step == GROW_STEP:
            first = time.time()
    everyone = list(range(LAYOUT.world_size))
    again = _Fresh(LAYOUT, me, everyone, wait, "again")
    reference = _stage(again.group("tp"), again.rank("pp"))
    reference.load_state_dict(snapshot)
    redone = [train_step(again, reference, plan.accumulation, s) for s in range(GROW_STEP, STEPS)]
    again.destroy()
    assert all(map(torch.equal, after, redone)), (me, after, redone)
    plain = _Fresh(LAYOUT, me, everyone, wait, "uninterrupted")
    reference = _stage(plain.group("tp"), plain.rank("pp"))
    straight = [train_step(plain, reference, SAMPLES // LAYOUT.dp, s) for s in range(STEPS)]
    plain.destroy()
    assert all(map(torch.equal, losses[:KILL_STEP], straight[:KILL_STEP])), me
    # relative to the uninterrupted loss (0 on the first stage, which computes none)
    drift = max(
        abs(float(a) - float(b)) / max(abs(float(b)), 1e-30)
        for a, b in zip(after, straight[GROW_STEP:], strict=True)
    )
    assert drift <= RTOL, (me, drift, after, straight)
    worst = torch.tensor([drift], dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # on the new default group
    grown.destroy()
    if me == WRITER:
        times = {
            "killed": float(store.get("test/killed")),
            "spawned": float(store.get("test/spawned")),
            "entered": entered,
            "grown": returned,
            "first step": first,
        }
        result = {**times, "drift": float(worst), "losses": [float(v) for v in losses + after]}
        Path(out).write_text(json.dumps(result))
