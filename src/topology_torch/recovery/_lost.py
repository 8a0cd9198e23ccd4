"""Which ranks are lost: every survivor announces itself, one decides, all read it (private).

Numbering: with ``groups``, a rank is its rank in ``groups.topology`` (the layout's, which after
an ``apply`` numbers the survivors from the layout's offset up): the numbering the next
``reshape(groups.topology, lost_ranks=...)`` reads. Without ``groups``, a rank is its torch
rank, which is the same only until a decision with lost ranks; later calls without ``groups``
are refused.

Generations (space ``rank-topology/recovery`` of the job's store): ``in/<torch rank>`` is the
last generation each process entered and ``current`` the highest any entered. A process enters
exactly its next generation (0, then one more each call), which must be ``current`` (join) or
``current + 1`` (open it, with ``compare_set``); anything else raises ``TopologyError`` naming
both generations. A process that calls a generation out of turn (reused, skipped) also marks
the generation it should have called as a conflict, so that every rank in that round raises too
instead of deciding the ranks of the other generation lost.

Algorithm of one round (generation ``g``, space ``rank-topology/recovery/g``):

1. **Announce.** Each survivor sets ``alive/<rank>`` and counts itself in ``count``; the rank
   that brings the count to the number of expected ranks sets ``closed`` (nobody is lost).
2. **Close.** The first survivor to arrive waits for ``closed`` at most ``deadline`` on its own
   clock, then sets it: the round lasts ``deadline`` from the first announcement, however late
   the others arrive. The others wait for ``closed`` at most ``2 * deadline`` (should the first
   die meanwhile) and set it too. A dead rank never announces, so this wait is what costs time.
3. **Decide.** The lowest rank that announced proposes the ranks that did not
   (``compare_set`` on ``decided``: the first outcome wins, so there is exactly one).
   Each rank looks for a lower announced rank in order (one look when the lowest rank lives);
   only the decider reads every rank's key.
4. **Read.** Every survivor waits for ``decided`` at most ``deadline``; if it does not come,
   the rank sets the outcome "abandoned" (unless a decision won the race) and every rank of the
   round raises ``TopologyError`` naming the ranks that never announced.

Survivors arrive at different times (one sees a closed connection at once, another waits for
its collective's timeout), so ``deadline`` must exceed that spread: the groups' ``timeout``
plus one step. A survivor that arrives after the outcome is in the lost ranks: it gets a
``TopologyError`` telling it to leave.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from topology import Topology, TopologyError

from .._args import check_index
from .._process_groups import ProcessGroups
from ._apply import torch_rank_of

__all__ = ["agree_lost"]

_PREFIX = "rank-topology/recovery"
_CURRENT = f"{_PREFIX}/current"  # the highest generation any process entered
_RENUMBERED = f"{_PREFIX}/renumbered"  # the last generation that decided lost ranks


def _shown(ranks: Iterable[int]) -> str:
    listed = list(ranks)
    head = ", ".join(map(str, listed[:8]))
    more = f" and {len(listed) - 8} more" if len(listed) > 8 else ""
    return f"{'rank' if len(listed) == 1 else 'ranks'} {head}{more}"


def _check(generation: object, deadline: object, among: object) -> tuple[int, ...] | None:
    """Raise ``TopologyError`` for an invalid argument; the expected ranks (None: all)."""
    check_index("generation", generation)  # one per failure, equal on every survivor
    if not isinstance(deadline, timedelta) or deadline <= timedelta(0):
        raise TopologyError(
            f"deadline must be a positive datetime.timedelta, got {deadline!r}; "
            "e.g. deadline=timedelta(seconds=5) (more than the groups' timeout)"
        )
    if among is None:
        return None
    if isinstance(among, str | bytes) or not isinstance(among, Iterable):
        raise TopologyError(f"among must be ranks (ints >= 0) or None, got {among!r}")
    ranks = tuple(check_index(f"among[{i}]", rank) for i, rank in enumerate(among))
    return tuple(sorted(set(ranks)))


def _store(store: object) -> Any:
    """The store to meet on: ``store`` (a ``torch.distributed.Store``), else the default
    group's."""
    if store is None:
        if not dist.is_available() or not dist.is_initialized():
            raise TopologyError(
                "torch.distributed is not initialized and no store was given; pass store= "
                "or call torch.distributed.init_process_group(...) before agree_lost"
            )
        return c10d._get_default_store()
    if not isinstance(store, c10d.Store):
        raise TopologyError(
            f"store must be a torch.distributed.Store every survivor reaches (TCPStore, "
            f"FileStore, ...), got {type(store).__name__}"
        )
    return store


def _who(groups: object, among: tuple[int, ...] | None) -> tuple[int, tuple[int, ...], int]:
    """This rank's number, the expected ranks (in that numbering) and its torch rank."""
    if groups is not None:
        if not isinstance(groups, ProcessGroups):
            raise TopologyError(
                f"groups must be the ProcessGroups the job trains with, got {type(groups).__name__}"
            )
        if among is not None:
            raise TopologyError(
                "among and groups were both given; groups alone says the expected ranks "
                "(every rank of groups.topology): drop among"
            )
        layout = groups.topology
        if not isinstance(layout, Topology):
            raise TopologyError(
                f"groups realise {layout}, not a Topology, which reshape cannot re-lay out; "
                "create them with ProcessGroups.create(Topology(...))"
            )
        ranks = tuple(range(layout.rank_offset, layout.rank_offset + layout.world_size))
        rank, torch_rank = groups.global_rank, torch_rank_of(groups)
    else:
        if not dist.is_available() or not dist.is_initialized():
            raise TopologyError(
                "agree_lost without groups numbers ranks by torch's default group, which is "
                "not initialized; pass groups= (the ProcessGroups the job trains with)"
            )
        rank = torch_rank = dist.get_rank()
        ranks = among if among is not None else tuple(range(dist.get_world_size()))
    if rank not in ranks:
        raise TopologyError(
            f"rank {rank} is not among the expected {_shown(ranks)}; pass among= the ranks "
            "that were alive before this failure"
            if groups is None
            else f"rank {rank} is not in the layout of groups ({_shown(ranks)})"
        )
    return rank, ranks, torch_rank


def _number(store: Any, key: str) -> int:
    """The int stored at ``key``, or -1 when it is absent."""
    return int(store.get(key)) if store.check([key]) else -1


def _conflict(store: Any, due: int, called: int) -> None:
    """End round ``due`` (unless it has an outcome) as a conflict with generation ``called``."""
    space = f"{_PREFIX}/{due}"
    store.compare_set(f"{space}/decided", "", json.dumps({"conflict": called}))
    store.set(f"{space}/closed", b"1")  # wake the ranks waiting in that round


def _enter(store: Any, generation: int, rank: int, torch_rank: int, numbered: bool) -> None:
    """Enter round ``generation``, or raise ``TopologyError`` when it is not this process's
    next generation, not the job's current or next one, or (``numbered`` False: torch ranks)
    follows a decision that renumbered the layout."""
    mine = f"{_PREFIX}/in/{torch_rank}"
    last = _number(store, mine)
    if generation != last + 1:
        _conflict(store, last + 1, generation)
        used = "was already used" if generation <= last else "skips generations"
        raise TopologyError(
            f"generation {generation} {used} on rank {rank}, whose next is generation "
            f"{last + 1}; every survivor calls agree_lost with generations 0, 1, 2, ... in turn"
        )
    renumbered = _number(store, _RENUMBERED)
    if not numbered and 0 <= renumbered < generation:
        raise TopologyError(
            f"generation {renumbered} decided lost ranks, after which the layout's ranks are "
            f"no longer torch ranks; pass the groups: agree_lost(groups, generation={generation}, "
            "...) answers in groups.topology's ranks, which reshape reads"
        )
    while True:
        current = _number(store, _CURRENT)
        if generation < current:
            raise TopologyError(
                f"generation {generation} is behind generation {current}, which other ranks "
                f"are in; rank {rank} missed the rounds between (it was decided lost or "
                "arrived too late): it has no place in the job, release its groups and exit"
            )
        if generation == current:
            break
        expected = "" if current < 0 else str(current)
        if int(store.compare_set(_CURRENT, expected, str(generation))) == generation:
            break
    store.set(mine, str(generation))


def _outcome(
    store: Any, space: str, rank: int, ranks: tuple[int, ...], deadline: timedelta
) -> dict[str, Any]:
    """The round's outcome (``lost``, ``conflict`` or ``abandoned``) after this rank's part."""
    closed, decided = f"{space}/closed", f"{space}/decided"
    store.set(f"{space}/alive/{rank}", b"1")
    if store.check([decided]):  # late, or a conflict: the outcome is there
        return dict(json.loads(store.get(decided)))
    count = store.add(f"{space}/count", 1)
    if count == len(ranks):
        store.set(closed, b"1")  # everyone is here: nothing to wait for
    # the first to arrive times the round; the others wait for it (or fall back); the store's
    # timeout is a DistStoreError, a RuntimeError
    with contextlib.suppress(RuntimeError):
        store.wait([closed], deadline if count == 1 else deadline * 2)
    store.set(closed, b"1")

    def silent() -> list[int]:
        return [r for r in ranks if not store.check([f"{space}/alive/{r}"])]

    # the decider: the lowest rank that announced (the lowest expected, when alive, at once)
    lowest = next(r for r in ranks if r == rank or store.check([f"{space}/alive/{r}"]))
    if lowest == rank:
        store.compare_set(decided, "", json.dumps({"lost": silent()}))
    try:
        store.wait([decided], deadline)
    except RuntimeError:
        store.compare_set(decided, "", json.dumps({"abandoned": lowest}))
    return dict(json.loads(store.get(decided)))


def agree_lost(
    groups: ProcessGroups | None = None,
    *,
    generation: int,
    deadline: timedelta,
    among: Iterable[int] | None = None,
    store: Any = None,
) -> tuple[int, ...]:
    """The ranks lost since the last agreement, decided once and read by every survivor.

    SPMD contract: call on every surviving rank once per failure, with equal ``generation``
    (0 at the first failure, then one more at each call, whatever the last one ended with),
    ``deadline`` and ``groups``' layout. No collective runs and nothing waits for a dead
    rank: the round closes ``deadline`` after the first survivor arrived (at most
    ``2 * deadline`` after this one), then the decision of the lowest surviving rank is awaited
    at most ``deadline``.

    Args:
        groups: the groups the job trains with (after an ``apply``, the ones it returned):
            the answer is in ``groups.topology``'s ranks, which
            ``reshape(groups.topology, lost_ranks=...)`` reads, and every rank of that layout
            is expected. Without it, ranks are torch ranks (equal to the layout's only until
            a decision with lost ranks; later calls without ``groups`` are refused).
        generation: which failure this is (0, 1, ...): it names the store keys.
        deadline: how long the round stays open after the first survivor arrived, and the
            longest wait for the decision; more than the groups' ``timeout`` (survivors stuck in
            a collective arrive that much later).
        among: without ``groups``, the torch ranks expected (default: every rank of the
            default group).
        store: the job's store, a ``torch.distributed.Store`` (default: the default group's,
            which rank 0 hosts). With ``groups`` and ``store`` no default group is needed.

    Returns:
        The lost ranks, ascending (empty when every expected rank announced itself). This rank
        is never among them: a rank that arrives after the decision and is lost gets a
        ``TopologyError`` instead, and leaves.

    Raises:
        TopologyError: an invalid argument; this rank not among the expected ones; a
            ``generation`` out of turn (reused, skipped or behind the other ranks': on this
            rank and on every rank of the generation it should have called, naming both);
            this rank decided lost (it arrived too late: release its groups and exit); or no
            decision within ``deadline`` of the round's end (naming the ranks that never
            announced). After a ``TopologyError`` from the round, the next call takes the
            next generation.

    >>> lost = agree_lost(groups, generation=0, deadline=timedelta(seconds=5))  # doctest: +SKIP
    """
    expected = _check(generation, deadline, among)
    meeting = _store(store)
    rank, ranks, torch_rank = _who(groups, expected)
    _enter(meeting, generation, rank, torch_rank, groups is not None)
    space = f"{_PREFIX}/{generation}"
    outcome = _outcome(meeting, space, rank, ranks, deadline)
    if "conflict" in outcome:
        raise TopologyError(
            f"generation {generation} ended in a conflict: a rank called generation "
            f"{outcome['conflict']} when its next was {generation}; call agree_lost with "
            f"generation {generation + 1} on every survivor"
        )
    if "abandoned" in outcome:
        missing = [r for r in ranks if not meeting.check([f"{space}/alive/{r}"])]
        raise TopologyError(
            f"rank {outcome['abandoned']}, the lowest that announced itself, published no "
            f"decision on the lost ranks within {deadline} of rank {rank} (never announced: "
            f"{', '.join(map(str, missing)) or 'none'}); it may have died after announcing: "
            f"call agree_lost again with generation {generation + 1}, or raise the deadline"
        )
    lost: list[int] = outcome["lost"]
    if lost:
        meeting.set(_RENUMBERED, str(generation))
    if rank in lost:
        raise TopologyError(
            f"rank {rank} arrived after generation {generation} was decided and is among the "
            f"lost {_shown(lost)}; it has no place in the new layout: release its groups and exit"
        )
    return tuple(lost)
