"""A 16-rank gloo job (tp 2, pp 2, dp 4) that loses a rank three times and recovers in process.

Shared by ``test_recovery.py`` (the losses law) and ``benchmarks/bench_recovery.py`` (the
timings). Each rank trains a two-stage pipeline of our parallel layers (stage ``s`` is
``RowParallelLinear(ColumnParallelLinear(x))`` over its tp group; activations and their
gradients cross the pp group; gradients are summed over dp) on a fixed global batch of 12
samples: dp 4 x 3 micro-batches, then dp 3 x 4, dp 2 x 6 and dp 1 x 12 (the accumulation each
reshape gives). At step ``KILL_STEPS[i]`` torch rank ``VICTIMS[i]`` kills itself (SIGKILL); the
survivors' next collective raises (a closed connection, or the groups' timeout), they run
``recovery.agree_lost(groups, generation=i)`` (which answers in the layout's ranks:
``LOST[i]``, not the victim's torch rank after the first failure), ``topology.reshape`` and
``recovery.apply``, redo the step and go on; the ranks the new layout leaves idle return.
At the end of each layout's steps (before the next kill, or at the last step) its ranks
restore the weights they held at its recovery, build fresh groups for it (new names, nothing
reused) and run its steps again: losses (and at the end, weights) must be bitwise equal.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch import nn

from topology import Topology, reshape
from topology_torch import ColumnParallelLinear, ProcessGroups, RowParallelLinear, _naming, recovery

LAYOUT = Topology(16, tp=2, pp=2)  # rank = tp + 2 * dp + 8 * pp
VICTIMS = (10, 5, 15)  # torch ranks; each kills a replica: dp 4 -> 3 -> 2 -> 1
KILL_STEPS = (2, 4, 6)
LOST = ((10,), (3,), (7,))  # what agree_lost answers: the victims in the layout's ranks then
DP = (4, 3, 2, 1)  # the layouts' dp (tp 2, pp 2 throughout)
STEPS = 8
SAMPLES = 12  # the global batch: dp 4 x 3, then dp 3 x 4, dp 2 x 6, dp 1 x 12
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
        self,
        layout: Topology,
        me: int,
        torch_of: list[int],
        timeout: timedelta,
        prefix: str,
    ) -> None:
        self.layout, self.me, self._groups = layout, me, {}
        for kind in ("tp", "pp", "dp"):
            ranks = tuple(torch_of[r] for r in layout.group_of(me, kind))
            with _naming.named(_naming.group_name(prefix, ranks, None, timeout)):
                self._groups[kind] = dist.new_group(
                    list(ranks), timeout=timeout, use_local_synchronization=True
                )

    def group(self, kind: str) -> Any:
        return self._groups[kind]

    def rank(self, kind: str) -> int:
        return self.layout.local_rank(self.me, kind)

    def destroy(self) -> None:
        for group in self._groups.values():
            dist.destroy_process_group(group)


@dataclass
class _Segment:
    """The steps ``start`` to ``end`` (excluded) one layout ran after its recovery: what its
    fresh reference needs."""

    layout: Topology
    me: int  # this rank's rank in ``layout``
    torch_of: list[int]  # layout rank -> torch rank
    start: int
    end: int
    accumulation: int
    snapshot: dict[str, torch.Tensor]


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


def _reference(segment: _Segment, losses: list[torch.Tensor], wait: timedelta) -> nn.Module:
    """Run ``segment``'s steps again on fresh groups from its snapshot; assert its losses."""
    fresh = _Fresh(segment.layout, segment.me, segment.torch_of, wait, f"fresh/{segment.start}")
    reference = _stage(fresh.group("tp"), fresh.rank("pp"))
    reference.load_state_dict(segment.snapshot)
    steps = range(segment.start, segment.end)
    again = [train_step(fresh, reference, segment.accumulation, s) for s in steps]
    fresh.destroy()
    # bitwise: the same ranks reduce the same tensors in the same gloo groups' order
    mine = losses[segment.start : segment.end]
    assert all(map(torch.equal, mine, again)), (segment.layout, mine, again)
    return reference


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
    model = _stage(groups.group("tp"), groups.rank("pp"))
    accumulation = SAMPLES // LAYOUT.dp
    torch_of = list(range(LAYOUT.world_size))  # the layout's rank -> torch rank
    losses: list[torch.Tensor] = []
    segment: _Segment | None = None
    step, failures, resumed = 0, 0, -1
    while step < STEPS:
        if segment is not None and step == segment.end:
            _reference(segment, losses, wait)
            segment = None
        if failures < len(VICTIMS) and (rank, step) == (VICTIMS[failures], KILL_STEPS[failures]):
            store.set(f"test/killed {failures + 1}", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            losses.append(train_step(groups, model, accumulation, step))
        except RuntimeError as error:  # gloo: "Connection closed by peer" or "Timed out"
            assert failures < len(VICTIMS), f"a failure nobody caused: {error}"
            assert step == KILL_STEPS[failures], (step, error)
            failures += 1
            times[f"failed {failures}"] = time.time()
            lost = recovery.agree_lost(
                groups, generation=failures - 1, deadline=timedelta(seconds=deadline)
            )
            times[f"agreed {failures}"] = time.time()
            assert lost == LOST[failures - 1], (failures, lost)
            plan = reshape(
                groups.topology, lost_ranks=lost, gpus_per_node=2, accumulation=accumulation
            )
            dp = DP[failures]
            assert (plan.new.dp, plan.accumulation, plan.batch_kept) == (dp, SAMPLES // dp, True)
            me = groups.global_rank
            before = {
                k: groups.group(k)
                for k in groups.topology.kinds
                if groups.topology.size(k) > 1 and groups.has_group(k)
            }
            tp_before, pp_before, dp_before = before["tp"], before["pp"], before["dp"]
            old, groups = groups, recovery.apply(groups, plan, generation=failures - 1)
            assert "destroyed" in repr(old)  # consumed
            if groups is None:  # idle: its replica was dropped
                assert plan.rank_of(me) is None
                return
            torch_of = [torch_of[o] for o, n in enumerate(plan.mapping) if n is not None]
            assert torch_of[groups.global_rank] == rank
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
            assert VICTIMS[failures - 1] not in dist.get_process_group_ranks(groups.group("dp"))
            for p in model.parameters():
                p.grad = None  # the failed step's partial gradients
            accumulation, resumed = plan.accumulation, step
            end = KILL_STEPS[failures] if failures < len(KILL_STEPS) else STEPS
            segment = _Segment(
                plan.new,
                groups.global_rank,
                list(torch_of),
                step,
                end,
                accumulation,
                {k: v.clone() for k, v in model.state_dict().items()},
            )
            continue
        if resumed == step:
            times[f"first step {failures}"] = time.time()
        step += 1
    assert failures == len(VICTIMS) and segment is not None, (failures, segment)
    reference = _reference(segment, losses, wait)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    groups.destroy()  # the kept communicators and the new ones
    if rank == 0:
        for n in range(1, len(VICTIMS) + 1):
            times[f"killed {n}"] = float(store.get(f"test/killed {n}"))
        Path(out).write_text(json.dumps({**times, "losses": [float(v) for v in losses]}))
