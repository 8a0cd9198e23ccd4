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
import torch.distributed as dist

from topology import TopologyError, Transfer

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

    for op in plan.held(rank):
        own = tensor(src, op.param.name, "src")[op.src_slice]
        tensor(dst, op.param.name, "dst")[op.dst_slice].copy_(own)
    sends, recvs, count = plan.sends(rank), plan.recvs(rank), 0
    for stage in sorted({op.stage for op in sends + recvs}):
        # stage 2 (a relay plan's copies) sends from dst what stage 1 has landed there
        sent_from, side = (src, "src") if stage == 1 else (dst, "dst")
        p2p, landing = [], []
        for op in sends:
            if op.stage == stage:
                piece = tensor(sent_from, op.param.name, side)[op.src_slice].contiguous()
                p2p.append(dist.P2POp(dist.isend, piece, op.dst, group))
        for op in recvs:
            if op.stage == stage:
                target = tensor(dst, op.param.name, "dst")[op.dst_slice]
                buffer = torch.empty_like(target, memory_format=torch.contiguous_format)
                p2p.append(dist.P2POp(dist.irecv, buffer, op.src, group))
                landing.append((target, buffer))
        if p2p:
            for request in dist.batch_isend_irecv(p2p):
                request.wait()
        for target, buffer in landing:
            target.copy_(buffer)
        count += len(p2p)
    return count
