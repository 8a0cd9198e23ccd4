"""Grow back to a larger layout without restarting the survivors (private).

torch cannot add processes to a default group, so every process of the grown world (the
survivors, which keep their weights in memory, and the joining ones, which have none) forms a
new one. Algorithm, on every process (SPMD; survivors pass their groups, joining processes None):

1. **Check** locally, before anything is consumed: ``plan`` starts from ``groups.topology``; the
   tensors name exactly the growth's parts, each a list of tensors; no rank both sends and
   receives one part (one list of tensors cannot hold its old and its new shard).
2. **Leave** (survivors): destroy the groups, then the old default group (it holds dead ranks).
3. **Form the new world**: ``init_process_group`` on ``PrefixStore("rank-topology/grow/<g>/world",
   store)``, rank = the growth's new rank: a survivor's ``plan.rank_of(its layout rank)``, a
   joining process's the next of ``plan.joining`` (a ticket counted on ``store``: join order).
4. **Groups**: ``ProcessGroups.create(plan.new, ...)`` on the new default group (every
   communicator is new: they all hang off the new default group); ``tensors``, when a function,
   is called with them (layers that hold a group are built on the new ones).
5. **Agree** before any byte moves: every rank publishes its tensors' shapes and dtypes on the new
   default store and compares those of the holders it pulls from; one all-gather (see
   ``topology_torch._agreement``) then makes every rank raise the same ``TopologyError`` (the new
   groups released) if a rank found a problem or computed another growth.
6. **Move**: for each :class:`~topology.Pull` the source sends piece ``piece`` of ``pieces``
   (``torch.tensor_split`` of each tensor of the part, flattened) and the receiver receives it in
   place; each rank posts all its sends and receives in one ``batch_isend_irecv`` on the new
   default group, so a holder serves all its receivers at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from topology import Growth, TopologyError

from .._agreement import Proposal, agree, arrival_deadline, fingerprint
from .._args import check_index
from .._process_groups import ProcessGroups, restart_counts

__all__ = ["grow"]

Parts = Mapping[str, Sequence[torch.Tensor]]
"""A rank's tensors per part (``"dense"``, ``"expert"``), each a list in one order everywhere."""
_PREFIX = "rank-topology/grow"
_WHAT = "recovery.grow"


def _parts(plan: Growth) -> tuple[str, ...]:
    """The parts every rank names in ``tensors``, as :data:`topology.Growth.pulls` names them:
    the dense weights and the expert grid's (every Topology has one; ``[]`` without experts)."""
    return ("dense",) if plan.new.expert is None else ("dense", "expert")


def _check_plan(groups: object, plan: object, store: object) -> Growth:
    if not isinstance(plan, Growth):
        raise TopologyError(
            f"plan must be a topology.Growth, got {type(plan).__name__}; compute it with "
            "topology.grow(layout_now, original_layout)"
        )
    if not isinstance(store, c10d.Store):
        raise TopologyError(
            f"store must be a torch.distributed.Store every process of the grown world reaches "
            f"(the job's TCPStore), got {type(store).__name__}"
        )
    if groups is None:
        if dist.is_available() and dist.is_initialized():
            raise TopologyError(
                "groups is None but this process has a default group: a survivor passes the "
                "ProcessGroups it trains with; a joining process has none"
            )
        return plan
    if not isinstance(groups, ProcessGroups):
        raise TopologyError(
            f"groups must be the ProcessGroups the job trains with (None on a joining process), "
            f"got {type(groups).__name__}"
        )
    if groups.topology != plan.old:
        raise TopologyError(
            f"the growth starts from {plan.old} but these groups realise {groups.topology}; "
            "compute it with topology.grow(groups.topology, target)"
        )
    return plan


def _check_tensors(tensors: object, parts: tuple[str, ...]) -> dict[str, tuple[torch.Tensor, ...]]:
    if not isinstance(tensors, Mapping):
        raise TopologyError(
            f"tensors must map each part ({', '.join(parts)}) to this rank's tensors of it, got "
            f"{type(tensors).__name__}; e.g. {{'dense': list(model.parameters()), 'expert': []}}"
        )
    if sorted(map(str, tensors)) != sorted(parts):
        raise TopologyError(
            f"tensors names the parts {sorted(map(str, tensors))} but this growth moves "
            f"{list(parts)}; give exactly those, each a list of this rank's tensors "
            '("expert": [] for a model without experts)'
        )
    checked = {}
    for part in parts:
        items = tensors[part]
        if isinstance(items, torch.Tensor | str) or not isinstance(items, Sequence):
            raise TopologyError(
                f"tensors[{part!r}] must be a list of tensors (in one order on every rank), "
                f"got {type(items).__name__}"
            )
        for i, item in enumerate(items):
            if not isinstance(item, torch.Tensor):
                raise TopologyError(
                    f"tensors[{part!r}][{i}] must be a torch.Tensor, got {type(item).__name__}"
                )
        checked[part] = tuple(items)
    return checked


def _made(
    make: Any, grown: ProcessGroups, parts: tuple[str, ...]
) -> tuple[dict[str, tuple[torch.Tensor, ...]], str | None]:
    """The tensors ``make(grown)`` returns, or this rank's problem with them (for step 5:
    every rank raises it)."""
    try:
        return _check_tensors(make(grown), parts), None
    except TopologyError as error:
        return {}, f"the tensors function: {error}"
    except Exception as error:  # the caller's code: reported on every rank, not only here
        return {}, f"the tensors function raised {type(error).__name__}: {error}"


def _check_exchanges(plan: Growth) -> None:
    """Refuse a growth in which a rank both sends and receives one part."""
    sends = {(plan.rank_of(p.source), p.part) for p in plan.pulls}
    both = sorted({(p.rank, p.part) for p in plan.pulls if (p.rank, p.part) in sends})
    if both:
        rank, part = both[0]
        raise TopologyError(
            f"new rank {rank} both sends and receives its {part} part in this growth, which one "
            "list of tensors cannot hold; grow to another target or relaunch from a checkpoint"
        )


def _leave(groups: ProcessGroups) -> None:
    """Release a survivor's groups and its old default group (torch cannot add processes)."""
    groups.destroy()
    if dist.is_initialized():
        dist.destroy_process_group()


def _ticket(plan: Growth, space: Any) -> int:
    """A joining process's new rank: the next of ``plan.joining``, in the order they arrive."""
    index = int(space.add("joined", 1)) - 1
    if index >= len(plan.joining):
        raise TopologyError(
            f"this is joining process {index + 1} but the growth has {len(plan.joining)} "
            f"joining ranks ({plan.old.world_size} survivors, {plan.new.world_size} ranks in "
            f"{plan.new}); start exactly {len(plan.joining)} new processes"
        )
    return plan.joining[index]


def _form(
    rank: int,
    plan: Growth,
    space: Any,
    backend: str,
    deadline: timedelta,
    device_id: torch.device | None,
) -> None:
    """Initialise the grown world's default group as rank ``rank``; its timeout (which bounds
    the wait for the others to arrive, and the moves) is ``deadline``."""
    options: dict[str, Any] = {} if device_id is None else {"device_id": device_id}
    try:
        dist.init_process_group(
            backend,
            store=c10d.PrefixStore("world", space),
            rank=rank,
            world_size=plan.new.world_size,
            timeout=deadline,
            **options,
        )
    except RuntimeError as error:  # the store's timeout: a process never came
        raise TopologyError(
            f"the grown world of {plan.new.world_size} ranks did not form within {deadline} on "
            f"rank {rank}: every survivor and {len(plan.joining)} joining processes must call "
            f"grow with this plan and generation, or raise arrival_timeout "
            f"({type(error).__name__}: {error})"
        ) from error
    restart_counts()  # the new default store is fresh: every rank counts its calls from 0


def _layout(tensors: Sequence[torch.Tensor]) -> list[list[Any]]:
    return [[list(t.shape), str(t.dtype)] for t in tensors]


def _mismatch(plan: Growth, me: int, tensors: Mapping[str, Sequence[torch.Tensor]]) -> str | None:
    """The first difference between this rank's tensors and a source's, or None (step 5)."""
    store = c10d._get_default_store()
    store.set(f"{_PREFIX}/tensors/{me}", json.dumps({p: _layout(t) for p, t in tensors.items()}))
    for pull in plan.pulls_of(me):
        source = plan.rank_of(pull.source)
        store.wait([f"{_PREFIX}/tensors/{source}"])
        theirs = json.loads(store.get(f"{_PREFIX}/tensors/{source}"))[pull.part]
        mine = _layout(tensors[pull.part])
        if len(mine) != len(theirs):
            return (
                f"new rank {me} gives {len(mine)} {pull.part} tensors but its source, new rank "
                f"{source}, gives {len(theirs)}; give each part's tensors in one order everywhere"
            )
        for i, (have, want) in enumerate(zip(mine, theirs, strict=True)):
            if have != want:
                return (
                    f"{pull.part} tensor {i} of new rank {me} is {have[0]} {have[1]} but its "
                    f"source, new rank {source}, holds {want[0]} {want[1]}; shape each rank's "
                    "tensors for its shard of the new layout"
                )
    return None


def _agree(plan: Growth, generation: int, problem: str | None, deadline: timedelta) -> None:
    """Every rank raises the same ``TopologyError`` unless all hold one growth and none found a
    problem."""
    pulls = [attrs.astuple(pull) for pull in plan.pulls]
    facts = {
        "growth": f"{plan.old} -> {plan.new}",
        "plan": str(fingerprint([plan.mapping, plan.joining, pulls])),
    }
    mine = Proposal(fingerprint(facts), facts, problem)
    agree(f"grow/{generation}", mine, deadline, _WHAT, mismatch="computed another growth than")


def _move(
    plan: Growth, me: int, old: int | None, tensors: Mapping[str, Sequence[torch.Tensor]]
) -> None:
    """Every pull this rank takes part in, in one batch (step 6)."""
    ops, copies = [], []
    op: Callable[..., Any]
    for pull in plan.pulls:
        if pull.rank == me:
            op, peer = dist.irecv, plan.rank_of(pull.source)
        elif pull.source == old:
            op, peer = dist.isend, pull.rank
        else:
            continue
        for tensor in tensors[pull.part]:
            flat = tensor.detach().reshape(-1)  # a view of a contiguous tensor, else a copy
            piece = torch.tensor_split(flat, pull.pieces)[pull.piece]
            if piece.numel() == 0:
                continue
            ops.append(dist.P2POp(op, piece, peer))
            if op is dist.irecv and not tensor.is_contiguous():
                copies.append((tensor, flat))
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    with torch.no_grad():
        for tensor, flat in copies:
            tensor.copy_(flat.view(tensor.shape))


def grow(
    groups: ProcessGroups | None,
    plan: Growth,
    tensors: Parts | Callable[[ProcessGroups], Parts],
    *,
    generation: int,
    store: Any,
    backend: str,
    device_id: torch.device | None = None,
    arrival_timeout: timedelta | None = None,
    **create: Any,
) -> ProcessGroups:
    """This process's groups of ``plan.new``, with every rank's weights in place.

    SPMD contract: call on every survivor (``groups``: the groups it trains with, whose layout
    is ``plan.old``) and on exactly ``len(plan.joining)`` new processes (``groups=None``; they
    need no default group), with equal ``plan`` (``topology.grow(layout, target)``),
    ``generation`` (0 at the first growth of the job, one more each time: it names the store
    keys), ``backend`` and ``create`` keywords. Survivors keep their weights in memory; a joining
    process receives its shard from every data-parallel holder at once (``plan.pulls``).

    The survivors' groups and default group are destroyed first (torch cannot add processes to
    a default group); then all form a new default group of ``plan.new.world_size`` ranks on
    ``store`` (waiting for the joining processes at most ``arrival_timeout``), in which a
    rank's torch rank is its rank in ``plan.new``, and make its groups; only then do weights
    move, so every communicator (and any layer holding one) is new. Joining processes take
    ``plan.joining`` in the order they arrive. ``agree_lost`` meets on the new default store
    by default: its generations start again at 0 after a growth.

    Args:
        groups: the survivor's ProcessGroups (consumed), or None on a joining process.
        plan: the growth, from ``topology.grow(groups.topology, target)``.
        tensors: this rank's tensors per part: ``"dense"`` and ``"expert"`` (the expert
            grid's; ``[]`` for a model without experts; a Grid layout has only ``"dense"``):
            lists in one order on every rank, shaped for the rank's shard of
            ``plan.new`` (equal on all holders of a shard). A survivor's are sent from; a
            joining rank's (any values) are overwritten in place. Parameters, and optimizer
            state sharded like them, go here; device tensors with NCCL. Or a function of the
            new groups that returns them, called once they exist (layers that take a group are
            built on them: a joining process builds its model, a survivor rebuilds its own and
            loads the weights it kept); its problems are raised on every rank.
        generation: which growth this is (0, 1, ...), equal everywhere.
        store: a ``torch.distributed.Store`` every process reaches (the job's ``TCPStore``).
        backend: the new default group's backend (``"nccl"``, ``"gloo"``).
        device_id: the bound device for NCCL (``init_process_group(device_id=...)``).
        arrival_timeout: how long a process waits for the others to arrive (to form the world,
            and in the agreement rounds), and the new default group's timeout (the moves run
            on it): as in ``ProcessGroups.create``, default 60 s.
        create: the keywords of ``ProcessGroups.create(plan.new, ...)`` (``timeout=`` the
            new groups'; give the first groups' so that a failure is detected as fast).

    Returns:
        The new groups (``global_rank`` is this rank's in ``plan.new``). The gradient
        accumulation that keeps the global batch is ``plan.accumulation``.

    Raises:
        TopologyError: misuse found on this rank before anything is consumed (``plan`` not
            starting from ``groups.topology``, ``tensors`` not naming the plan's parts in lists
            of tensors, a bad store or generation, a joining process with a default group, more
            joining processes than ``plan.joining``); the world not forming within
            ``arrival_timeout``; or, on every rank at once and before any tensor moves, tensors
            whose shapes differ from their source's, or ranks holding different growths.

    >>> plan = topology.grow(groups.topology, original)  # doctest: +SKIP
    >>> tensors = {"dense": list(model.parameters()), "expert": []}  # doctest: +SKIP
    >>> call = {"generation": 0, "store": store, "backend": "nccl"}  # doctest: +SKIP
    >>> groups = recovery.grow(groups, plan, tensors, **call)  # doctest: +SKIP
    """
    plan = _check_plan(groups, plan, store)
    check_index("generation", generation)
    parts = _parts(plan)
    given = None if callable(tensors) else _check_tensors(tensors, parts)
    _check_exchanges(plan)
    deadline = arrival_deadline(arrival_timeout)
    space = c10d.PrefixStore(f"{_PREFIX}/{generation}", store)
    if groups is None:
        old, rank = None, _ticket(plan, space)
    else:
        old = groups.global_rank
        rank = plan.rank_of(old)
        _leave(groups)
    _form(rank, plan, space, backend, deadline, device_id)
    grown = ProcessGroups.create(plan.new, arrival_timeout=arrival_timeout, **create)
    try:
        local, problem = _made(tensors, grown, parts) if given is None else (given, None)
        if problem is None:
            problem = _mismatch(plan, rank, local)
        _agree(plan, generation, problem, deadline)
    except BaseException:
        grown.destroy()
        raise
    _move(plan, rank, old, local)
    return grown
