"""Grow back to a larger layout in the job: survivors keep their processes and weights, new
processes join, every rank lacking a part of its shard pulls it from the holders (private).

torch cannot add processes to a default group, so every member of the grown layout (survivors
and joiners) makes a new one on a store all of them reach, under a prefix of the growth's
``generation``: a survivor first destroys its groups and its old default group (which still
names the ranks that left), then each member takes its rank in the new layout, the default
group is made with :func:`torch.distributed.init_process_group` and the layout's groups with
:meth:`~topology_torch.ProcessGroups.create`. The weights move point to point on the new
default group: for each :class:`topology.Pull`, the holder sends piece ``piece`` of
``pieces`` of each of its local tensors of that part (flattened, split as
:func:`torch.tensor_split` splits) and the receiver receives it into the same piece of its
own; every rank posts its sends and receives in the plan's order, so each pair's messages
match in order, and all of them at once (``batch_isend_irecv``), so every holder sends to
its receivers in parallel.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from topology import Growth, TopologyError

from .._args import check_index
from .._process_groups import ProcessGroups

__all__ = ["grow"]

_PREFIX = "rank-topology/grow"


Tensors = Callable[[ProcessGroups], Mapping[str, Sequence[torch.Tensor]]]
"""Called with the new groups: this rank's local tensors per part."""


def _check(
    groups: object, plan: object, joining: object, tensors: object
) -> tuple[Growth, int, int | None]:
    """Raise ``TopologyError`` for a misuse; this member's new rank and old rank (None for a
    joiner)."""
    if not isinstance(plan, Growth):
        raise TopologyError(
            f"plan must be a topology.Growth, got {type(plan).__name__}; compute it with "
            "topology.grow(groups.topology, original)"
        )
    if not callable(tensors):
        raise TopologyError(
            "tensors must be a function of the new groups returning this rank's local tensors "
            f"per part ({{'dense': [...], 'expert': [...]}}), got {type(tensors).__name__}"
        )
    if groups is None:
        if joining is None:
            raise TopologyError(
                "a joining process passes joining=j (its place in plan.joining), a survivor "
                "its groups"
            )
        j = check_index("joining", joining, at_most=len(plan.joining) - 1)
        return plan, plan.joining[j], None
    if not isinstance(groups, ProcessGroups):
        raise TopologyError(
            f"groups must be the ProcessGroups the job trains with, got {type(groups).__name__}"
        )
    if joining is not None:
        raise TopologyError("a survivor passes its groups, not joining=; a joiner passes None")
    if groups.topology != plan.old:
        raise TopologyError(
            f"the growth starts from {plan.old} but these groups realise {groups.topology}; "
            "compute it with topology.grow(groups.topology, ...)"
        )
    old = groups.global_rank
    return plan, plan.rank_of(old), old


def _pieces(tensors: Sequence[torch.Tensor], piece: int, pieces: int) -> list[torch.Tensor]:
    """Piece ``piece`` of ``pieces`` of each tensor, flattened: views that share its storage."""
    return [torch.tensor_split(t.detach().view(-1), pieces)[piece] for t in tensors]


def grow(
    groups: ProcessGroups | None,
    plan: Growth,
    *,
    store: Any,
    generation: int,
    tensors: Tensors,
    joining: int | None = None,
    backend: str | None = None,
    timeout: timedelta | None = None,
) -> ProcessGroups:
    """This member's process groups of ``plan.new``, with its shard in ``tensors``.

    SPMD contract: call on every member of the grown layout with equal ``plan``,
    ``generation`` and ``store`` (one all of them reach, e.g. a ``TCPStore`` of the job): on a
    survivor with its ``groups`` (consumed), on a new process with ``groups=None`` and
    ``joining=j``, its place in ``plan.joining``. ``tensors`` is called with the new groups
    (the old ones are gone: a survivor rebuilds its layers on the new groups and loads its own
    weights into them, a joiner builds fresh ones) and returns a mapping of each part
    (``"dense"``, ``"expert"``, see :class:`topology.Pull`) to this rank's local tensors of it
    (contiguous, in an order and of shapes equal on every holder of one shard: the model's
    parameters of that part); a part it leaves out moves nothing. The new default group uses
    ``backend`` (default: NCCL with CUDA, else gloo) and ``timeout``; its groups, the same
    ``timeout``.

    Returns:
        The new layout's groups; the received pieces are in ``tensors``.

    Raises:
        TopologyError: a misuse (the plan does not start from ``groups.topology``, a joiner
            without ``joining``, ``tensors`` not callable, or returning parts other than
            ``"dense"`` and ``"expert"``).

    >>> def weights(new):  # doctest: +SKIP
    ...     rebuilt = build_model(new)  # its layers on the new groups
    ...     rebuilt.load_state_dict(model.state_dict())  # a survivor's own weights
    ...     return {"dense": list(rebuilt.parameters())}
    >>> groups = grow(groups, plan, store=store, generation=0, tensors=weights)  # doctest: +SKIP
    """
    plan, rank, old = _check(groups, plan, joining, tensors)
    check_index("generation", generation)
    if groups is not None:
        groups.destroy()
    if dist.is_initialized():
        dist.destroy_process_group()
    chosen = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    prefixed = dist.PrefixStore(f"{_PREFIX}/{generation}", store)
    world = plan.new.rank_offset + plan.new.world_size
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    dist.init_process_group(chosen, store=prefixed, rank=rank, world_size=world, **extra)
    made = ProcessGroups.create(plan.new, timeout=timeout)
    parts = tensors(made)
    if not isinstance(parts, Mapping) or set(parts) - {"dense", "expert"}:
        raise TopologyError(
            "tensors(groups) must return a mapping of parts ('dense', 'expert') to local "
            f"tensors, got {parts!r:.80}"
        )
    ops = []
    with torch.no_grad():
        for pull in plan.pulls:
            mine = parts.get(pull.part, ())
            if pull.rank == rank:
                source = plan.rank_of(pull.source)
                ops += [
                    dist.P2POp(dist.irecv, piece, source)
                    for piece in _pieces(mine, pull.piece, pull.pieces)
                ]
            if pull.source == old:
                ops += [
                    dist.P2POp(dist.isend, piece, pull.rank)
                    for piece in _pieces(mine, pull.piece, pull.pieces)
                ]
        if ops:
            for request in dist.batch_isend_irecv(ops):
                request.wait()
    return made
