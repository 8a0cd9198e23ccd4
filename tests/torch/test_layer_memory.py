"""Building a parallel layer costs its shard on the layer's device, never the full master.

The rule (``layers/_init.py``): every master is drawn in fp32 on the CPU and only this rank's
slice, cast on the CPU, reaches the layer's device. CI has no accelerator, so ``meta`` stands
in for it: the layer is built on ``meta`` with the draw device switched from ``meta`` (no
values) to the CPU, i.e. exactly the path an accelerator takes, and :class:`DeviceBytes`
counts the bytes live on ``meta`` during construction. The old rule (draw on the layer's
device) is measured the same way, so the counter is shown to see a master when there is one.
Ranks come from a ``fake`` world (construction moves no data).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from torch import nn

from tests.torch.device_bytes import DeviceBytes
from tests.torch.world import fake_world
from topology_torch.layers import (
    INIT_TYPES,
    ColumnParallelLinear,
    ParallelEmbedding,
    RowParallelLinear,
    VocabParallelEmbedding,
    _init,
)

BOUND = 1.25
ROWS, COLS = 64, 48  # small: the ratio is what matters, and it does not depend on the size


def _layers() -> dict[str, Callable[..., nn.Module]]:
    return {
        "column": lambda **kw: ColumnParallelLinear(COLS, ROWS, **kw),
        "row": lambda **kw: RowParallelLinear(ROWS, COLS, **kw),
        "vocab": lambda **kw: VocabParallelEmbedding(ROWS, COLS, **kw),
        "embedding": lambda **kw: ParallelEmbedding(ROWS, COLS, **kw),
    }


def drawn_on(rule: Callable[[torch.Tensor], torch.device]) -> Any:
    """Replace the draw-device rule of ``layers/_init.py`` while the block runs."""
    return mock.patch.object(_init, "draw_device", rule)


def peak_ratio(
    build: Callable[..., nn.Module], rule: Callable[[torch.Tensor], torch.device], **kw: Any
) -> float:
    """Peak bytes on ``meta`` while building a bf16 layer on ``meta``, over its parameters."""
    with drawn_on(rule), DeviceBytes("meta") as seen:
        layer = build(device="meta", dtype=torch.bfloat16, group=dist.group.WORLD, **kw)
    shard = sum(p.numel() * p.element_size() for p in layer.parameters())
    return float(seen.peak / shard)


def on_cpu(like: torch.Tensor) -> torch.device:
    """The accelerator's rule: draw on the CPU."""
    return torch.device("cpu")


def on_the_layer(like: torch.Tensor) -> torch.device:
    """The old rule: draw on the layer's own device."""
    return like.device


@pytest.mark.parametrize("name", ["column", "row", "vocab", "embedding"])
@pytest.mark.parametrize(("tp", "rank"), [(2, 0), (2, 1), (8, 0), (8, 7)])
def test_building_a_layer_peaks_at_its_shard(name: str, tp: int, rank: int) -> None:
    """At tp 2 and 8 every layer's construction peaks at <= 1.25x its shard on its device."""
    with fake_world(tp, rank):
        ratio = peak_ratio(_layers()[name], on_cpu)
    assert ratio <= BOUND, f"{name} at tp {tp}: peak {ratio:.2f}x the shard"


@pytest.mark.parametrize("init_type", INIT_TYPES)
def test_every_init_type_peaks_at_the_shard(init_type: str) -> None:
    """Every init type (the biased bias and strided shards too) peaks at <= 1.25x the shard."""
    with fake_world(8, 3):
        for name in ("column", "row"):
            ratio = peak_ratio(_layers()[name], on_cpu, init_type=init_type, stride=2)
            assert ratio <= BOUND, f"{name} {init_type}: peak {ratio:.2f}x the shard"


def test_lora_adapters_peak_at_their_shard() -> None:
    """Layers with a LoRA adapter also peak at <= 1.25x their parameters."""
    with fake_world(8, 5):
        for name in ("column", "row"):
            assert peak_ratio(_layers()[name], on_cpu, lora_rank=4) <= BOUND


@pytest.mark.parametrize("name", ["column", "row", "vocab", "embedding"])
def test_the_counter_sees_a_master_drawn_on_the_layers_device(name: str) -> None:
    """Control: under the old rule the same count is 1 + 16 = 17x (fp32 master of 8 bf16 shards)."""
    with fake_world(8, 0):
        assert peak_ratio(_layers()[name], on_the_layer) >= 16


def test_a_meta_layer_draws_nothing() -> None:
    """On meta no master gets values: the CPU generator is left as it was."""
    torch.manual_seed(3)
    state = torch.get_rng_state()
    with fake_world(2, 1):
        for build in _layers().values():
            build(device="meta", init_type="orthogonal", group=dist.group.WORLD)
    assert torch.equal(torch.get_rng_state(), state)


def test_the_shards_are_slices_of_the_master_drawn_on_the_cpu() -> None:
    """Seeded equally, rank r's weight is rows r of the fp32 CPU master, cast to the dtype."""
    for rank in range(4):
        with fake_world(4, rank):
            torch.manual_seed(9)
            layer = ColumnParallelLinear(COLS, ROWS, dtype=torch.bfloat16, group=dist.group.WORLD)
        torch.manual_seed(9)
        master = nn.init.xavier_normal_(torch.empty(ROWS, COLS))
        part = ROWS // 4
        want = master[rank * part : (rank + 1) * part].to(torch.bfloat16)
        assert torch.equal(layer.weight.detach(), want)
