"""``reshape``: a re-layout after lost ranks or hosts, and the :class:`Reshape` it returns."""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from .._args import check_index, check_size, show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._megatron.topology import Topology
from .hosts import HostTable, Relaunch, relaunch
from .policies import POLICY_TABLE, Candidate, Loss
from .regroup import KindChange, classify

__all__ = ["POLICIES", "KindChange", "Relaunch", "Reshape", "nearest_steps", "reshape"]

POLICIES = ("auto", *POLICY_TABLE)
"""The ``policy`` choices: ``auto`` (given spares when they cover the loss, else the cheapest of
the rows of ``POLICY_TABLE``, tried in order) and each row's name: ``drop``, ``spares``,
``shrink``."""


@attrs.frozen(repr=False)
class Reshape:
    """A re-layout after a loss: the new layout, where every old rank goes, what moves.

    ``rank_of(old)`` is the old rank's new rank, or None (lost, replaced by a spare, or idle in
    reserve). ``sources`` pairs each new rank that must fetch its shard with the surviving old
    rank that holds it (possibly one the new layout leaves idle: it sends its shard, then
    leaves; whenever some layout the survivors fill needs only surviving shards, a policy
    continues and names these holders). ``communicators`` says, per kind of the new layout,
    how many groups are reused, trimmed (an old group minus the ranks that leave) or rebuilt.
    ``accumulation`` keeps the global batch ``dp * accumulation`` (micro-batches a step) when
    ``batch_kept``, else is the nearest (:func:`nearest_steps`). ``hosts`` numbers and names
    the hosts, ``spares`` are the spare host numbers considered, ``rejected`` the policies
    ``auto`` tried and could not take, with the reason; :attr:`relaunch` is the hosts that run
    the new layout.

    >>> from topology import Topology, reshape
    >>> r = reshape(Topology(16, tp=2, pp=2), lost_ranks=[5], gpus_per_node=2)
    >>> r.policy, r.new.dp, r.rank_of(5), r.rank_of(6), r.kept, r.active
    ('drop', 3, None, 4, 12, 12)
    >>> r.old_global_batch, r.global_batch, r.batch_kept
    (4, 3, False)
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
    hosts: HostTable
    spares: tuple[int, ...] = ()
    old_accumulation: int = 1
    rejected: tuple[tuple[str, str], ...] = ()

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

    @property
    def global_batch(self) -> int:
        """Micro-batches a step in the new layout: ``new.dp * accumulation`` (exact)."""
        return self.new.dp * self.accumulation

    @property
    def old_global_batch(self) -> int:
        """Micro-batches a step before: ``old.dp * old_accumulation``."""
        return self.old.dp * self.old_accumulation

    @property
    def relaunch(self) -> Relaunch:
        """The hosts that run the new layout in node order, the idle and lost hosts, and the
        shard sources by host (computed on each access)."""
        return relaunch(
            self.hosts,
            self.mapping,
            self.new.world_size,
            (self.old.rank_offset, self.new.rank_offset),
            self.replaced,
            self.sources,
            self.lost,
            self.spares,
        )

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
    """``values`` as a tuple of ranks (each a non-negative int)."""
    return tuple(
        check_index(f"{name}[{index}]", value, at_most=None) for index, value in enumerate(values)
    )


def _host_numbers(name: str, values: Iterable[int | str], table: HostTable) -> list[int]:
    """``values`` (host numbers or names) as host numbers."""
    found = []
    for index, value in enumerate(values):
        if not isinstance(value, str):
            value = check_index(f"{name}[{index}]", value, at_most=None)
        found.append(table.number(value, "lost host" if name == "lost_hosts" else "spare host"))
    return found


def _table(layout: Topology, gpus_per_node: int | None, allocation: object) -> HostTable:
    """The hosts the layout ran on: the allocation's (its GPU counts), else ``gpus_per_node``
    GPUs each; a ``gpus_per_node`` that contradicts the allocation is refused."""
    world = layout.world_size
    if allocation is None:
        if gpus_per_node is None:
            raise TopologyError(
                "give gpus_per_node (the GPUs of every host) or an allocation (its hosts' GPUs)"
            )
        check_size("gpus_per_node", gpus_per_node)
        if world % gpus_per_node:
            raise TopologyError(
                f"gpus_per_node({gpus_per_node}) must divide world_size({world}); "
                "give the GPUs each host runs"
            )
        return HostTable(None, gpus_per_node, world)
    if not isinstance(allocation, Allocation):
        raise TopologyError(f"allocation must be an Allocation, got {show(allocation)}")
    if gpus_per_node is not None:
        check_size("gpus_per_node", gpus_per_node)
        other = next((h for h in allocation.hosts if h.gpus != gpus_per_node), None)
        if other is not None:
            raise TopologyError(
                f"gpus_per_node({gpus_per_node}) contradicts the allocation, whose host "
                f"{show(other.name)} has {other.gpus} GPUs; leave gpus_per_node out (the "
                "allocation gives each host's GPUs)"
            )
    if allocation.gpus < world:
        raise TopologyError(
            f"the allocation lists {len(allocation.hosts)} hosts with {allocation.gpus} GPUs "
            f"but the layout needs {world} ranks (world_size); give the allocation the job ran on"
        )
    return HostTable(allocation, None, world)


def reshape(
    layout: Topology,
    *,
    gpus_per_node: int | None = None,
    lost_ranks: Iterable[int] = (),
    lost_hosts: Iterable[int | str] = (),
    spares: Iterable[int | str] = (),
    allocation: Allocation | None = None,
    policy: str = "auto",
    accumulation: int = 1,
) -> Reshape:
    """A re-layout of ``layout`` that goes on without the lost ranks or hosts.

    The hosts: with an ``allocation``, host ``h`` is ``allocation.hosts[h]`` (list them in the
    launcher's node order), its GPU count comes from there (ragged hosts too: ranks fill the
    hosts in order, ``offset + first[h]`` onwards) and ``gpus_per_node``, if given, must agree
    with every host; without one, host ``h`` holds ranks ``offset + h * gpus_per_node`` onwards
    and is named ``host<h>``. Lost hosts and spares are host numbers or names. Spares are hosts
    outside the layout's; with an allocation its hosts after the layout's are the spares when
    ``spares`` is empty, and a spare sharing a lost host's innermost domain (NVLink domain, then
    rack, ...) is preferred. ``auto`` takes the spares when they cover the loss (the layout and
    the batch stay), else the feasible policy with the fewest rebuilt communicators, then the
    fewest moved shards, then the most ranks. ``accumulation`` is the gradient-accumulation
    steps now; the result's keeps ``dp * accumulation`` when it can (exact integers).

    >>> from topology import Allocation, Host, Topology
    >>> hosts = Allocation([Host(f"node{i}", 4) for i in range(1, 6)])
    >>> r = reshape(Topology(16, tp=4), lost_hosts=["node2"], allocation=hosts)
    >>> r.policy, r.replaced, r.relaunch.hosts
    ('spares', ((1, 4),), ('node1', 'node5', 'node3', 'node4'))

    Raises:
        TopologyError: for invalid arguments (a host name no host has: the message lists the
            hosts), or when the job cannot continue (every replica of some shard lost, fewer
            survivors than one model replica), saying why.
    """
    if not isinstance(layout, Topology):
        raise TopologyError(f"layout must be a Topology, got {show(layout)}")
    if policy not in POLICIES:
        raise TopologyError(f"policy must be one of {', '.join(POLICIES)}, got {show(policy)}")
    check_size("accumulation", accumulation, at_most=None)
    table = _table(layout, gpus_per_node, allocation)
    hosts = table.used
    offset = layout.rank_offset
    lost = set(_ranks("lost_ranks", lost_ranks))
    given = list(lost_hosts)
    for value, host in zip(given, _host_numbers("lost_hosts", given, table), strict=True):
        if host >= hosts:
            if isinstance(value, str):
                raise TopologyError(
                    f"lost host {show(value)} runs none of the layout's ranks; its hosts: "
                    f"{table.names(range(hosts))}"
                )
            raise TopologyError(f"lost host {host} is outside the {hosts} hosts 0 to {hosts - 1}")
        lost.update(offset + local for local in table.ranks(host))
    outside = sorted(r for r in lost if not offset <= r < offset + layout.world_size)
    if outside:
        raise TopologyError(
            f"lost rank {outside[0]} is outside the layout's ranks {offset} to "
            f"{offset + layout.world_size - 1}"
        )
    if not lost:
        raise TopologyError("no rank is lost; give lost_ranks or lost_hosts")
    spare = tuple(_host_numbers("spares", spares, table))
    count = table.count
    if count is not None:
        spare = spare or tuple(range(hosts, count))
        beyond = [s for s in spare if s >= count]
        if beyond:
            raise TopologyError(
                f"spare host {beyond[0]} is not in the allocation's {count} "
                "hosts; list the spares in the allocation"
            )
    clash = sorted(set(spare) & set(range(hosts)))
    if clash or len(set(spare)) != len(spare):
        raise TopologyError(
            f"spares must be distinct hosts outside the layout's 0 to {hosts - 1}, got "
            f"{show(spare) if count is None else show([table.name(s) for s in spare])}"
        )
    loss = Loss(layout, frozenset(lost), table, spare)
    return _choose(loss, policy, accumulation)


def _choose(loss: Loss, policy: str, accumulation: int) -> Reshape:
    """Run ``policy`` (or, for ``auto``, the rows of the table in turn) and keep the best."""
    layout, spare = loss.layout, loss.spares
    auto = policy == "auto"
    rows = list(POLICY_TABLE.values()) if auto else [POLICY_TABLE[policy]]
    if auto and spare:  # given spares go first, and are taken whenever they cover the loss
        rows.sort(key=lambda row: not row.needs_spares)
    results: list[Reshape] = []
    errors: list[tuple[str, str]] = []
    replica = layout.world_size // layout.dp
    most = (layout.world_size - len(loss.lost)) // replica * replica
    free = (0, 0, -most)  # rebuilds nothing, moves nothing, keeps every surviving whole replica
    for row in rows:
        if auto and row.needs_spares and not spare:
            continue
        if row.whole_replicas and results and min(map(_cost, results)) <= free:
            continue  # an earlier row already does as well as this one can
        try:
            found = row.relayout(loss)
        except TopologyError as error:
            if not auto:
                raise
            errors.append((row.name, str(error)))
            continue
        results.append(_result(loss, row.name, found, accumulation))
        if auto and row.needs_spares:
            break
    if not results:
        raise TopologyError(f"the job cannot continue: {'; and '.join(e for _, e in errors)}")
    return attrs.evolve(min(results, key=_cost), rejected=tuple(errors))


def _cost(r: Reshape) -> tuple[int, int, int]:
    """What ``auto`` minimises: rebuilt communicators, moved shards, then idle ranks."""
    return (r.counts()["rebuild"], len(r.sources), -r.active)


def nearest_steps(total: int, dp: int) -> int:
    """The accumulation steps at ``dp`` replicas nearest to ``total`` micro-batches a step (a
    tie to the even count, as ``round`` does), at least 1; exact integers for any size.

    >>> nearest_steps(12, 3), nearest_steps(8, 7), nearest_steps(6, 4), nearest_steps(2**80 + 1, 2)
    (4, 1, 2, 604462909807314587353088)
    """
    steps, rest = divmod(total, dp)
    if 2 * rest > dp or (2 * rest == dp and steps % 2):
        steps += 1
    return max(1, steps)


def _result(
    loss: Loss,
    policy: str,
    c: Candidate,
    accumulation: int,
) -> Reshape:
    """Policy ``policy``'s candidate with its communicators counted and its batch kept."""
    old = loss.layout
    total = old.dp * accumulation
    steps = nearest_steps(total, c.new.dp)
    return Reshape(
        old,
        c.new,
        policy,
        tuple(sorted(loss.lost)),
        c.rank_of,
        c.sources,
        c.hosts,
        classify(old, c.new, c.rank_of, c.fresh),
        steps,
        steps * c.new.dp == total,
        loss.hosts,
        loss.spares,
        accumulation,
    )
