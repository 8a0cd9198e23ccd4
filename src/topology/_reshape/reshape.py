"""``reshape``: a re-layout after lost ranks or hosts, and the :class:`Reshape` it returns."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._args import check_index, check_size, show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._megatron.topology import Topology
from .policies import POLICY_TABLE, Candidate, Loss
from .regroup import KindChange, classify

__all__ = ["POLICIES", "KindChange", "Reshape", "reshape"]

POLICIES = ("auto", *POLICY_TABLE)
"""The ``policy`` choices: ``auto`` (the cheapest of the rows of ``POLICY_TABLE``, tried in
order) and each row's name: ``drop``, ``spares``, ``shrink``."""


@attrs.frozen(repr=False)
class Reshape:
    """A re-layout after a loss: the new layout, where every old rank goes, what moves.

    ``rank_of(old)`` is the old rank's new rank, or None (lost, replaced by a spare, or idle in
    reserve). ``sources`` pairs each new rank that must fetch its shard with the surviving old
    rank that holds it. ``communicators`` says, per kind of the new layout, how many groups are
    reused, trimmed (an old group minus the ranks that leave) or rebuilt. ``accumulation``
    keeps the global batch ``dp * accumulation`` when ``batch_kept``, else is the nearest.

    >>> from topology import Topology, reshape
    >>> r = reshape(Topology(16, tp=2, pp=2), lost_ranks=[5], gpus_per_node=2)
    >>> r.policy, r.new.dp, r.rank_of(5), r.rank_of(6), r.kept, r.active
    ('drop', 3, None, 4, 12, 12)
    """

    old: Topology
    new: Topology
    policy: str
    lost: tuple[int, ...]
    mapping: tuple[int | None, ...]
    sources: tuple[tuple[int, int], ...]
    replaced: tuple[tuple[int, int], ...]
    communicators: tuple[KindChange, ...]
    accumulation: int
    batch_kept: bool

    def rank_of(self, rank: int) -> int | None:
        """The new rank of old ``rank``, or None when it has none."""
        local = rank - self.old.rank_offset
        if type(rank) is not int or not 0 <= local < self.old.world_size:
            raise TopologyError(
                f"rank {show(rank)} is outside the old layout's ranks "
                f"{self.old.rank_offset} to {self.old.rank_offset + self.old.world_size - 1}"
            )
        return self.mapping[local]

    @property
    def active(self) -> int:
        """How many old ranks survive with a new rank."""
        return len(self.mapping) - self.mapping.count(None)

    @property
    def moved(self) -> tuple[int, ...]:
        """The new ranks whose shard changes and must be fetched (see ``sources``)."""
        return tuple(new for new, _ in self.sources)

    @property
    def kept(self) -> int:
        """How many active survivors keep their shard coordinates."""
        fresh = {new for new, _ in self.sources}
        return sum(1 for r in self.mapping if r is not None and r not in fresh)

    def counts(self) -> dict[str, int]:
        """Communicators reused, trimmed and rebuilt, over every kind."""
        return {
            "reuse": sum(c.reuse for c in self.communicators),
            "trim": sum(c.trim for c in self.communicators),
            "rebuild": sum(c.rebuild for c in self.communicators),
        }

    def __repr__(self) -> str:
        return (
            f"Reshape({self.policy}: {self.old.world_size} -> {self.new.world_size} ranks, "
            f"lost {len(self.lost)}, kept {self.kept}/{self.active}, {self.counts()})"
        )


def _ranks(name: str, values: Iterable[int]) -> tuple[int, ...]:
    """``values`` as a tuple of ranks or host numbers (each a non-negative int)."""
    return tuple(
        check_index(f"{name}[{index}]", value, at_most=None) for index, value in enumerate(values)
    )


def reshape(
    layout: Topology,
    *,
    gpus_per_node: int,
    lost_ranks: Iterable[int] = (),
    lost_hosts: Iterable[int] = (),
    spares: Iterable[int] = (),
    allocation: Allocation | None = None,
    policy: str = "auto",
    accumulation: int = 1,
) -> Reshape:
    """A re-layout of ``layout`` that goes on without the lost ranks or hosts.

    Host ``h`` holds ranks ``offset + h * gpus_per_node`` onwards. Spares are host numbers
    outside the layout. With an ``allocation`` (host ``h`` is ``allocation.hosts[h]``; its
    hosts after the layout's are the spares when ``spares`` is empty), a spare sharing a lost
    host's innermost domain (NVLink domain, then rack, ...) is preferred. ``auto`` takes the
    feasible policy with the fewest rebuilt communicators, then the fewest moved shards, then
    the most ranks.

    Raises:
        TopologyError: for invalid arguments, or when the job cannot continue (every replica
            of some shard lost, fewer survivors than one model replica), saying why.
    """
    if not isinstance(layout, Topology):
        raise TopologyError(f"layout must be a Topology, got {show(layout)}")
    check_size("gpus_per_node", gpus_per_node)
    if layout.world_size % gpus_per_node:
        raise TopologyError(
            f"gpus_per_node({gpus_per_node}) must divide world_size({layout.world_size}); "
            "give the GPUs each host runs"
        )
    if policy not in POLICIES:
        raise TopologyError(f"policy must be one of {', '.join(POLICIES)}, got {show(policy)}")
    check_size("accumulation", accumulation, at_most=None)
    hosts = layout.world_size // gpus_per_node
    offset = layout.rank_offset
    lost = set(_ranks("lost_ranks", lost_ranks))
    for host in _ranks("lost_hosts", lost_hosts):
        if host >= hosts:
            raise TopologyError(f"lost host {host} is outside the {hosts} hosts 0 to {hosts - 1}")
        lost.update(range(offset + host * gpus_per_node, offset + (host + 1) * gpus_per_node))
    outside = sorted(r for r in lost if not offset <= r < offset + layout.world_size)
    if outside:
        raise TopologyError(
            f"lost rank {outside[0]} is outside the layout's ranks {offset} to "
            f"{offset + layout.world_size - 1}"
        )
    if not lost:
        raise TopologyError("no rank is lost; give lost_ranks or lost_hosts")
    spare = _ranks("spares", spares)
    if allocation is not None:
        if not isinstance(allocation, Allocation):
            raise TopologyError(f"allocation must be an Allocation, got {show(allocation)}")
        if len(allocation.hosts) < hosts:
            raise TopologyError(
                f"the allocation lists {len(allocation.hosts)} hosts but the layout needs "
                f"{hosts} (world_size {layout.world_size} / gpus_per_node {gpus_per_node}); "
                "give the allocation the job ran on"
            )
        spare = spare or tuple(range(hosts, len(allocation.hosts)))
        beyond = [s for s in spare if s >= len(allocation.hosts)]
        if beyond:
            raise TopologyError(
                f"spare host {beyond[0]} is not in the allocation's {len(allocation.hosts)} "
                "hosts; list the spares in the allocation"
            )
    clash = sorted(set(spare) & set(range(hosts)))
    if clash or len(set(spare)) != len(spare):
        raise TopologyError(
            f"spares must be distinct hosts outside the layout's 0 to {hosts - 1}, got {spare}"
        )
    loss = Loss(layout, frozenset(lost), gpus_per_node, spare, allocation)
    results: list[Reshape] = []
    errors: list[str] = []
    rows = POLICY_TABLE.values() if policy == "auto" else (POLICY_TABLE[policy],)
    replica = layout.world_size // layout.dp
    most = (layout.world_size - len(loss.lost)) // replica * replica
    free = (0, 0, -most)  # rebuilds nothing, moves nothing, keeps every surviving whole replica
    for row in rows:
        if policy == "auto" and row.needs_spares and not spare:
            continue
        if row.whole_replicas and results and min(map(_cost, results)) <= free:
            continue  # an earlier row already does as well as this one can
        try:
            found = row.relayout(loss)
        except TopologyError as error:
            if policy != "auto":
                raise
            errors.append(str(error))
            continue
        results.append(_result(layout, row.name, found, loss.lost, accumulation))
    if not results:
        raise TopologyError(f"the job cannot continue: {'; and '.join(errors)}")
    return min(results, key=_cost)


def _cost(r: Reshape) -> tuple[int, int, int]:
    """What ``auto`` minimises: rebuilt communicators, moved shards, then idle ranks."""
    return (r.counts()["rebuild"], len(r.sources), -r.active)


def _result(
    old: Topology, policy: str, c: Candidate, lost: frozenset[int], accumulation: int
) -> Reshape:
    """Policy ``policy``'s candidate with its communicators counted and its batch kept."""
    total = old.dp * accumulation
    steps = max(1, round(total / c.new.dp))
    return Reshape(
        old,
        c.new,
        policy,
        tuple(sorted(lost)),
        c.rank_of,
        c.sources,
        c.hosts,
        classify(old, c.new, c.rank_of, c.fresh),
        steps,
        steps * c.new.dp == total,
    )
