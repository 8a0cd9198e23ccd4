"""Peak device memory of building a parallel layer, over its shard: before and after the fix.

Before, every rank drew the full fp32 master on the layer's device and sliced it (17x a bf16
shard at tp 8); now the master is drawn on the CPU and only the cast shard reaches the device.
Without a GPU, ``meta`` stands in for the device (as in ``tests/torch/test_layer_memory.py``):
the layer is built on ``meta`` with the draw device set to the CPU (the path an accelerator
takes: the test's ``peak_ratio``, which switches it), and ``DeviceBytes`` counts the bytes live
on ``meta``; "before" replays the old code
(master on the device, slice, copy) on ``meta``. Ranks come from a ``fake`` world. The shapes
are the issue's two layers divided by 16 in each dim (the ratio does not depend on the size);
``scripts/gpu_check.py`` measures the full sizes with the CUDA allocator.

Run: ``python benchmarks/bench_layer_memory.py`` (writes ``benchmarks/results/
bench_layer_memory.json``).
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root, for tests/
from _timing import write_result
from tests.torch.device_bytes import DeviceBytes
from tests.torch.test_layer_memory import on_cpu, peak_ratio

from topology_torch.layers import ColumnParallelLinear, VocabParallelEmbedding

SCALE = 16
LAYERS: dict[str, tuple[Callable[..., torch.nn.Module], tuple[int, int], bool]] = {
    # name: (build, full (out, in) weight, has a bias); both cut the out dim (rows)
    f"VocabParallelEmbedding(128256, 8192) / {SCALE}": (
        lambda **kw: VocabParallelEmbedding(128256 // SCALE, 8192 // SCALE, **kw),
        (128256 // SCALE, 8192 // SCALE),
        False,
    ),
    f"ColumnParallelLinear(8192, 28672) / {SCALE}": (
        lambda **kw: ColumnParallelLinear(8192 // SCALE, 28672 // SCALE, **kw),
        (28672 // SCALE, 8192 // SCALE),
        True,
    ),
}


def shard_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def before(full: tuple[int, int], bias: bool, tp: int) -> float:
    """The old code on ``meta``: the fp32 master on the layer's device, rank 0's rows copied."""
    part = full[0] // tp
    with DeviceBytes("meta") as seen:
        weight = torch.empty(part, full[1], dtype=torch.bfloat16, device="meta")
        made = [weight] + ([torch.zeros(part, dtype=torch.bfloat16, device="meta")] * bias)
        master = torch.empty(full, dtype=torch.float32, device="meta")
        torch.nn.init.xavier_normal_(master)
        weight.copy_(master.narrow(0, 0, part))
        del master
    return float(seen.peak / shard_bytes(made))


def after(build: Callable[..., torch.nn.Module]) -> float:
    """The layer now, on ``meta`` with the master drawn on the CPU (an accelerator's path)."""
    return peak_ratio(build, on_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/bench_layer_memory.json")
    args = parser.parse_args()
    rows = []
    for tp in (2, 8):
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
        try:
            for name, (build, full, bias) in LAYERS.items():
                rows.append(
                    {
                        "layer": name,
                        "tp": tp,
                        "before": before(full, bias, tp),
                        "after": after(build),
                    }
                )
        finally:
            dist.destroy_process_group()
    print(f"{'layer (bf16, rank 0)':44} {'tp':>3} {'before':>8} {'after':>8}")
    for row in rows:
        print(f"{row['layer']:44} {row['tp']:>3} {row['before']:>7.2f}x {row['after']:>7.2f}x")
    write_result(
        args.out,
        {"torch": torch.__version__, "machine": platform.machine(), "peak_over_shard": rows},
    )


if __name__ == "__main__":
    main()
