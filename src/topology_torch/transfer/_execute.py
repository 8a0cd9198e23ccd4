"""Run a :func:`topology.transfer` plan: move weight shards between two layouts, point to point
(private; public as ``topology_torch.transfer.execute``).

Each rank sends the slices of its source shards the plan gives it, receives the slices of its
destination shards, and copies what it already holds (colocated layouts); nothing is gathered
whole. SPMD contract: call on every rank of the plan (both layouts), with the same plan, in the
same order as any other collective. A relay plan (``transfer(..., relay=True)``) runs stage by
stage: a relay copies on (stage 2) what it has received in stage 1.

>>> from topology import Param, Topology, transfer
>>> plan = transfer(Topology(1), Topology(1), [Param("w", (2, 2))])
>>> import torch
>>> src, dst = {"w": torch.ones(2, 2)}, {"w": torch.zeros(2, 2)}
>>> execute(plan, 0, src, dst)
0
>>> dst["w"].sum().item()
4.0
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from topology import TopologyError, Transfer, TransferOp

from ._p2p import run

__all__ = ["execute"]


def execute(
    plan: Transfer,
    rank: int,
    src: Mapping[str, torch.Tensor],
    dst: Mapping[str, torch.Tensor],
    *,
    group: Any = None,
) -> int:
    """Do ``rank``'s part of ``plan``: ``dst[name]`` (this rank's destination shards, local
    order) receives its slices; ``src[name]`` (its source shards) sends and copies its own.

    Args:
        plan: the plan (from :func:`topology.transfer`).
        rank: this process's global rank (the plan's rank numbers).
        src, dst: this rank's shards by weight name (a rank outside a layout passes ``{}``).
        group: the process group the plan's ranks are global ranks of (default: the world).

    Returns:
        The number of messages this rank sent and received.

    Raises:
        TopologyError: a shard the plan needs is missing from ``src`` or ``dst``.
    """

    def tensor(table: Mapping[str, torch.Tensor], name: str, side: str) -> torch.Tensor:
        if name not in table:
            raise TopologyError(
                f"rank {rank} has no {side} shard of {name!r} but the plan needs it; pass every "
                f"shard the rank holds in {side}"
            )
        return table[name]

    def read(op: TransferOp) -> torch.Tensor:
        # stage 2 (a relay plan's copies) sends from dst what stage 1 has landed there
        table, side = (src, "src") if op.stage == 1 else (dst, "dst")
        return tensor(table, op.param.name, side)[op.src_slice]

    def empty(op: TransferOp) -> torch.Tensor:
        target = tensor(dst, op.param.name, "dst")[op.dst_slice]
        return torch.empty_like(target, memory_format=torch.contiguous_format)

    def land(op: TransferOp, piece: torch.Tensor) -> None:
        tensor(dst, op.param.name, "dst")[op.dst_slice].copy_(piece)

    return run(plan.held(rank), plan.sends(rank), plan.recvs(rank), read, empty, land, group)
