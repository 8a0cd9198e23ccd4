"""Apply a :class:`topology.Reshape` to one rank's process groups, among survivors only (private).

Algorithm, on each surviving rank, per channel (kind, gloo companion, independent copy) of the
new layout: map the rank's new group back to torch ranks (``Reshape.rank_of`` inverted); when
that is exactly the rank's old group of the kind, the old communicator object is kept as it is
(``reuse``); otherwise (``trim``: the old group minus the ranks that leave; ``rebuild``) a new
one is made by its members alone (``new_group(use_local_synchronization=True)`` under a name
every member derives from the generation and the ranks), never through the default group, which
still holds the dead rank.
Old communicators nobody keeps are destroyed locally (gloo needs no peer for that). A rank the
reshape leaves without a new rank (idle, reserve) releases everything and gets None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

from topology import Reshape, Topology, TopologyError

from .._agreement import fingerprint
from .._args import check_index
from .._creation import Registry
from .._creation_plan import Channel, Settings, key_of
from .._process_groups import SINGLE, ProcessGroups, describe, hand_over, release, retire

__all__ = ["apply", "torch_rank_of"]


class _Renumbered(Registry):
    """A registry for a layout whose rank ``r`` is torch rank ``torch_rank[r]``: groups are
    asked for in layout ranks and made of torch ranks."""

    def __init__(self, rank: int, generation: str, torch_rank: Mapping[int, int]) -> None:
        super().__init__(rank, generation)
        self.torch_rank = dict(torch_rank)

    def new_local(self, ranks: tuple[int, ...], channel: Channel) -> Any:
        return super().new_local(tuple(self.torch_rank[r] for r in ranks), channel)


def _torch_rank(registry: Registry, rank: int) -> int:
    """The torch rank of layout ``rank`` (the same rank unless an earlier recovery renumbered)."""
    return registry.torch_rank[rank] if isinstance(registry, _Renumbered) else rank


def torch_rank_of(groups: ProcessGroups) -> int:
    """This process's torch rank (``groups.global_rank`` until an apply renumbered it)."""
    _, _, registry = hand_over(groups)
    return _torch_rank(registry, groups.global_rank)


def _check(groups: object, result: object, generation: object) -> tuple[ProcessGroups, Reshape]:
    if not isinstance(groups, ProcessGroups):
        raise TopologyError(
            f"groups must be the ProcessGroups the job trained with, got {type(groups).__name__}"
        )
    if not isinstance(result, Reshape):
        raise TopologyError(
            f"result must be a topology.Reshape, got {type(result).__name__}; "
            "compute it with topology.reshape(groups.topology, lost_ranks=...)"
        )
    check_index("generation", generation)  # the one agree_lost used
    if not isinstance(groups.topology, Topology) or groups.topology != result.old:
        raise TopologyError(
            f"the reshape starts from {result.old} but these groups realise {groups.topology}; "
            "compute it with topology.reshape(groups.topology, ...)"
        )
    if result.replaced:
        raise TopologyError(
            f"the reshape brings in {len(result.replaced)} spare host(s), which an in-process "
            "recovery cannot start; relaunch on the new hostfile, or reshape with "
            "policy='drop' or 'shrink'"
        )
    kept = [n for n in result.mapping if n is not None]
    if kept != sorted(kept):
        raise TopologyError(
            "the reshape renumbers survivors out of their order, so the positions in torch's "
            "groups (ascending torch ranks) would differ from the new layout's; reshape with "
            "policy='drop' or 'shrink'"
        )
    return groups, result


def _new(
    made: _Renumbered,
    members: tuple[int, ...],
    ranks: tuple[int, ...],
    channel: Channel,
    old: Mapping[int, Any],
) -> Any:
    """A new communicator of ``members`` (torch ``ranks``); if one of them never connects
    (torch's store wait for it ends after the kind's timeout), release what this call made and
    raise ``TopologyError`` naming them, the old groups left as they were."""
    try:
        return made.new_local(members, channel)
    except RuntimeError as error:
        for group in reversed(made.owned):
            if id(group) not in old:
                release(group)
        raise TopologyError(
            f"the new {channel.kind} group of torch ranks {', '.join(map(str, ranks))} was not "
            f"made within its timeout ({channel.timeout or 'torch default'}): one of them died "
            "or did not call apply; these groups are left as they were: call agree_lost with "
            f"a new generation and apply again ({type(error).__name__}: {error})"
        ) from error


def apply(groups: ProcessGroups, result: Reshape, *, generation: int) -> ProcessGroups | None:
    """This rank's process groups for ``result.new``: reused ones kept, new ones among survivors.

    SPMD contract: call on every surviving rank (after :func:`agree_lost`, with the
    :class:`~topology.Reshape` every survivor computed from the agreed lost ranks), with equal
    ``result`` and ``generation``. ``groups`` is consumed: afterwards only the returned object
    is usable (unless apply raises: then ``groups`` is as it was). Nothing here touches the
    default group or a lost rank; every new group gets the timeout its kind had.

    The returned object speaks the new layout's ranks (``global_rank`` is this rank's new rank,
    ``ranks(kind)`` new ranks), and so does ``agree_lost(groups_returned, ...)`` at the next
    failure, the numbering the next ``reshape(groups_returned.topology, ...)`` reads; the
    torch ranks of a group are
    ``torch.distributed.get_process_group_ranks(group)``; point-to-point calls take
    ``group_dst=`` / ``group_src=`` positions. Moved shards (``result.sources``) are the
    caller's to fetch. ``verify``, ``device_mesh`` and ``world_mesh`` need the whole default
    group, which holds the dead rank: do not call them on the result.

    Returns:
        The new groups, or None when this rank has no place in the new layout (idle or reserve):
        it has released every group and should leave (it is no rank of the new layout, so the
        next ``agree_lost`` neither expects nor waits for it).

    Raises:
        TopologyError: ``result`` does not start from ``groups.topology``, brings in spare hosts
            or renumbers survivors out of their order; or a member of a new group never
            connected within the kind's timeout (naming the group's ranks). ``groups`` is
            then as it was.

    >>> lost = agree_lost(groups, generation=g, deadline=timedelta(seconds=5))  # doctest: +SKIP
    >>> plan = reshape(groups.topology, lost_ranks=lost, gpus_per_node=8)  # doctest: +SKIP
    >>> groups = apply(groups, plan, generation=g)  # doctest: +SKIP
    """
    groups, result = _check(groups, result, generation)
    old, new = result.old, result.new
    me = groups.global_rank
    target = result.rank_of(me)
    settings, slots, registry = hand_over(groups)
    owned = {id(g): g for g in registry.owned}
    if target is None:
        retire(groups)
        for group in reversed(list(owned.values())):
            release(group)
        return None
    torch_rank = {
        n: _torch_rank(registry, local + old.rank_offset)
        for local, n in enumerate(result.mapping)
        if n is not None
    }
    channels = tuple(c for c in settings.channels if c.kind in new.kinds)
    renewed = Settings(new, new.world_size, settings.default_backend, channels, None)
    name = f"recovery/{generation}/{fingerprint(describe(renewed, 'local'))}"
    made = _Renumbered(target, name, torch_rank)
    kept: dict[Channel, Any] = {}
    for channel in channels:
        if not new.has_group(target, channel.kind):
            continue
        members = new.group_of(target, channel.kind)
        ranks = tuple(torch_rank[r] for r in members)  # ascending: the mapping keeps order
        before = slots.get(channel)
        was = (
            tuple(_torch_rank(registry, r) for r in old.group_of(me, channel.kind))
            if old.has_group(me, channel.kind)
            else None
        )
        if before not in (None, SINGLE, dist.group.WORLD) and was == ranks:
            key = key_of(ranks, channel)
            if key not in made.groups:
                made.keep(key, before)
            kept[channel] = made.groups[key]
        elif len(ranks) == 1:
            kept[channel] = SINGLE  # made on first use, by this rank alone
        else:
            kept[channel] = _new(made, members, ranks, channel, owned)
    retire(groups)
    still = {id(g) for g in made.owned}
    for group in reversed([g for i, g in owned.items() if i not in still]):
        release(group)
    return ProcessGroups(renewed, "local", target, kept, made)
