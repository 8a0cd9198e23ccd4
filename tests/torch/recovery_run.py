"""A 16-rank gloo job (tp 2, pp 2, dp 4) that loses a rank mid-run and recovers in process.

Shared by ``test_recovery.py`` (the losses law) and ``benchmarks/bench_recovery.py`` (the
timings). Each rank trains a two-stage pipeline of our parallel layers (stage ``s`` is
``RowParallelLinear(ColumnParallelLinear(x))`` over its tp group; activations and their
gradients cross the pp group; gradients are summed over dp) on a fixed global batch of 12
samples: dp 4 x 3 micro-batches, then dp 3 x 4 (the accumulation the reshape gives). At step
``KILL_STEP`` rank ``VICTIM`` kills itself (SIGKILL); the survivors' next collective raises (a
closed connection, or the groups' timeout), they run ``recovery.agree_lost``,
``topology.reshape`` and ``recovery.apply``, redo the step and go on. Then the 12 active ranks
restore the weights they held at recovery, build fresh groups for the dp-3 layout (new names,
nothing reused) and run the same steps again: losses and weights must be bitwise equal.
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

from topology import Reshape, Topology, reshape
from topology_torch import ColumnParallelLinear, ProcessGroups, RowParallelLinear, _naming, recovery

LAYOUT = Topology(16, tp=2, pp=2)  # rank = tp + 2 * dp + 8 * pp
VICTIM = 10  # tp 0, dp 1, pp 1: its replica is {2, 3, 10, 11}
KILL_STEP = 2
STEPS = 5
SAMPLES = 12  # the global batch: dp 4 x 3, then dp 3 x 4
WIDTH = 8
TIMEOUT = 3.0  # seconds, every group's: a collective with a dead peer fails within it
DEADLINE = 5.0  # seconds, agree_lost's: TIMEOUT + 2 s (the survivors' arrival spread, one step)
LR = 0.1


def _stage(tp: Any, stage: int) -> nn.Module:
    """Stage ``stage``'s layers over ``tp``, drawn from seed ``stage`` (equal on every replica)."""
    torch.manual_seed(stage)
    out = WIDTH if stage == 0 else 1
    return nn.Sequential(
        ColumnParallelLinear(WIDTH, 16, gather_output=False, group=tp),
        nn.Tanh(),
        RowParallelLinear(16, out, input_is_parallel=True, group=tp),
    )


class _Fresh:
    """The groups ``train_step`` reads (tp, pp, dp), made fresh by their members: the
    reference. Names come from ``prefix`` and the ranks, so no communicator is shared."""

    def __init__(
        self, plan: Reshape, new_rank: int, torch_rank: dict[int, int], timeout: timedelta
    ) -> None:
        self.layout, self.me, self._groups = plan.new, new_rank, {}
        for kind in ("tp", "pp", "dp"):
            ranks = tuple(torch_rank[r] for r in plan.new.group_of(new_rank, kind))
            with _naming.named(_naming.group_name("fresh", ranks, None, timeout)):
                self._groups[kind] = dist.new_group(
                    list(ranks), timeout=timeout, use_local_synchronization=True
                )

    def group(self, kind: str) -> Any:
        return self._groups[kind]

    def rank(self, kind: str) -> int:
        return self.layout.local_rank(self.me, kind)


def _batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(SAMPLES, WIDTH, generator=generator), torch.randn(
        SAMPLES, 1, generator=generator
    )


def train_step(groups: Any, model: nn.Module, accumulation: int, step: int) -> torch.Tensor:
    """One optimizer step on this replica's ``accumulation`` micro-batches; the global loss."""
    pp, dp, stage = groups.group("pp"), groups.group("dp"), groups.rank("pp")
    x, y = _batch(step)
    total = torch.zeros(1)
    for micro in range(accumulation):
        i = groups.rank("dp") * accumulation + micro
        if stage == 0:
            out = model(x[i : i + 1])
            dist.send(out.detach().contiguous(), group=pp, group_dst=1)
            grad = torch.empty_like(out)
            dist.recv(grad, group=pp, group_src=1)
            out.backward(grad)
        else:
            inp = torch.empty(1, WIDTH)
            dist.recv(inp, group=pp, group_src=0)
            inp.requires_grad_()
            loss = ((model(inp) - y[i : i + 1]) ** 2).sum() / SAMPLES
            loss.backward()
            assert inp.grad is not None
            dist.send(inp.grad.contiguous(), group=pp, group_dst=0)
            total += loss.detach()
    params = list(model.parameters())
    flat = torch.cat([p.grad.reshape(-1) for p in params if p.grad is not None] + [total])
    dist.all_reduce(flat, group=dp)
    with torch.no_grad():
        start = 0
        for p in params:
            p.sub_(LR * flat[start : start + p.numel()].view_as(p))
            p.grad = None
            start += p.numel()
    return flat[-1:].clone()


def run(
    rank: int, world_size: int, out: str, timeout: float = TIMEOUT, deadline: float = DEADLINE
) -> None:
    """The whole scenario on one rank (see the module's docstring); rank 0 writes timings.

    ``timeout`` (every group's) and ``deadline`` (``agree_lost``'s) are seconds.
    """
    store = c10d._get_default_store()
    wait = timedelta(seconds=timeout)
    groups: ProcessGroups | None = ProcessGroups.create(LAYOUT, timeout=wait)
    assert groups is not None
    times = {"created": time.time()}
    tp_before, pp_before, dp_before = groups.group("tp"), groups.group("pp"), groups.group("dp")
    before = {
        k: groups.group(k) for k in LAYOUT.kinds if LAYOUT.size(k) > 1 and groups.has_group(k)
    }
    model = _stage(tp_before, groups.rank("pp"))
    accumulation = SAMPLES // LAYOUT.dp
    losses: list[torch.Tensor] = []
    step, resumed = 0, -1
    while step < STEPS:
        if rank == VICTIM and step == KILL_STEP:
            store.set("test/killed", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            losses.append(train_step(groups, model, accumulation, step))
        except RuntimeError as error:  # gloo: "Connection closed by peer" or "Timed out"
            assert resumed < 0, f"a second failure after recovery: {error}"
            times["failed"] = time.time()
            lost = recovery.agree_lost(generation=0, deadline=timedelta(seconds=deadline))
            times["agreed"] = time.time()
            assert lost == (VICTIM,), lost
            plan = reshape(LAYOUT, lost_ranks=lost, gpus_per_node=2, accumulation=accumulation)
            assert (plan.new.dp, plan.accumulation, plan.batch_kept) == (3, 4, True)
            old, groups = groups, recovery.apply(groups, plan, generation=0)
            assert "destroyed" in repr(old)  # consumed
            if groups is None:  # idle: its replica was dropped
                assert plan.rank_of(rank) is None
                return
            # the core's classification, per kind: where every group is reused this rank keeps
            # its communicator object; where none is, it has a new one
            for change in plan.communicators:
                if change.kind in before and groups.has_group(change.kind):
                    kept = groups.group(change.kind) is before[change.kind]
                    assert kept or change.trim + change.rebuild > 0, change
                    assert not kept or change.reuse > 0, change
            # tp and pp groups lie inside a surviving replica: the same objects; dp shrank
            assert groups.group("tp") is tp_before and groups.group("pp") is pp_before
            assert groups.group("dp") is not dp_before
            assert VICTIM not in dist.get_process_group_ranks(groups.group("dp"))
            for p in model.parameters():
                p.grad = None  # the failed step's partial gradients
            snapshot = {k: v.clone() for k, v in model.state_dict().items()}
            accumulation, resumed = plan.accumulation, step
            continue
        if resumed == step:
            times["first step"] = time.time()
        step += 1
    assert resumed == KILL_STEP, resumed
    torch_rank = {
        new: old for old, new in enumerate(plan.mapping) if new is not None
    }  # the layout starts at rank 0
    fresh = _Fresh(plan, groups.global_rank, torch_rank, wait)
    reference = _stage(fresh.group("tp"), fresh.rank("pp"))
    reference.load_state_dict(snapshot)
    again = [train_step(fresh, reference, accumulation, s) for s in range(resumed, STEPS)]
    # bitwise: the same ranks reduce the same tensors in the same gloo groups' order
    assert all(map(torch.equal, losses[resumed:], again)), (losses[resumed:], again)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    groups.destroy()  # the kept communicators and the new ones
    if rank == 0:
        times["killed"] = float(store.get("test/killed"))
        Path(out).write_text(json.dumps({**times, "losses": [float(v) for v in losses]}))
