"""Per kind, which communicators a re-layout reuses, shrinks or rebuilds (private)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import chain, compress, repeat
from operator import add

import attrs

from .._megatron.topology import Topology

__all__ = ["KindChange", "classify"]


@attrs.frozen
class KindChange:
    """What happens to the communicators of one kind.

    ``shrinks`` pairs the index of each shrunk old group with the members that leave it, as
    positions in that group (what ``torch.distributed.shrink_group`` takes). ``gone`` counts
    the old groups no active rank stays in (destroyed, nothing to build).
    """

    kind: str
    reuse: int
    shrink: int
    rebuild: int
    gone: int = 0
    shrinks: tuple[tuple[int, tuple[int, ...]], ...] = ()


def classify(
    old: Topology, new: Topology, rank_of: Sequence[int | None], fresh: Sequence[int]
) -> tuple[KindChange, ...]:
    """Every kind of ``new``: a new group is reused when it is an old group (mapped), shrunk
    when it is an old group minus the ranks that leave, else rebuilt.

    Algorithm: label every old rank with its old group index; a new group made only of mapped
    survivors that all carry one label ``g`` is old group ``g`` minus the ranks that leave iff
    its size equals the number of ``g``'s members still active.
    """
    offset, new_offset = old.rank_offset, new.rank_offset
    old_of: list[int] = [-1] * new.world_size
    for local, target in enumerate(rank_of):
        if target is not None:
            old_of[target - new_offset] = local
    for rank in fresh:
        old_of[rank - new_offset] = -1
    alive = [target is not None for target in rank_of]
    changes = []
    for kind in new.kinds:
        if kind not in old.kinds:
            changes.append(KindChange(kind, 0, 0, len(new.groups(kind))))
            continue
        if old.kind(kind).grid is not None and new.kind(kind).grid is not None:
            if old.size(kind) == new.size(kind) == 1:
                changes.append(_singletons(kind, old_of, rank_of))
            else:
                changes.append(_grid_kind(old, new, kind, old_of, alive))
            continue
        label = [-1] * old.world_size
        olds = old.groups(kind)
        active = [0] * len(olds)
        sizes = [0] * len(olds)
        for index, group in enumerate(olds):
            sizes[index] = len(group)
            for rank in group:
                label[rank - offset] = index
                if rank_of[rank - offset] is not None:
                    active[index] += 1
        # the old group of each new rank (-1: a fresh rank); shifted so group ranks index it
        came = [-1] * new_offset + [-1 if o < 0 else label[o] for o in old_of]
        reuse = shrink = rebuild = 0
        shrinks = []
        for group in new.groups(kind):
            index = came[group[0]]
            if index < 0 or {came[r] for r in group} != {index} or len(group) != active[index]:
                rebuild += 1
            elif active[index] == sizes[index]:
                reuse += 1
            else:
                shrink += 1
                members = olds[index]
                leave = tuple(i for i, r in enumerate(members) if rank_of[r - offset] is None)
                shrinks.append((index, leave))
        gone = sum(1 for count in active if count == 0)
        changes.append(KindChange(kind, reuse, shrink, rebuild, gone, tuple(shrinks)))
    return tuple(changes)


def _singletons(kind: str, old_of: Sequence[int], rank_of: Sequence[int | None]) -> KindChange:
    """One-rank groups of a grid kind (every rank has one): a survivor's own group is reused,
    a fresh rank's is built."""
    reuse = sum(1 for source in old_of if source >= 0)
    gone = sum(1 for target in rank_of if target is None)
    return KindChange(kind, reuse, 0, len(old_of) - reuse, gone)


def _labels(topo: Topology, kind: str) -> list[int]:
    """Each local rank's group index for a grid kind: the other axes' coordinates read as a
    mixed-radix number, innermost fastest (the order of ``Grid.groups``), built from repeated
    blocks rather than rank by rank."""
    described = topo.kind(kind)
    assert described.grid is not None  # a grid kind
    _, outer = described.grid.digits(*described.axes)
    world = topo.world_size
    labels = [0] * world
    weight = 1
    for size, stride in outer:
        if size > 1:
            block = list(chain.from_iterable(repeat(c * weight, stride) for c in range(size)))
            labels = list(map(add, labels, block * (world // (size * stride))))
            weight *= size
    return labels


def _grid_kind(
    old: Topology, new: Topology, kind: str, old_of: Sequence[int], alive: Sequence[bool]
) -> KindChange:
    """``classify`` for a grid kind, from group labels computed by arithmetic, not enumeration."""
    old_label, new_label = _labels(old, kind), _labels(new, kind)
    old_size, new_size = old.size(kind), new.size(kind)
    active = Counter(compress(old_label, alive))
    came = list(map([*old_label, -1].__getitem__, old_of))  # -1 (fresh) reads the last item
    sources: dict[int, set[int]] = {}
    for pair in set(zip(new_label, came, strict=True)):
        sources.setdefault(pair[0], set()).add(pair[1])
    reuse = shrink = rebuild = 0
    shrinks = []
    offset = old.rank_offset
    for group in range(new.world_size // new_size):
        (index, *more) = sources[group]
        if more or index < 0 or active[index] != new_size:
            rebuild += 1
        elif active[index] == old_size:
            reuse += 1
        else:
            shrink += 1
            members = old.groups(kind)[index]
            leave = tuple(i for i, r in enumerate(members) if not alive[r - offset])
            shrinks.append((index, leave))
    gone = old.world_size // old_size - len(active)
    return KindChange(kind, reuse, shrink, rebuild, gone, tuple(shrinks))
