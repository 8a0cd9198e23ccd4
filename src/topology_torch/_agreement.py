"""Agree before creating: arrive within a deadline, then exchange what each rank wants (private).

``ProcessGroups.create`` must never leave some ranks inside ``new_group`` while others have
raised, and must never wait for torch's 30-minute timeout. So every call runs, on every rank:

1. **Arrive.** Each rank writes its :class:`Proposal` (a fingerprint of its arguments, or the
   text of its validation error, and a description for messages) under its own key in the default
   store and counts itself in; the last rank to arrive sets an "all arrived" key. Every rank waits
   for that key for at most the *arrival deadline*
   (``arrival_timeout=``, else ``$TOPOLOGY_TORCH_ARRIVAL_TIMEOUT`` seconds, else 60 s). Ranks that
   have not arrived by then are named in a ``TopologyError`` on every rank that did.
2. **Compare.** All ranks are present, so one all-gather of three int64 numbers on the default
   group (fingerprint, error flag, torch's group counter) is safe. If any rank failed validation
   or the fingerprints differ, every rank raises the same ``TopologyError``, built from the stored
   proposals of the ranks involved (only a few are read).
3. **Finish** (:func:`barrier`). After the groups exist, the same arrive-and-wait marks that every
   rank has them, so no rank destroys a group a slower member is still connecting to.

Store cost per rank: O(1) writes and waits in the common case; O(W) key checks only when a rank is
missing. Under the ``fake`` backend (no data moves) and in a world of one rank there is nothing to
exchange: a local error is raised as it is.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from datetime import timedelta
from typing import Any

import attrs
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from topology import TopologyError

from ._device import collective_device

__all__ = [
    "ARRIVAL_ENV",
    "DEFAULT_ARRIVAL",
    "Proposal",
    "agree",
    "arrival_deadline",
    "barrier",
    "fingerprint",
]

ARRIVAL_ENV = "TOPOLOGY_TORCH_ARRIVAL_TIMEOUT"
DEFAULT_ARRIVAL = timedelta(seconds=60)
_PREFIX = "rank-topology"
_SHOWN = 3  # at most this many ranks' errors are quoted in one message


def fingerprint(facts: Any) -> int:
    """A signed 64-bit digest of JSON-able ``facts``."""
    text = json.dumps(facts, sort_keys=True, default=str)
    digest = hashlib.sha1(text.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def arrival_deadline(value: object) -> timedelta:
    """The arrival deadline: ``value`` (a positive ``timedelta``), else the environment, else 60 s.

    Raises:
        TopologyError: ``value`` or ``$TOPOLOGY_TORCH_ARRIVAL_TIMEOUT`` is not a positive duration.
    """
    if value is not None:
        if not isinstance(value, timedelta) or value <= timedelta(0):
            raise TopologyError(
                f"arrival_timeout must be a positive datetime.timedelta, got {value!r}; "
                "e.g. arrival_timeout=timedelta(seconds=60)"
            )
        return value
    text = os.environ.get(ARRIVAL_ENV)
    if text is None or not text.strip():
        return DEFAULT_ARRIVAL
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise TopologyError(
            f"{ARRIVAL_ENV} must be a positive number of seconds, got {text!r}; "
            f"e.g. {ARRIVAL_ENV}=60"
        )
    return timedelta(seconds=seconds)


@attrs.frozen
class Proposal:
    """What one rank brings to a create call: its arguments' digest and facts, or its error."""

    digest: int
    facts: dict[str, Any]  # JSON-able; compared field by field in messages
    error: str | None = None
    count: int = 0  # torch's group counter, when strategy 'all' needs it equal everywhere

    def dumps(self) -> bytes:
        return json.dumps(attrs.asdict(self), default=str).encode()

    @classmethod
    def loads(cls, data: bytes) -> Proposal:
        return cls(**json.loads(data.decode()))


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 8:
        head = ", ".join(map(str, ranks[:8]))
        return f"ranks {head} and {len(ranks) - 8} more"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _exchange_needed() -> bool:
    return dist.get_world_size() > 1 and str(dist.get_backend()) != "fake"


def _arrive(store: Any, space: str, payload: bytes, deadline: timedelta, what: str) -> None:
    """Write ``payload``, count this rank in, and wait until all ranks have (or name the absent)."""
    rank, size = dist.get_rank(), dist.get_world_size()
    store.set(f"{space}/rank/{rank}", payload)
    if store.add(f"{space}/arrived", 1) == size:
        store.set(f"{space}/all", b"1")
    try:
        store.wait([f"{space}/all"], deadline)
    except RuntimeError:  # the store's timeout (DistStoreError is a RuntimeError)
        if store.check([f"{space}/all"]):
            return
        absent = [r for r in range(size) if not store.check([f"{space}/rank/{r}"])]
        if not absent:  # everyone is in; the last one has not marked it yet
            return
        raise TopologyError(
            f"{_ranks(absent)} of {size} did not reach {what} within {deadline} of this rank; "
            "check that every rank calls it as often as the others and that none crashed or "
            f"hung, or raise the deadline (arrival_timeout= or {ARRIVAL_ENV}=<seconds>)"
        ) from None


def barrier(space: str, deadline: timedelta, what: str) -> None:
    """Wait until every rank of the default group reached this point (store-based).

    SPMD contract: call on every rank of the default group, in the same order.
    """
    if not _exchange_needed():
        return
    _arrive(c10d._get_default_store(), f"{_PREFIX}/{space}", b"1", deadline, what)


def _differences(odd: Proposal, good: Proposal, odd_rank: int, good_rank: int) -> str:
    """``rank 1 has kinds (...) but rank 0 has (...)`` for every fact that differs."""
    parts = []
    for name in [*good.facts, *(n for n in odd.facts if n not in good.facts)]:
        mine, theirs = odd.facts.get(name), good.facts.get(name)
        if mine != theirs:
            parts.append(f"rank {odd_rank} has {name} {mine} but rank {good_rank} has {theirs}")
    if len(parts) > _SHOWN:
        parts[_SHOWN:] = [f"{len(parts) - _SHOWN} more differences"]
    return "; ".join(parts) or "their arguments differ"


def agree(
    space: str,
    mine: Proposal,
    deadline: timedelta,
    what: str,
    *,
    same_group_count: bool = False,
    mismatch: str = "called {what} with different arguments than",
) -> None:
    """Raise the same ``TopologyError`` on every rank unless all ranks proposed the same thing.

    ``space`` names this call in the default store (unique per call and equal on every rank);
    ``what`` names the call in messages (``"ProcessGroups.create"``); ``mismatch`` says how odd
    ranks differ from the majority (``{what}`` is filled in).

    SPMD contract: call on every rank of the default group, in the same order.
    """
    if not _exchange_needed():
        if mine.error is not None:
            raise TopologyError(mine.error)
        return
    store = c10d._get_default_store()
    space = f"{_PREFIX}/{space}"
    _arrive(store, space, mine.dumps(), deadline, what)
    flag = 0 if mine.error is None else 1
    count = int(c10d._world.group_count) if same_group_count else 0
    row = torch.tensor([mine.digest, flag, count], dtype=torch.int64, device=collective_device())
    rows = [torch.empty_like(row) for _ in range(dist.get_world_size())]
    dist.all_gather(rows, row)
    table = [tuple(int(v) for v in r.tolist()) for r in rows]

    def proposal(rank: int) -> Proposal:
        return Proposal.loads(store.get(f"{space}/rank/{rank}"))

    failed = [r for r, (_, bad, _) in enumerate(table) if bad]
    if failed:
        quoted = "; ".join(f"rank {r}: {proposal(r).error}" for r in failed[:_SHOWN])
        more = f" (and {len(failed) - _SHOWN} more)" if len(failed) > _SHOWN else ""
        raise TopologyError(
            f"{_ranks(failed)} of {len(table)} refused {what}, so no rank created anything: "
            f"{quoted}{more}"
        )
    for column in (0, 2):
        values = [t[column] for t in table]
        common, _ = Counter(values).most_common(1)[0]
        odd = [r for r, v in enumerate(values) if v != common]
        if not odd:
            continue
        good = values.index(common)
        if column == 0:
            detail = _differences(proposal(odd[0]), proposal(good), odd[0], good)
            raise TopologyError(
                f"{_ranks(odd)} {mismatch.format(what=what)} rank {good}: "
                f"{detail}; call {what} on every rank with equal arguments"
            )
        raise TopologyError(
            f"{_ranks(odd)} registered {values[odd[0]]} torch process groups before this call "
            f"but rank {good} registered {common}, so strategy 'all' would give one group "
            "different names on different ranks; use strategy='local'"
        )
