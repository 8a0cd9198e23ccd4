"""Which ranks are lost: every survivor announces itself, one decides, all read it (private).

Algorithm (generation ``g``, space ``rank-topology/recovery/g`` of the job's store):

1. **Announce.** Each survivor sets ``alive/<rank>`` and counts itself in ``count``; the rank
   that brings the count to the number of expected ranks sets ``closed`` (nobody is lost).
2. **Close.** The first survivor to arrive waits for ``closed`` at most ``deadline`` on its own
   clock, then sets it: the round lasts ``deadline`` from the first announcement, however late
   the others arrive. The others wait for ``closed`` at most ``2 * deadline`` (should the first
   die meanwhile) and set it too. A dead rank never announces, so this wait is what costs time.
3. **Decide.** The lowest rank that announced proposes the ranks that did not
   (``compare_set`` on ``decided``: the first proposal wins, so there is exactly one decision).
   Each rank looks for a lower announced rank in order (one look when rank 0 lives); only the
   decider reads every rank's key.
4. **Read.** Every survivor waits for ``decided`` at most ``deadline`` and returns it; if it
   does not come, a ``TopologyError`` names the ranks that never announced.

Survivors arrive at different times (one sees a closed connection at once, another waits for
its collective's timeout), so ``deadline`` must exceed that spread: the groups' ``timeout``
plus one step. A survivor that arrives after the round closed is in the decision's lost ranks
(its ``reshape`` gives it no new rank, so it leaves).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from topology import TopologyError

from .._args import check_index

__all__ = ["agree_lost"]

_PREFIX = "rank-topology/recovery"


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


def agree_lost(
    *,
    generation: int,
    deadline: timedelta,
    among: Iterable[int] | None = None,
    store: Any = None,
) -> tuple[int, ...]:
    """The ranks lost since the last agreement, decided once and read by every survivor.

    SPMD contract: call on every surviving rank once per failure, with equal ``generation``
    (a new one each time), ``deadline`` and ``among``. No collective runs and nothing waits
    for a dead rank: the round closes ``deadline`` after the first survivor arrived (at most
    ``2 * deadline`` after this one), then the decision of the lowest surviving rank is awaited
    at most ``deadline``.

    Args:
        generation: which failure this is (0, 1, ...): it names the store keys.
        deadline: how long the round stays open after the first survivor arrived, and the
            longest wait for the decision; more than the groups' ``timeout`` (survivors stuck in
            a collective arrive that much later).
        among: the ranks expected (default: every rank of the default group).
        store: the job's store (default: the default group's, which rank 0 hosts).

    Returns:
        The lost ranks, ascending (empty when every expected rank announced itself).

    Raises:
        TopologyError: an invalid argument, this rank not among the expected ones, or no
            decision within ``deadline`` of the round's end (naming the ranks that never
            announced).

    >>> lost = agree_lost(generation=0, deadline=timedelta(seconds=5))  # doctest: +SKIP
    """
    expected = _check(generation, deadline, among)
    if store is None:
        if not dist.is_available() or not dist.is_initialized():
            raise TopologyError(
                "torch.distributed is not initialized and no store was given; pass store= "
                "or call torch.distributed.init_process_group(...) before agree_lost"
            )
        store = c10d._get_default_store()
    rank = dist.get_rank()
    ranks = expected if expected is not None else tuple(range(dist.get_world_size()))
    if rank not in ranks:
        raise TopologyError(
            f"rank {rank} is not among the expected {_shown(ranks)}; pass among= the ranks "
            "that were alive before this failure"
        )
    space = f"{_PREFIX}/{generation}"
    closed = f"{space}/closed"
    store.set(f"{space}/alive/{rank}", b"1")
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

    # the decider: the lowest rank that announced (rank 0, when alive, after one look)
    lowest = next(r for r in ranks if r == rank or store.check([f"{space}/alive/{r}"]))
    if lowest == rank:
        store.compare_set(f"{space}/decided", "", json.dumps(silent()))
    try:
        store.wait([f"{space}/decided"], deadline)
    except RuntimeError:
        missing = silent()
        raise TopologyError(
            f"rank {lowest}, the lowest that announced itself, published no decision on the "
            f"lost ranks within {deadline} of rank {rank} (never announced: "
            f"{', '.join(map(str, missing)) or 'none'}); it may have died after announcing: "
            "call agree_lost again with a new generation, or raise the deadline"
        ) from None
    decided: list[int] = json.loads(store.get(f"{space}/decided"))
    return tuple(decided)
