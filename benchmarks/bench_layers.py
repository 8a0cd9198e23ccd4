"""Forward+backward time of each model-parallel layer against the plain ``torch.nn`` layer.

At tp = 1 (a real one-rank gloo group) the layers must cost at most 3% more than ``nn.Linear`` /
``nn.Embedding``: size-1 groups are pure identity. At tp = 2 and 4 (spawned gloo ranks sharing
the machine's cores, so for reference only) each rank times its shard with the collectives, and
the plain full-size layer in the same process.

Sizes: hidden 1024, tokens 8 x 128, vocabulary 8192, fp32 on CPU by default. The issue asks for
4096 x 4096 with 32 x 128 tokens; on 2 CPU cores one such fwd+bwd takes seconds, so the default
is smaller (``--hidden 4096 --batch 32`` runs the full size). Each figure is the median of
``--repeats`` runs, the plain layer and the parallel layer alternating within each repeat; the
ratio is parallel / plain measured in the same run.

Prints a table (rich if installed) and writes ``benchmarks/results/bench_layers.json``.

Run: ``python benchmarks/bench_layers.py`` (``--quick``: hidden 512, fewer repeats, tp 1 and 2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from topology_torch.layers import (
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
)

LAYERS = (
    "ColumnParallelLinear",
    "RowParallelLinear",
    "ParallelEmbedding",
    "VocabParallelEmbedding",
)


def _build(name: str, cfg: dict[str, int], group: Any) -> tuple[nn.Module, nn.Module, Any]:
    """(parallel layer, plain layer, input maker) for ``name``."""
    h, vocab = cfg["hidden"], cfg["vocab"]
    tokens = (cfg["batch"], cfg["seq"])
    if name in ("ColumnParallelLinear", "RowParallelLinear"):
        cls = ColumnParallelLinear if name == "ColumnParallelLinear" else RowParallelLinear
        layer: nn.Module = cls(h, h, group=group)
        plain: nn.Module = nn.Linear(h, h)
        x = torch.randn(*tokens, h)

        def make() -> torch.Tensor:
            return x.detach().requires_grad_()

        return layer, plain, make
    cls_e = ParallelEmbedding if name == "ParallelEmbedding" else VocabParallelEmbedding
    ids = torch.randint(0, vocab, tokens)
    return cls_e(vocab, h, group=group), nn.Embedding(vocab, h), lambda: ids


def _step(module: nn.Module, make: Callable[[], torch.Tensor]) -> float:
    for param in module.parameters():
        param.grad = None
    x = make()
    start = time.perf_counter()
    y = module(x)
    y.backward(torch.ones_like(y))
    return time.perf_counter() - start


def measure(name: str, cfg: dict[str, int], group: Any, repeats: int) -> dict[str, Any]:
    """Median fwd+bwd seconds of the parallel and the plain layer, alternating."""
    torch.manual_seed(0)
    layer, plain, make = _build(name, cfg, group)
    for _ in range(2):  # warm-up
        _step(layer, make)
        _step(plain, make)
    ours, base = [], []
    for i in range(repeats):
        pair = [(layer, ours), (plain, base)]
        for module, times in pair if i % 2 else pair[::-1]:
            times.append(_step(module, make))
    med, med_plain = statistics.median(ours), statistics.median(base)
    return {
        "layer": name,
        "median_s": med,
        "plain_median_s": med_plain,
        "ratio": med / med_plain,
        "runs": repeats,
    }


def _world(
    rank: int,
    world_size: int,
    init_file: str,
    cfg: dict[str, int],
    repeats: int,
    out: str,
    threads: int,
) -> None:
    os.environ["OMP_NUM_THREADS"] = str(threads)
    torch.set_num_threads(threads)
    dist.init_process_group(
        "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size
    )
    try:
        group = dist.new_group(list(range(world_size)))
        rows = []
        for name in LAYERS:
            row = measure(name, cfg, group, repeats)
            times = torch.tensor([row["median_s"], row["plain_median_s"]], dtype=torch.float64)
            dist.all_reduce(times, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
            row.update(
                median_s=times[0].item(),
                plain_median_s=times[1].item(),
                ratio=(times[0] / times[1]).item(),
                tp=world_size,
            )
            rows.append(row)
        if rank == 0:
            Path(out).write_text(json.dumps(rows))
    finally:
        dist.destroy_process_group()


def run(tp: int, cfg: dict[str, int], repeats: int, threads: int) -> list[dict[str, Any]]:
    """Measure every layer on a spawned gloo world of ``tp`` ranks (tp = 1 included)."""
    with tempfile.TemporaryDirectory() as folder:
        out = os.path.join(folder, "rows.json")
        mp.spawn(
            _world, args=(tp, os.path.join(folder, "store"), cfg, repeats, out, threads), nprocs=tp
        )
        rows: list[dict[str, Any]] = json.loads(Path(out).read_text())
        return rows


def _print(rows: list[dict[str, Any]]) -> None:
    header = ("layer", "tp", "parallel ms", "plain ms", "ratio")
    lines = [
        (
            r["layer"],
            str(r["tp"]),
            f"{1e3 * r['median_s']:.2f}",
            f"{1e3 * r['plain_median_s']:.2f}",
            f"{r['ratio']:.3f}",
        )
        for r in rows
    ]
    try:
        from rich.console import Console
        from rich.table import Table

        table = Table(*header, title="fwd+bwd, median of runs")
        for line in lines:
            table.add_row(*line)
        Console().print(table)
    except ImportError:
        widths = [max(len(x) for x in col) for col in zip(header, *lines, strict=True)]
        for line in (header, *lines):
            print("  ".join(x.rjust(w) for x, w in zip(line, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="hidden 512, 5 repeats, tp 1 and 2")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results/bench_layers.json"))
    args = parser.parse_args()
    if args.quick:
        args.hidden, args.repeats, args.tp = 512, 5, [1, 2]
    cfg = {"hidden": args.hidden, "batch": args.batch, "seq": args.seq, "vocab": args.vocab}
    cores = os.cpu_count() or 1
    rows = []
    for tp in args.tp:
        rows += run(tp, cfg, args.repeats, threads=max(1, cores // tp))
    _print(rows)
    tp1 = [r for r in rows if r["tp"] == 1]
    meta = {
        "sizes": cfg,
        "dtype": "float32",
        "device": "cpu",
        "repeats": args.repeats,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cores": cores,
        "target": "tp=1 ratio <= 1.03",
        "tp1_max_ratio": max((r["ratio"] for r in tp1), default=None),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
