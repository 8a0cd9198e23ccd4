"""Growing back after a reshape: the survivors keep their shards, joining ranks pull theirs from
every data-parallel holder at once (private; public as :func:`topology.grow`).

When hosts return or spares arrive, the job goes from the layout it runs now (``layout``, the
survivors numbered ``0..n-1`` after a :func:`~topology.reshape`) to a larger one of the same
model parallelism: the original layout, or the largest valid one the processes fill.

A rank's shard has parts (:data:`PARTS`): the dense grid's weights and, with experts, the
expert grid's; each part has its own holders (every rank with the same coordinates of that
grid but the data-parallel one).

Algorithm:

1. **Survivors.** Each current rank, in rank order, takes the first free target rank holding
   its whole shard: for the usual layouts the rank with the same coordinates on every dense
   axis (its data-parallel replica keeps its number), so whole replicas stay whole and their
   communicators are reused. Where none is left (the layouts of an expert grid at two sizes
   need not pair every dense shard with the same experts), it takes one holding its dense
   part (one is always left: the target has at least as many replicas of each dense shard)
   and pulls the experts it lacks.
2. **Joining ranks.** The target ranks left over are the joining processes', in order.
3. **Pulls.** A part that a target rank lacks is held by ``h`` current ranks (its
   data-parallel holders): it pulls ``h`` equal pieces, piece ``p`` from holder
   ``(i + p) mod h`` for the ``i``-th rank that lacks that part. Every holder then sends
   ``j / h`` of the part (``j`` ranks lacking it), the least any plan can (the bytes that must
   arrive, spread over every rank that has them), and every receiver gets the part once.

>>> from topology import Topology, grow
>>> g = grow(Topology(4, tp=2), Topology(8, tp=2))
>>> g.joining, g.rank_of(3), [(p.rank, p.part, p.source, p.piece) for p in g.pulls[:2]]
((4, 5, 6, 7), 3, [(4, 'dense', 0, 0), (4, 'dense', 2, 1)])
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import attrs

from .._args import check_size, show
from .._errors import TopologyError
from .._megatron.topology import Topology
from .regroup import KindChange, classify
from .reshape import nearest_steps
from .shards import shard_codes

__all__ = ["PARTS", "Growth", "Pull", "grow"]


@attrs.frozen
class Pull:
    """One piece of a part of a rank's shard: new rank ``rank`` receives piece ``piece`` of
    ``pieces`` (equal parts of every local tensor of that part, flattened, in order) of its
    ``part`` (``"dense"`` or ``"expert"``, see :data:`PARTS`) from old rank ``source`` (the
    survivor's number in the layout it runs now)."""

    rank: int
    part: str
    source: int
    piece: int
    pieces: int


@attrs.frozen
class Growth:
    """A growth back to a larger layout (see the module docstring).

    ``mapping[old local rank]`` is that survivor's new rank; ``joining`` the new ranks the new
    processes take, in the order they join; ``pulls`` what each of them fetches; ``communicators``
    per kind of the new layout what is reused, trimmed or rebuilt (a group that gains members
    is rebuilt); ``accumulation`` the gradient-accumulation steps at the new dp that keep the
    global batch (``batch_kept``), else the nearest.
    """

    old: Topology
    new: Topology
    mapping: tuple[int, ...]
    joining: tuple[int, ...]
    pulls: tuple[Pull, ...]
    communicators: tuple[KindChange, ...]
    accumulation: int
    batch_kept: bool

    def rank_of(self, rank: int) -> int:
        """The new rank of old rank ``rank`` (every survivor has one)."""
        local = rank - self.old.rank_offset
        if not 0 <= local < len(self.mapping):
            raise TopologyError(
                f"rank {show(rank)} is not in the layout's ranks {self.old.rank_offset} to "
                f"{self.old.rank_offset + self.old.world_size - 1}"
            )
        return self.mapping[local]

    def pulls_of(self, rank: int) -> tuple[Pull, ...]:
        """The pulls new rank ``rank`` makes (none for a survivor that keeps its shard)."""
        return tuple(p for p in self.pulls if p.rank == rank)


def _target(layout: Topology, target: Topology | None, world_size: int | None) -> Topology:
    """The layout to grow to: ``target``, else the largest of ``layout``'s model parallelism
    on at most ``world_size`` ranks."""
    if target is not None:
        if not isinstance(target, Topology):
            raise TopologyError(f"target must be a Topology, got {show(target)}")
        if world_size is not None and world_size != target.world_size:
            raise TopologyError(
                f"world_size({world_size}) contradicts target.world_size({target.world_size}); "
                "give one of them"
            )
        return target
    if world_size is None:
        raise TopologyError("give the layout to grow to (target) or the ranks now (world_size)")
    check_size("world_size", world_size, why="the most ranks a layout holds")
    if world_size < layout.world_size:
        raise TopologyError(
            f"world_size({world_size}) is less than the layout's {layout.world_size} ranks; "
            "grow goes up, reshape shrinks"
        )
    replica = layout.world_size // layout.dp
    for count in range(world_size // replica, layout.dp, -1):
        data = {**layout.to_dict(), "world_size": count * replica, "dp": None}
        try:
            return Topology.from_dict(data)
        except TopologyError:
            continue
    return layout


def _same_model(layout: Topology, target: Topology) -> None:
    """Refuse a target of other model parallelism (its shards differ) or fewer ranks."""
    model = ("tp", "cp", "pp", "ep", "etp", "vpp", "gtp", "egtp", "hcp_sizes", "rank_offset")
    now, then = layout.to_dict(), target.to_dict()
    differ = [k for k in model if now[k] != then[k]]
    if differ or layout.order != target.order:
        what = ", ".join(f"{k} {now[k]} vs {then[k]}" for k in differ) or "the axis order"
        raise TopologyError(
            f"the target must keep the layout's model parallelism to grow back ({what}); "
            "plan a full re-layout with topology.transfer instead"
        )
    if target.world_size < layout.world_size:
        raise TopologyError(
            f"the target has {target.world_size} ranks, fewer than the layout's "
            f"{layout.world_size}; use reshape to shrink"
        )


PARTS: dict[str, dict[str, bool]] = {
    "dense": {"expert": False},
    "expert": {"dense": False},
}
"""The parts of a rank's shard, each a set of weights with its own holders: the dense grid's
(attention, dense MLP, embeddings: tp, cp, pp coordinates) and the expert grid's (the MoE
experts: etp, ep, pp); as :func:`shard_codes` keywords."""


def _parts(layout: Topology) -> list[str]:
    """The parts a layout's ranks hold (no expert part without an expert grid)."""
    return [part for part in PARTS if part == "dense" or layout.expert is not None]


def _survivors(layout: Topology, target: Topology) -> tuple[int, ...]:
    """Every current rank's target rank (step 1): in rank order, the first free target rank
    holding its whole shard, else its dense part (it then pulls the experts it lacks). Where the
    layouts pair their dense and expert coordinates alike, this is the rank with the same
    coordinates on every dense axis: within one shard, ascending ranks are ascending
    data-parallel replicas in both layouts."""
    new_offset = target.rank_offset
    free = list(range(new_offset, new_offset + target.world_size))
    found: list[int | None] = [None] * layout.world_size
    for keywords in ({}, PARTS["dense"]):  # the whole shard, then its dense part
        old_codes, new_codes = shard_codes(layout, target, **keywords)
        pools: dict[int, list[int]] = defaultdict(list)
        for rank in reversed(free):
            pools[new_codes[rank - new_offset]].append(rank)
        for local, code in enumerate(old_codes):
            if found[local] is None and pools[code]:
                found[local] = pools[code].pop()
        taken = set(found)
        free = [rank for rank in free if rank not in taken]
    # the dense pass places every rank left: each dense shard has ``layout.dp`` holders now and
    # ``target.dp >= layout.dp`` places, of which the whole-shard pass took one per rank it placed
    mapping = tuple(rank for rank in found if rank is not None)
    assert len(mapping) == layout.world_size
    return mapping


def _pulls(layout: Topology, target: Topology, mapping: Sequence[int]) -> tuple[Pull, ...]:
    """Every target rank's missing parts, in pieces from every holder (step 3)."""
    source = {new: layout.rank_offset + local for local, new in enumerate(mapping)}
    pulls = []
    for part in _parts(layout):
        old_codes, new_codes = shard_codes(layout, target, **PARTS[part])
        holders: dict[int, list[int]] = defaultdict(list)
        for local, code in enumerate(old_codes):
            holders[code].append(layout.rank_offset + local)
        seen: dict[int, int] = defaultdict(int)
        for local, code in enumerate(new_codes):
            rank = target.rank_offset + local
            had = source.get(rank)
            if had is not None and old_codes[had - layout.rank_offset] == code:
                continue
            found, first = holders[code], seen[code]
            seen[code] += 1
            pulls += [
                Pull(rank, part, found[(first + piece) % len(found)], piece, len(found))
                for piece in range(len(found))
            ]
    pulls.sort(key=lambda p: (p.rank, p.part != "dense", p.piece))
    return tuple(pulls)


def grow(
    layout: Topology,
    target: Topology | None = None,
    *,
    world_size: int | None = None,
    accumulation: int = 1,
) -> Growth:
    """Grow ``layout`` (what runs now) back to ``target`` (the layout before the failure), or
    to the largest layout of the same model parallelism on ``world_size`` ranks.

    Survivors keep their shards (no survivor moves a weight; whole data-parallel replicas keep
    their communicators); joining processes take :attr:`Growth.joining` in order and pull their
    shards in equal pieces from every survivor holding them (see the module docstring).
    ``accumulation`` is the steps now; the result's keep ``dp * accumulation``.

    >>> from topology import Topology, grow
    >>> g = grow(Topology(12, tp=2, pp=2), Topology(16, tp=2, pp=2), accumulation=4)
    >>> g.new.dp, g.accumulation, g.batch_kept, g.rank_of(6), len(g.joining)
    (4, 3, True, 8, 4)

    Raises:
        TopologyError: for a target of other model parallelism or fewer ranks, or invalid
            arguments.
    """
    if not isinstance(layout, Topology):
        raise TopologyError(f"layout must be a Topology, got {show(layout)}")
    check_size("accumulation", accumulation, at_most=None)
    new = _target(layout, target, world_size)
    _same_model(layout, new)
    mapping = _survivors(layout, new)
    taken = set(mapping)
    everyone = range(new.rank_offset, new.rank_offset + new.world_size)
    joining = tuple(rank for rank in everyone if rank not in taken)
    total = layout.dp * accumulation
    steps = nearest_steps(total, new.dp)
    return Growth(
        layout,
        new,
        mapping,
        joining,
        _pulls(layout, new, mapping),
        classify(layout, new, mapping, joining),
        steps,
        steps * new.dp == total,
    )
