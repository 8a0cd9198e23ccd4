"""Train a tiny tensor- and data-parallel MLP block and check every loss against one process.

Run ``python -m topology_torch.demo`` (4 spawned gloo processes: tp2 x dp2), ``--nproc N``, or
under ``torchrun --nproc-per-node 4 -m topology_torch.demo`` (reads ``RANK``/``WORLD_SIZE``).
Each rank also trains the plain ``torch.nn`` model on the whole global batch and compares the
losses step by step; the exit status is non-zero if any step differs (``--corrupt`` perturbs
one rank's parameter to show it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.multiprocessing.spawn import ProcessExitedException, spawn

from topology import Topology

from . import destroy, initialize
from .layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding

VOCAB, HIDDEN, FFN, SEQ, MICRO_BATCH, LR = 64, 32, 64, 8, 4, 0.1
RTOL = 1e-4


class _Block(nn.Module):
    """embedding -> column -> gelu -> row, split across the tp group."""

    def __init__(self, group: object) -> None:
        super().__init__()
        self.embedding = VocabParallelEmbedding(VOCAB, HIDDEN, group=group)
        self.up = ColumnParallelLinear(HIDDEN, FFN, gather_output=False, group=group)
        self.down = RowParallelLinear(FFN, HIDDEN, input_is_parallel=True, group=group)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        y: torch.Tensor = self.down(nn.functional.gelu(self.up(self.embedding(ids))))
        return y


def _single_process_copy(block: _Block) -> nn.Sequential:
    """The plain model holding the gathered master parameters (a collective on the tp group)."""
    up_bias, down_bias = block.up.master_bias, block.down.master_bias
    assert up_bias is not None and down_bias is not None
    emb, up, down = nn.Embedding(VOCAB, HIDDEN), nn.Linear(HIDDEN, FFN), nn.Linear(FFN, HIDDEN)
    with torch.no_grad():
        emb.weight.copy_(block.embedding.master_weight)
        up.weight.copy_(block.up.master_weight)
        up.bias.copy_(up_bias)
        down.weight.copy_(block.down.master_weight)
        down.bias.copy_(down_bias)
    return nn.Sequential(emb, up, nn.GELU(), down)


def _batch(step: int, replica: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and regression targets of one data-parallel replica at ``step``."""
    gen = torch.Generator().manual_seed(1000 * step + replica)
    ids = torch.randint(0, VOCAB, (MICRO_BATCH, SEQ), generator=gen)
    return ids, torch.randn(MICRO_BATCH, SEQ, HIDDEN, generator=gen)


def _sgd_step(model: nn.Module) -> None:
    """Plain SGD (``torch.optim`` would import torch._dynamo: seconds per process)."""
    with torch.no_grad():
        for param in model.parameters():
            assert param.grad is not None
            param.sub_(LR * param.grad)
            param.grad = None


def train(rank: int, world_size: int, steps: int, corrupt: bool = False) -> bool:
    """Train on this rank of an initialised default group; return whether every loss matched."""
    tp = 2 if world_size % 2 == 0 else 1
    topo = Topology(world_size=world_size, tp=tp)
    groups = initialize(topo)
    try:
        dp_size, replica = groups.size("dp"), groups.rank("dp")
        tp_group, dp_group = groups.group("tp"), groups.group("dp")
        torch.manual_seed(0)  # the same seed on every rank: every rank draws the same masters
        block = _Block(tp_group)
        ref = _single_process_copy(block)
        if corrupt and rank == 0 and block.down.bias is not None:
            with torch.no_grad():
                block.down.bias.add_(0.1)  # shows that a mismatch is caught
        ok = True
        if rank == 0:
            print(f"{topo}: tp{tp} x dp{dp_size}, {steps} steps")
        for step in range(steps):
            ids, target = _batch(step, replica)
            loss = nn.functional.mse_loss(block(ids), target)
            torch.autograd.backward(loss)
            for param in block.parameters():  # data parallel: average the gradients over dp
                assert param.grad is not None
                dist.all_reduce(param.grad, group=dp_group)
                param.grad /= dp_size
            _sgd_step(block)
            global_loss = loss.detach().clone()
            dist.all_reduce(global_loss, group=dp_group)
            global_loss /= dp_size

            batches = [_batch(step, r) for r in range(dp_size)]
            all_ids = torch.cat([b[0] for b in batches])
            all_targets = torch.cat([b[1] for b in batches])
            ref_loss = nn.functional.mse_loss(ref(all_ids), all_targets)
            torch.autograd.backward(ref_loss)
            _sgd_step(ref)

            same = torch.allclose(global_loss, ref_loss.detach(), rtol=RTOL, atol=0.0)
            ok = ok and same
            if rank == 0:
                verdict = "equal" if same else "DIFFERENT"
                print(
                    f"step {step}: parallel loss {global_loss.item():.6f}  "
                    f"single-process loss {ref_loss.item():.6f}  {verdict}"
                )
        flags = torch.tensor([0.0 if ok else 1.0])
        dist.all_reduce(flags)
        return bool(flags.item() == 0)
    finally:
        destroy()


def _spawned(rank: int, world_size: int, init_file: str, steps: int, corrupt: bool) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        if not train(rank, world_size, steps, corrupt):
            raise SystemExit(1)
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status (0 when every loss matched)."""
    parser = argparse.ArgumentParser(prog="python -m topology_torch.demo", description=__doc__)
    parser.add_argument("--nproc", type=int, default=4, help="processes to spawn (default 4)")
    parser.add_argument("--steps", type=int, default=5, help="training steps (default 5)")
    parser.add_argument(
        "--corrupt", action="store_true", help="perturb one rank's parameter: must exit 1"
    )
    args = parser.parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        try:
            return 0 if train(rank, world_size, args.steps, args.corrupt) else 1
        finally:
            dist.destroy_process_group()
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        try:
            spawn(_spawned, args=(args.nproc, store, args.steps, args.corrupt), nprocs=args.nproc)  # type: ignore[no-untyped-call]
        except ProcessExitedException as error:
            print(f"demo failed: {error}", file=sys.stderr)
            return 1
    print("every step's loss equals the single-process model's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
