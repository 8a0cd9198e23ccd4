"""Per kind, which communicators a re-layout reuses, trims or rebuilds (private).

A communicator is *trimmed* when its new group is its old group minus the ranks that leave (the
word is not the ``shrink`` reshape policy, which may trim, reuse or rebuild any of them)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress, count
from operator import ne

import attrs

from .._layout.runs import point, volume
from .._layout.spans import Shape
from .._megatron.shapes import shape_of
from .._megatron.topology import Topology

__all__ = ["KindChange", "classify"]

_OUTSIDE = -(1 << 62)
"""The label of a rank in no group (and of a fresh rank's source); sums with any group's label
offset stay negative."""


@attrs.frozen
class KindChange:
    """What happens to the communicators of one kind.

    ``trims`` pairs the index of each trimmed old group with the members that leave it, as
    positions in that group (what ``torch.distributed.shrink_group`` takes to trim one in
    place). ``gone`` counts the old groups no active rank stays in (destroyed, nothing to build).
    """

    kind: str
    reuse: int
    trim: int
    rebuild: int
    gone: int = 0
    trims: tuple[tuple[int, tuple[int, ...]], ...] = ()


@attrs.frozen
class _Pairing:
    """How one family of new groups meets one family of old groups (the same for every kind
    with these two shapes).

    ``clean`` counts the new groups that are exactly the active members of one old group
    (mapped); when the groups lose members, ``trimmed`` gives each one's first rank and its old
    group's first rank.
    """

    groups: int
    clean: int
    gone: int
    trimmed: tuple[tuple[int, int], ...] = ()


def classify(
    old: Topology, new: Topology, rank_of: Sequence[int | None], fresh: Sequence[int]
) -> tuple[KindChange, ...]:
    """Every kind of ``new``: a new group is reused when it is an old group (mapped), trimmed
    when it is an old group minus the ranks that leave, else rebuilt.

    Algorithm: label every rank with its group (by arithmetic on the groups' translate shape,
    one label list per distinct shape, else by listing the groups); a new group ``g`` is old
    group ``G`` minus the ranks that leave iff the pairs ``(new label, old label of the
    source)`` over all new ranks hold ``(g, G)`` and no other pair with ``g`` or ``G``. It is
    reused when, in addition, the groups are equally large. Kinds whose old and new shapes are
    those of a kind already seen share its pairing.
    """
    offset, new_offset = old.rank_offset, new.rank_offset
    old_of: list[int] = [-1] * new.world_size
    for local, target in enumerate(rank_of):
        if target is not None:
            old_of[target - new_offset] = local
    for rank in fresh:
        old_of[rank - new_offset] = -1
    # True for an old rank that leaves, indexed by the rank itself
    leaves = [False] * offset + [target is None for target in rank_of]
    labels: dict[tuple[object, ...], list[int] | None] = {}
    pairings: dict[tuple[object, ...], _Pairing] = {}
    changes = []
    for kind in new.kinds:
        if kind not in old.kinds:
            changes.append(KindChange(kind, 0, 0, len(new.groups(kind))))
            continue
        grids = old.kind(kind).grid is not None and new.kind(kind).grid is not None
        if grids and old.size(kind) == new.size(kind) == 1:
            changes.append(_singletons(kind, old_of, rank_of))
            continue
        old_shape, new_shape = shape_of(old, kind), shape_of(new, kind)
        old_labels = _cached_labels(labels, old, old_shape)
        new_labels = _cached_labels(labels, new, new_shape)
        if old_shape is None or new_shape is None or old_labels is None or new_labels is None:
            changes.append(_listed(old, new, kind, old_of, rank_of))
            continue
        key = (old_shape.key, old.world_size, new_shape.key, new.world_size)
        if key not in pairings:
            pairings[key] = _pair(old_labels, new_labels, old_of, old_shape, new_shape)
        changes.append(_change(old, new, kind, pairings[key], leaves))
    return tuple(changes)


def _singletons(kind: str, old_of: Sequence[int], rank_of: Sequence[int | None]) -> KindChange:
    """One-rank groups of a grid kind (every rank has one): a survivor's own group is reused,
    a fresh rank's is built."""
    fresh = old_of.count(-1)
    return KindChange(kind, len(old_of) - fresh, 0, fresh, rank_of.count(None))


def _cached_labels(
    cache: dict[tuple[object, ...], list[int] | None], topo: Topology, shape: Shape | None
) -> list[int] | None:
    if shape is None:
        return None
    key = (shape.key, topo.rank_offset, topo.world_size)
    if key not in cache:
        cache[key] = _labels(shape, topo.rank_offset, topo.world_size)
    return cache[key]


def _labels(shape: Shape, offset: int, world: int) -> list[int] | None:
    """Each local rank's group number in ``shape`` (its outer runs read as a mixed-radix
    number, innermost fastest), negative for a rank in no group; None when the shape's runs are
    no digits of a rank (then the groups are listed instead).

    Built digit by digit, innermost first: an inner run repeats the list, an outer run
    concatenates copies shifted by the run's label weight, a gap between runs holds no group.
    """
    if shape.inner is None:
        return None
    runs = sorted(
        [(stride, size, False) for size, stride in shape.inner]
        + [(stride, size, True) for size, stride in shape.outer]
    )
    start = shape.offset - offset
    found = [0]
    span = weight = 1
    for stride, size, outer in runs:
        if stride < span:
            return None
        found += [_OUTSIDE] * (stride - span)
        if outer:
            found = [label + shift for shift in range(0, size * weight, weight) for label in found]
            weight *= size
        else:
            found *= size
        span += (size - 1) * stride
        del found[span:]  # the gap after the last copy
    if start < 0 or start + span > world:
        return None
    return [_OUTSIDE] * start + found + [_OUTSIDE] * (world - start - span)


def _pair(
    old_labels: list[int],
    new_labels: list[int],
    old_of: Sequence[int],
    old_shape: Shape,
    new_shape: Shape,
) -> _Pairing:
    """The new groups that are the active members of one old group, from label pairs.

    Algorithm: ``came`` is the old label of each new rank's source; a new group whose members'
    ``came`` differ, or an old group whose sources' new labels differ, is split (found by
    comparing every rank with the last member of its group); the rest pair one to one.
    """
    came = list(map([*old_labels, _OUTSIDE].__getitem__, old_of))  # -1 (fresh) reads the last
    to_old = dict(zip(new_labels, came, strict=True))
    to_new = dict(zip(came, new_labels, strict=True))
    split_new = set(compress(new_labels, map(ne, came, map(to_old.__getitem__, new_labels))))
    split_old = set(compress(came, map(ne, new_labels, map(to_new.__getitem__, came))))
    clean = [
        (g, o)
        for g, o in to_old.items()
        if g >= 0 and o >= 0 and g not in split_new and o not in split_old
    ]
    groups = volume(new_shape.outer)
    gone = volume(old_shape.outer) - sum(1 for label in to_new if label >= 0)
    if volume(old_shape.inner or ()) == volume(new_shape.inner or ()):
        return _Pairing(groups, len(clean), gone)
    new_base, old_base = new_shape.offset, old_shape.offset
    trimmed = tuple(
        (new_base + point(g, new_shape.outer), old_base + point(o, old_shape.outer))
        for g, o in clean
    )
    return _Pairing(groups, len(clean), gone, trimmed)


def _change(
    old: Topology, new: Topology, kind: str, pairing: _Pairing, leaves: Sequence[bool]
) -> KindChange:
    """A pairing read for ``kind``: groups numbered as ``kind`` numbers them."""
    rebuild = pairing.groups - pairing.clean
    if not pairing.trimmed:
        return KindChange(kind, pairing.clean, 0, rebuild, pairing.gone)
    olds = old.groups(kind)
    trims = []
    for new_rank, old_rank in pairing.trimmed:
        index = old.group_index(old_rank, kind)
        leave = tuple(compress(count(), map(leaves.__getitem__, olds[index])))
        trims.append((new.group_index(new_rank, kind), index, leave))
    trims.sort()
    return KindChange(kind, 0, pairing.clean, rebuild, pairing.gone, tuple(t[1:] for t in trims))


def _listed(
    old: Topology,
    new: Topology,
    kind: str,
    old_of: Sequence[int],
    rank_of: Sequence[int | None],
) -> KindChange:
    """``classify`` for a kind whose groups are no translates of runs: the groups listed.

    Algorithm: label every old rank with its old group index; a new group made only of mapped
    survivors that all carry one label ``g`` is old group ``g`` minus the ranks that leave iff
    its size equals the number of ``g``'s members still active.
    """
    offset, new_offset = old.rank_offset, new.rank_offset
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
    reuse = trim = rebuild = 0
    trims = []
    for group in new.groups(kind):
        index = came[group[0]]
        if index < 0 or {came[r] for r in group} != {index} or len(group) != active[index]:
            rebuild += 1
        elif active[index] == sizes[index]:
            reuse += 1
        else:
            trim += 1
            members = olds[index]
            leave = tuple(i for i, r in enumerate(members) if rank_of[r - offset] is None)
            trims.append((index, leave))
    gone = sum(1 for count in active if count == 0)
    return KindChange(kind, reuse, trim, rebuild, gone, tuple(trims))
