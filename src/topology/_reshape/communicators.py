"""Per kind, which communicators a re-layout reuses, shrinks or rebuilds (private)."""

from __future__ import annotations

from collections.abc import Sequence

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
    changes = []
    for kind in new.kinds:
        if kind not in old.kinds:
            changes.append(KindChange(kind, 0, 0, len(new.groups(kind))))
            continue
        if old.size(kind) == new.size(kind) == 1 and new.kind(kind).grid is not None:
            changes.append(_singletons(kind, old_of, rank_of))
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
