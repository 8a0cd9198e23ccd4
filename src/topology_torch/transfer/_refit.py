"""Run a :func:`topology.refit` plan: Megatron's shards into a generation engine's local tensors,
point to point (private; public as ``topology_torch.transfer.execute_refit``).

A refit plan's operations address Megatron's weights; :meth:`topology.Refit.boxes` says where an
operation's rows land in the receiver's engine tensors (``qkv_proj``, ``gate_up_proj``,
``experts.w13_weight``, ...): a piece may fill several boxes (Megatron's fused ``linear_qkv``
rows of one query group land in q, k and v of ``qkv_proj``), each taking the next rows of the
piece along the weight's cut dim, reshaped to the box (a routed expert's box has a leading slot
dim). The engine rank's tensors are allocated from :meth:`topology.Refit.tensors` (zeros: the
padding of a padded vocabulary stays zero) or given by the caller and filled in place. A relay
plan (``refit(..., relay=True)``) runs stage by stage: a relay copies on (stage 2) what it has
landed in its engine tensors in stage 1, read back from the boxes it filled.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

import attrs
import torch

from topology import Refit, TopologyError, TransferOp

from .._args import check_index
from ._p2p import run

__all__ = ["execute_refit"]


def _piece_shape(op: TransferOp) -> tuple[int, ...]:
    """The shape of the piece ``op`` moves: the weight's, its cut dim (and, for a 2-D block,
    dim 0) narrowed to the op's rows."""
    cut = op.param.cut_dim
    shape = [op.stop - op.start if d == cut else n for d, n in enumerate(op.param.shape)]
    if op.rows is not None:
        shape[0] = op.rows[1] - op.rows[0]
    return tuple(shape)


def _boxes(
    plan: Refit, op: TransferOp, tensors: Mapping[str, torch.Tensor]
) -> list[tuple[torch.Tensor, tuple[int, ...]]]:
    """Each box of ``tensors`` that ``op``'s piece fills, as a view, with the shape of the part
    of the piece it holds (the piece's shape, the cut dim narrowed to the box's), in order along
    the cut dim."""
    cut, shape = op.param.cut_dim, _piece_shape(op)
    found = []
    for name, box in plan.boxes(op):
        extents = [stop - start for start, stop in box]
        part = list(shape)
        part[cut] = extents[len(extents) - len(shape) + cut]
        found.append((tensors[name][tuple(slice(a, z) for a, z in box)], tuple(part)))
    return found


def _land(
    plan: Refit, op: TransferOp, piece: torch.Tensor, into: Mapping[str, torch.Tensor]
) -> None:
    """Copy ``piece`` (what ``op`` moves) into the boxes of ``into`` it fills."""
    cut, offset = op.param.cut_dim, 0
    for view, part in _boxes(plan, op, into):
        view.copy_(piece.narrow(cut, offset, part[cut]).reshape(view.shape))
        offset += part[cut]


def _relayed(plan: Refit, op: TransferOp, into: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The piece a relay copy (stage 2) sends, read back from the boxes of its sender's engine
    tensors where stage 1 landed it: ``op`` with the sender's place (``src_start``, the rows'
    local start) as the receiving one names those boxes."""
    rows = None if op.rows is None else (*op.rows[:3], op.rows[2])
    landed = attrs.evolve(op, dst=op.src, dst_start=op.src_start, rows=rows)
    parts = [view.reshape(part) for view, part in _boxes(plan, landed, into)]
    return torch.cat(parts, dim=op.param.cut_dim)


def _targets(
    plan: Refit,
    rank: int,
    into: MutableMapping[str, torch.Tensor] | None,
    dtype: torch.dtype,
    device: torch.device | str | None,
) -> MutableMapping[str, torch.Tensor]:
    """The rank's engine tensors: ``into``, checked against :meth:`Refit.tensors`, or new zeros."""
    first, last = plan.rank_offset, plan.rank_offset + plan.engine.world_size
    shapes = plan.tensors(rank) if first <= rank < last else {}
    if into is None:
        return {n: torch.zeros(s, dtype=dtype, device=device) for n, s in shapes.items()}
    if not isinstance(into, MutableMapping):
        raise TopologyError(
            f"into must be a mapping of engine tensor name to tensor, got {type(into).__name__}; "
            "pass the engine's tensors by name, or None to allocate them"
        )
    for name, shape in shapes.items():
        if name not in into:
            raise TopologyError(
                f"rank {rank}'s engine tensors lack {name!r} ({shape}) that {plan.engine} "
                "gives it; pass every tensor of Refit.tensors(rank)"
            )
        if tuple(into[name].shape) != shape:
            raise TopologyError(
                f"rank {rank}'s {name!r} has shape {tuple(into[name].shape)} but {plan.engine} "
                f"gives it {shape}; pass the engine's local tensors at its layout"
            )
    return into


def execute_refit(
    plan: Refit,
    rank: int,
    src: Mapping[str, torch.Tensor],
    into: MutableMapping[str, torch.Tensor] | None = None,
    *,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str | None = None,
    group: Any = None,
) -> MutableMapping[str, torch.Tensor]:
    """Do ``rank``'s part of a refit: send its Megatron shards, receive its engine tensors.

    SPMD: call on every rank of the plan (the trainer's and the engine's, colocated or apart),
    with the same plan, in the same order as any other collective. A trainer rank sends the
    slices of ``src`` the plan gives it (read, never written); an engine rank receives each
    piece and writes it where the engine's rules put it (:meth:`topology.Refit.boxes`); a rank
    on both sides copies what it holds itself. Nothing is gathered whole. A relay plan's
    stage-2 copies run after every stage-1 message, each sent from the boxes of the engine
    tensors where its relay landed the piece.

    Args:
        plan: the plan (from :func:`topology.refit`).
        rank: this process's global rank (the plan's rank numbers).
        src: this rank's Megatron shards by the plan's weight names
            (:func:`megatron_shards` reads them from a Megatron-core model); ``{}`` on a rank
            outside the training layout.
        into: this rank's engine tensors by engine name, filled in place (shapes as
            :meth:`topology.Refit.tensors` gives, padding included; elements no weight lands on
            are not written); ``None``: new zero tensors of ``dtype`` on ``device``.
        dtype, device: of the tensors allocated when ``into`` is ``None`` (a received piece
            takes its engine tensor's dtype: the sender's must match it).
        group: the process group the plan's ranks are global ranks of (default: the world).

    Returns:
        The engine tensors (``into`` itself when given; ``{}`` on a rank outside the engine),
        name -> local tensor, in the order of Megatron's weights: what an engine's
        ``load_weights`` or direct copy into its parameters takes.

    Raises:
        TopologyError: a shard the plan sends missing from ``src``, an ``into`` lacking a tensor
            of the rank or holding one of another shape.
    """
    if not isinstance(plan, Refit):
        raise TopologyError(
            f"plan must be a topology.Refit, got {type(plan).__name__}; give what "
            "topology.refit returned (topology_torch.transfer.execute runs a Transfer)"
        )
    check_index("rank", rank)
    targets = _targets(plan, rank, into, dtype, device)

    def read(op: TransferOp) -> torch.Tensor:
        if op.stage != 1:  # a relay copy: from the engine tensors stage 1 filled
            return _relayed(plan, op, targets)
        if op.param.name not in src:
            raise TopologyError(
                f"rank {rank} has no source shard of {op.param.name!r} but the plan sends it; "
                "pass every shard the rank holds (megatron_shards)"
            )
        return src[op.param.name][op.src_slice]

    def empty(op: TransferOp) -> torch.Tensor:
        like = targets[plan.boxes(op)[0][0]]
        return torch.empty(_piece_shape(op), dtype=like.dtype, device=like.device)

    def land(op: TransferOp, piece: torch.Tensor) -> None:
        _land(plan, op, piece, targets)

    run(plan.held(rank), plan.sends(rank), plan.recvs(rank), read, empty, land, group)
    return targets
