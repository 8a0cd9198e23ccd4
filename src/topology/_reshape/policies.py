"""The ways to go on after a loss, each giving a candidate re-layout, and their table (private).

``drop``: drop the data-parallel replicas that lost a rank (in the smallest aligned blocks that
keep every shard coordinate); ``spares``: a spare host takes each lost host's place;
``shrink``: survivors shifted left onto the largest valid layout (nvidia-resiliency-ext's
assignment, bounded by the layout's rules), shards moved where coordinates change. A new policy
is a function of a :class:`Loss` and a row of :data:`POLICY_TABLE`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from itertools import compress

import attrs

from .._args import show
from .._errors import TopologyError
from .._megatron.topology import Topology
from .hosts import HostTable
from .shards import replica_axis, shard_codes, shard_digits, shard_key

__all__ = ["POLICY_TABLE", "Candidate", "Loss", "Policy", "drop", "shrink", "spares"]

_DROPPED = -(1 << 62)
"""A dropped replica's shift: every rank built from it stays negative."""


@attrs.frozen
class Loss:
    """What a policy re-lays out: the layout, its lost ranks, and what could replace them."""

    layout: Topology
    lost: frozenset[int]
    hosts: HostTable
    """The hosts by number: which runs which rank, their GPUs and domains."""
    spares: tuple[int, ...] = ()
    """Spare host numbers (outside the layout's hosts)."""


@attrs.frozen
class Candidate:
    """A re-layout before its communicators are counted."""

    new: Topology
    rank_of: tuple[int | None, ...]
    fresh: tuple[int, ...] = ()
    """New ranks that start as new processes (a spare's ranks)."""
    sources: tuple[tuple[int, int], ...] = ()
    """``(new rank, old rank)``: the surviving old rank holding what that new rank needs."""
    hosts: tuple[tuple[int, int], ...] = ()
    """``(lost host, spare host)`` replacements."""


def _evolve(topo: Topology, world_size: int) -> Topology:
    """``topo`` at another world size, everything else kept (dp derived again); where the
    distributed-optimizer instances no longer divide the new ``dp * cp`` and ``edp`` (Megatron's
    rule), the most that do and divide the old count: they split optimizer state, never the
    model's shards.

    Raises:
        TopologyError: when no layout of ``world_size`` ranks keeps the model parallelism.
    """
    data = {**topo.to_dict(), "world_size": world_size, "dp": None}
    try:
        return Topology.from_dict(data)
    except TopologyError:
        dp, edp = (world_size * size // topo.world_size for size in (topo.dp, topo.edp))
        instances = math.gcd(topo.dist_opt_instances, dp * topo.cp, edp)
        if instances == topo.dist_opt_instances:
            raise
        return Topology.from_dict({**data, "dist_opt_instances": instances})


def _holders(
    old: Topology, new: Topology, lost: frozenset[int], needs: Sequence[int]
) -> tuple[tuple[int, int], ...]:
    """For each new rank in ``needs``, the first surviving old rank with its shard coordinates:
    any rank not ``lost``, one the new layout leaves idle too (it sends, then leaves).

    Raises:
        TopologyError: when no survivor holds one of them (every replica of it is lost).
    """
    old_codes, new_codes = shard_codes(old, new)
    start, stop = old.rank_offset, old.rank_offset + old.world_size
    alive = [rank not in lost for rank in range(start, stop)]
    codes, ranks = list(compress(old_codes, alive)), list(compress(range(start, stop), alive))
    # reversed, so that the first survivor with a code is the one kept
    holder = dict(zip(reversed(codes), reversed(ranks), strict=True))
    found = []
    for rank in needs:
        code = new_codes[rank - new.rank_offset]
        if code not in holder:
            new_digits = shard_digits(new)
            key = shard_key(new_digits, rank - new.rank_offset)
            axes = ", ".join(f"{size}x" for size, _ in new_digits) or "one shard"
            raise TopologyError(
                f"every replica of the shard of new rank {rank} (shard coordinates {key} of "
                f"{axes}) is lost, so the model cannot be rebuilt; restart from a checkpoint"
            )
        found.append((rank, holder[code]))
    return tuple(found)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def drop(loss: Loss) -> Candidate:
    """Drop the data-parallel replicas (aligned blocks of them) that hold a lost rank.

    Algorithm: with the dense replica axis of size ``dp`` and stride ``s``, a rank's replica is
    ``((r - offset) // s) % dp``; for the smallest block ``b | dp`` whose aligned blocks with a
    lost replica can be dropped while the layout stays valid and every survivor keeps its
    expert coordinates, the kept replicas are renumbered ``0..dp'-1`` in order and every other
    coordinate is kept: ``new = offset + sum(c_a * stride'_a)``.

    Raises:
        TopologyError: when every replica holds a lost rank, or no block keeps a valid layout.
    """
    topo, lost = loss.layout, loss.lost
    axis = replica_axis(topo)
    grid = topo.dense
    index = grid.axes.index(axis)
    size, stride = grid.shape[index], grid.strides[index]
    offset = topo.rank_offset
    hit = sorted({((r - offset) // stride) % size for r in lost})
    reason = ""
    for block in _divisors(size):
        gone = {d for h in hit for d in range(h // block * block, (h // block + 1) * block)}
        kept = [d for d in range(size) if d not in gone]
        if not kept:
            raise TopologyError(
                f"every one of the {size} data-parallel replicas holds a lost rank "
                f"(lost replicas {hit}), so no replica of the model survives; use spares "
                "or restart from a checkpoint"
            )
        try:
            new = _evolve(topo, topo.world_size // size * len(kept))
        except TopologyError as error:
            reason = str(error)
            continue
        mapping = _drop_map(topo, new, axis, {d: j for j, d in enumerate(kept)})
        if _keeps_shards(topo, new, mapping):
            return Candidate(new, mapping)
        reason = "dropping whole replicas moves expert coordinates"
    raise TopologyError(
        f"dropping the replicas {hit} of {size} leaves no valid layout ({reason}); "
        "use spares or the shrink policy"
    )


def _drop_map(
    old: Topology, new: Topology, axis: str, renumber: Mapping[int, int]
) -> tuple[int | None, ...]:
    """Old local rank -> new rank, keeping every dense coordinate but the renumbered replica.

    Built axis by axis, innermost first (local ranks count the dense grid's digits): each axis
    concatenates copies of the list so far, shifted by its coordinate times its new stride; a
    dropped replica's copy is shifted far below zero and read as None.
    """
    strides = dict(zip(new.dense.axes, new.dense.strides, strict=True))
    grid = old.dense
    values = [0]
    for _, size, name in sorted(zip(grid.strides, grid.shape, grid.axes, strict=True)):
        step = strides[name]
        shifts: Sequence[int] = range(0, size * step, step)
        if name == axis:
            shifts = [renumber[c] * step if c in renumber else _DROPPED for c in range(size)]
        values = [value + shift for shift in shifts for value in values]
    offset = new.rank_offset
    return tuple(None if value < 0 else value + offset for value in values)


def _keeps_shards(old: Topology, new: Topology, mapping: Sequence[int | None]) -> bool:
    """True if every mapped rank has the same shard coordinates in both layouts (the dense
    ones are kept by construction, so only the expert grid's are compared)."""
    old_codes, new_codes = shard_codes(old, new, dense=False)
    alive = [t is not None for t in mapping]
    news = [t - new.rank_offset for t in mapping if t is not None]
    return list(compress(old_codes, alive)) == list(map(new_codes.__getitem__, news))


def spares(loss: Loss) -> Candidate:
    """A spare host takes each lost host's place; the layout and every rank number stay.

    A lost host's spare is the first unused one with GPUs for all its ranks that shares its
    innermost domain in the allocation (its NVLink domain, else its rack, ...), else the first
    unused one with GPUs for all its ranks.

    Raises:
        TopologyError: when there are fewer spares than lost hosts, or no spare left has
            GPUs for all the ranks of a lost host.
    """
    topo, table, spare_hosts = loss.layout, loss.hosts, loss.spares
    offset = topo.rank_offset
    lost_hosts = sorted({table.host_of(r - offset) for r in loss.lost})
    if len(spare_hosts) < len(lost_hosts):
        raise TopologyError(
            f"{len(lost_hosts)} hosts are lost ({table.names(lost_hosts)}) but only "
            f"{len(spare_hosts)} spares are given; give more spares or use the drop policy"
        )
    free = list(spare_hosts)
    pairs = []
    for host in lost_hosts:
        need = len(table.ranks(host))
        fits = [s for s in free if table.gpus(s) >= need]
        if not fits:
            raise TopologyError(
                f"lost host {show(table.name(host))} ran {need} ranks but no spare left has "
                f"{need} GPUs; give larger spares or use the drop policy"
            )
        chosen = min(fits, key=lambda s: (_distance(table, host, s), free.index(s)))
        free.remove(chosen)
        pairs.append((host, chosen))
    mapping: list[int | None] = list(range(offset, offset + topo.world_size))
    fresh = tuple(offset + local for h in lost_hosts for local in table.ranks(h))
    for rank in fresh:
        mapping[rank - offset] = None
    kept = tuple(mapping)
    return Candidate(topo, kept, fresh, _holders(topo, topo, loss.lost, fresh), tuple(pairs))


def _distance(table: HostTable, host: int, spare: int) -> int:
    """The innermost tier whose domain ``host`` and ``spare`` share (tiers + 1 if none)."""
    allocation = table.allocation
    if allocation is None:
        return 0
    a, b = allocation.hosts[host].domains, allocation.hosts[spare].domains
    shared = [t for t, (x, y) in enumerate(zip(a, b, strict=False)) if x is not None and x == y]
    return shared[0] if shared else len(allocation.tiers) + 1


def shrink(loss: Loss) -> Candidate:
    """Shift the survivors left onto the largest valid layout with fewer replicas whose every
    shard has a surviving holder (an idle survivor too: it sends its shard, then leaves).

    Whenever every shard coordinate of the old layout keeps a survivor, the largest valid layout
    the survivors fill continues (its coordinates are the old ones); otherwise a smaller one may
    still, when it needs only surviving coordinates (an expert layout at fewer ranks).

    Raises:
        TopologyError: when the survivors cannot hold one model replica, or every layout they
            could fill needs a shard no survivor holds (naming it).
    """
    topo, lost = loss.layout, loss.lost
    offset = topo.rank_offset
    alive = [r for r in range(offset, offset + topo.world_size) if r not in lost]
    replica = topo.world_size // topo.dp
    missing: TopologyError | None = None
    for count in range(len(alive) // replica, 0, -1):
        try:
            new = _evolve(topo, count * replica)
        except TopologyError:
            continue
        mapping: list[int | None] = [None] * topo.world_size
        for position, rank in enumerate(alive[: new.world_size], offset):
            mapping[rank - offset] = position
        old_codes, new_codes = shard_codes(topo, new)
        moved = [
            t
            for local, t in enumerate(mapping)
            if t is not None and old_codes[local] != new_codes[t - offset]
        ]
        try:
            sources = _holders(topo, new, lost, moved)
        except TopologyError as error:
            missing = missing or error  # the largest layout's reason
            continue
        return Candidate(new, tuple(mapping), (), sources)
    if missing is not None:
        raise missing
    raise TopologyError(
        f"{len(alive)} ranks survive but one model replica needs {replica} "
        f"(world_size {topo.world_size} / dp {topo.dp}) and no smaller valid layout fits; "
        "add hosts or restart with less model parallelism"
    )


@attrs.frozen
class Policy:
    """One row of the policy table: how the policy re-lays out a loss, and what ``auto`` needs.

    ``needs_spares``: ``auto`` tries it only when spare hosts are given. ``whole_replicas``: it
    keeps at most the survivors' whole model replicas, so ``auto`` skips it once an earlier
    policy already rebuilds nothing, moves nothing and keeps all of them (a tie goes to the
    earlier row anyway).
    """

    name: str
    relayout: Callable[[Loss], Candidate]
    needs_spares: bool = False
    whole_replicas: bool = False


POLICY_TABLE = {
    row.name: row
    for row in (
        Policy("drop", drop, whole_replicas=True),
        Policy("spares", spares, needs_spares=True),
        Policy("shrink", shrink, whole_replicas=True),
    )
}
"""The re-layout policies by name, in the order ``auto`` tries them (on equal cost the earlier
wins): ``drop`` the affected data-parallel replicas; spare hosts replace lost ones (``spares``);
survivors shifted left onto fewer replicas (``shrink``)."""
