"""An 8-rank gloo job (tp 2, pp 2, dp 2) that loses a rank, shrinks, and grows back when four
new processes join, without restarting the survivors.

Shared by ``test_recovery.py`` (the law) and ``benchmarks/bench_recovery.py`` (the timing).
The model and the step are ``recovery_run``'s (two pipeline stages of our tp layers, a fixed
global batch of 12 samples). The store is a ``TCPStore`` the caller hosts (it outlives every
rank, as a launcher's does). At step ``KILL_STEP`` torch rank ``VICTIM`` (tp 1 of replica 1)
kills itself; the survivors agree, reshape (replica 1 is dropped: dp 2 -> 1, its other three
ranks are idle and exit) and train on; after step ``GROW_STEP`` four new processes (the
returning host's) and the four survivors call ``recovery.grow`` back to the original layout:
the survivors keep their weights, the new ones start from zeros and pull theirs. The grown job
then trains to ``STEPS``; its losses and final weights must equal a fresh run of the original
layout from the weights at the growth, bitwise, and its losses an uninterrupted run's to
float rounding (``uninterrupted``).
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
from torch import nn

from tests.torch import recovery_run
from tests.torch.recovery_run import SAMPLES, _Segment, _stage, train_step
from topology import Topology, grow, reshape
from topology_torch import ProcessGroups, recovery

LAYOUT = Topology(8, tp=2, pp=2)  # rank = tp + 2 * dp + 4 * pp
VICTIM = 3  # tp 1, dp 1, pp 0
KILL_STEP, GROW_STEP, STEPS = 2, 4, 7
JOINERS = 4
TIMEOUT, DEADLINE = 2.0, 4.0  # seconds: the groups' and agree_lost's


def _store(port: int) -> Any:
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))


def _plans() -> tuple[Any, Any]:
    """The reshape after the kill and the growth back: what every member computes alike."""
    shrunk = reshape(LAYOUT, lost_ranks=[VICTIM], gpus_per_node=2, accumulation=SAMPLES // 2)
    return shrunk, grow(shrunk.new, LAYOUT, accumulation=shrunk.accumulation)


def _finish(
    groups: ProcessGroups, model: nn.Module, losses: list[torch.Tensor], start: int, store: Any
) -> None:
    """Train the grown layout to the end; check it against a fresh run from the growth."""
    wait = timedelta(seconds=TIMEOUT)
    rank = groups.global_rank
    for p in model.parameters():  # every replica holds the same weights: the pulls arrived
        high, low = p.detach().clone(), p.detach().clone()
        dist.all_reduce(high, dist.ReduceOp.MAX, group=groups.group("dp"))
        dist.all_reduce(low, dist.ReduceOp.MIN, group=groups.group("dp"))
        assert torch.equal(high, p) and torch.equal(low, p), rank
    snapshot = {k: v.clone() for k, v in model.state_dict().items()}
    accumulation = SAMPLES // LAYOUT.dp
    grown = [train_step(groups, model, accumulation, s) for s in range(start, STEPS)]
    if rank == 0:
        store.set("test/grown", json.dumps([float(v) for v in grown]))
        store.set("test/grown steps done", repr(time.time()))
    segment = _Segment(LAYOUT, rank, list(range(8)), start, STEPS, accumulation, snapshot)
    reference = recovery_run._reference(segment, [*losses, *grown], wait)
    for mine, theirs in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    groups.destroy()


def member(rank: int, world_size: int, port: int) -> None:
    """One of the 8 original ranks."""
    store = _store(port)
    dist.init_process_group(
        "gloo", store=dist.PrefixStore("start", store), rank=rank, world_size=world_size
    )
    wait = timedelta(seconds=TIMEOUT)
    groups: ProcessGroups | None = ProcessGroups.create(LAYOUT, timeout=wait)
    assert groups is not None
    model = _stage(groups.group("tp"), groups.rank("pp"))
    accumulation = SAMPLES // LAYOUT.dp
    shrunk, growth = _plans()
    losses: list[torch.Tensor] = []
    step = 0
    while step < GROW_STEP:
        if (rank, step) == (VICTIM, KILL_STEP):
            store.set("test/killed", repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        try:
            losses.append(train_step(groups, model, accumulation, step))
        except RuntimeError:
            assert step == KILL_STEP
            lost = recovery.agree_lost(
                groups, generation=0, deadline=timedelta(seconds=DEADLINE), store=store
            )
            assert lost == (VICTIM,), lost
            plan = reshape(
                groups.topology, lost_ranks=lost, gpus_per_node=2, accumulation=accumulation
            )
            assert plan == shrunk
            groups = recovery.apply(groups, plan, generation=0)
            if groups is None:  # idle: replica 1 was dropped
                dist.destroy_process_group()
                return
            for p in model.parameters():
                p.grad = None
            accumulation = plan.accumulation
            continue
        step += 1
    assert groups is not None and groups.topology == growth.old
    if rank == 0:
        store.set("test/grow", repr(time.time()))
    new_rank = growth.rank_of(groups.global_rank)
    state = model.state_dict()
    rebuilt: list[nn.Module] = []

    def weights(new: ProcessGroups) -> dict[str, list[torch.Tensor]]:
        """Its layers on the new groups, its own weights in them (nothing to pull)."""
        rebuilt.append(_stage(new.group("tp"), new.rank("pp")))
        rebuilt[0].load_state_dict(state)
        return {"dense": list(rebuilt[0].parameters())}

    grown = recovery.grow(groups, growth, store=store, generation=0, tensors=weights, timeout=wait)
    assert grown.global_rank == new_rank
    _finish(grown, rebuilt[0], losses, GROW_STEP, store)
    dist.destroy_process_group()


def joiner(index: int, port: int) -> None:
    """New process ``index``: waits for the growth, joins with zero weights, pulls them."""
    store = _store(port)
    store.wait(["test/grow"])
    _, growth = _plans()
    built: list[nn.Module] = []

    def weights(new: ProcessGroups) -> dict[str, list[torch.Tensor]]:
        """Fresh layers on the new groups, zeroed: every weight must arrive."""
        built.append(_stage(new.group("tp"), new.rank("pp")))
        with torch.no_grad():
            for p in built[0].parameters():
                p.zero_()
        return {"dense": list(built[0].parameters())}

    wait = timedelta(seconds=TIMEOUT)
    groups = recovery.grow(
        None, growth, store=store, generation=0, tensors=weights, joining=index, timeout=wait
    )
    assert groups.global_rank == growth.joining[index]
    _finish(groups, built[0], [torch.zeros(1)] * GROW_STEP, GROW_STEP, store)
    dist.destroy_process_group()


def uninterrupted(rank: int, world_size: int, out: str) -> None:
    """The original layout trained for every step, no failure: its losses (rank 0 writes)."""
    groups = ProcessGroups.create(LAYOUT)
    model = _stage(groups.group("tp"), groups.rank("pp"))
    losses = [train_step(groups, model, SAMPLES // LAYOUT.dp, s) for s in range(STEPS)]
    if rank == 0:
        Path(out).write_text(json.dumps([float(v) for v in losses]))
    groups.destroy()


def _entry(target: Any, args: tuple[Any, ...], errors: Any, environ: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(environ)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    try:
        target(*args)
    except BaseException:
        import traceback

        errors.put(traceback.format_exc())
        raise


def run(timeout: float = 120) -> dict[str, Any]:
    """The scenario on 8 + 4 processes around a store this process hosts; the grown losses and
    the times (killed, grow called, the grown steps done)."""
    from tests.torch.world import _free_port, context

    port = _free_port()
    server = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)
    starter = context()
    errors = starter.SimpleQueue()
    environ = dict(os.environ)
    calls = [(member, (rank, LAYOUT.world_size, port)) for rank in range(LAYOUT.world_size)]
    calls += [(joiner, (index, port)) for index in range(JOINERS)]
    processes = [
        starter.Process(target=_entry, args=(target, args, errors, environ), daemon=True)
        for target, args in calls
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
    for process in processes:
        if process.is_alive():
            process.kill()
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert not failures, failures[0]
    codes = [p.exitcode for p in processes]
    expected = [-signal.SIGKILL if i == VICTIM else 0 for i in range(len(processes))]
    assert codes == expected, (codes, expected)
    times = {k: float(server.get(f"test/{k}")) for k in ("killed", "grow", "grown steps done")}
    return {"grown": json.loads(server.get("test/grown")), **times}
