"""One rank's part of a plan, point to point: the loop :func:`execute` and :func:`execute_refit`
share (private to the package).

The callers say where a piece comes from and where it goes (a shard slice, or boxes of an
engine's tensors); :func:`run` does the rest, in the plan's order: the rank's own copies, then
stage by stage (a relay plan's stage 2 after stage 1, whose pieces it sends on) the sends and
receives posted together (``batch_isend_irecv``), waited for, and each received buffer landed.

>>> from topology import Param, Topology, transfer
>>> import torch
>>> plan = transfer(Topology(1), Topology(1), [Param("w", (2, 2))])
>>> src, dst = torch.ones(2, 2), torch.zeros(2, 2)
>>> run(plan.held(0), (), (), lambda op: src[op.src_slice],
...     lambda op: torch.empty(0), lambda op, piece: dst[op.dst_slice].copy_(piece))
0
>>> dst.sum().item()
4.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from topology import TransferOp

__all__ = ["run"]

Read = Callable[[TransferOp], torch.Tensor]
"""The piece an operation sends, read from its sender's tensors (stage 1: the source shard;
stage 2, a relay copy: where the sender landed it in stage 1)."""
Empty = Callable[[TransferOp], torch.Tensor]
"""A new contiguous buffer of the piece an operation receives (its dtype and device)."""
Land = Callable[[TransferOp, torch.Tensor], object]
"""Write the piece an operation moves where its receiver holds it."""


def run(
    held: Sequence[TransferOp],
    sends: Sequence[TransferOp],
    recvs: Sequence[TransferOp],
    read: Read,
    empty: Empty,
    land: Land,
    group: Any = None,
) -> int:
    """Copy ``held`` (the rank's own pieces), then, stage by stage, send ``sends`` and receive
    ``recvs`` point to point; the number of messages sent and received.

    Every piece of a stage is read and every buffer made before any message of the stage is
    posted, so that a caller's error (a missing tensor) is raised before the rank communicates.
    """
    for op in held:
        land(op, read(op))
    count = 0
    for stage in sorted({op.stage for op in (*sends, *recvs)}):
        p2p, landing = [], []
        for op in sends:
            if op.stage == stage:
                p2p.append(dist.P2POp(dist.isend, read(op).contiguous(), op.dst, group))
        for op in recvs:
            if op.stage == stage:
                buffer = empty(op)
                p2p.append(dist.P2POp(dist.irecv, buffer, op.src, group))
                landing.append((op, buffer))
        if p2p:
            for request in dist.batch_isend_irecv(p2p):
                request.wait()
        for op, buffer in landing:
            land(op, buffer)
        count += len(p2p)
    return count
