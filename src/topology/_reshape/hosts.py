"""The hosts of a re-layout: which host runs which old rank, names and numbers, and the hosts a
relaunch runs on (private).

Host numbers are positions in node order. With an allocation, host ``h`` is
``allocation.hosts[h]`` (hosts in the launcher's order): its name and its GPU count come from
there, ranks fill the hosts in that order (host ``h`` runs the layout's local ranks
``first[h]`` to ``first[h] + gpus[h] - 1``, the last host used possibly fewer) and the hosts after
the layout's are the spares. Without one, every host has ``gpus_per_node`` GPUs and host ``h``
is named ``host<h>``; spares are any numbers past the layout's hosts.

>>> from topology import Allocation, Host
>>> table = HostTable(Allocation([Host("a", 4), Host("b", 2), Host("c", 4)]), None, 6)
>>> table.used, table.first, table.host_of(5), table.number("c", "spare host")
(2, (0, 4, 6), 1, 2)
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Sequence

import attrs

from .._args import show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.hostlist import compress_hostlist

__all__ = ["HostTable", "Relaunch", "relaunch"]

_SYNTHETIC = re.compile(r"host(0|[1-9][0-9]{0,15})")
"""The name of host ``h`` without an allocation (no leading zeros, so a name is one number)."""

_LISTED = 60
"""The longest list of valid hosts an error message shows (a host list, cut with an ellipsis)."""


def _some(names: Sequence[str]) -> str:
    """``names`` as a short host list for a message: compressed, cut past :data:`_LISTED`."""
    text = compress_hostlist(names)  # every Host name is a host-list word
    return text if len(text) <= _LISTED else text[: _LISTED - 1] + "…"


@attrs.frozen
class HostTable:
    """The hosts a layout of ``world_size`` ranks ran on, by number (see the module docstring).

    Exactly one of ``allocation`` and ``gpus_per_node`` is given.
    """

    allocation: Allocation | None
    gpus_per_node: int | None
    world_size: int
    first: tuple[int, ...] = attrs.field(init=False, eq=False, repr=False)
    """The layout's first local rank on each host it runs on, then ``world_size``."""
    _index: dict[str, int] = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if self.allocation is None:
            first = tuple(range(0, self.world_size + 1, self._uniform))
            index: dict[str, int] = {}  # pragma: no mutate - names are looked up in allocations
        else:
            starts = itertools.accumulate((h.gpus for h in self.allocation.hosts), initial=0)
            first = tuple(itertools.takewhile(lambda s: s < self.world_size, starts))
            first += (self.world_size,)
            index = {h.name: i for i, h in enumerate(self.allocation.hosts)}
        object.__setattr__(self, "first", first)
        object.__setattr__(self, "_index", index)

    @property
    def _uniform(self) -> int:
        """Every host's GPUs without an allocation (``reshape`` then requires them)."""
        assert self.gpus_per_node is not None
        return self.gpus_per_node

    @property
    def used(self) -> int:
        """How many hosts the layout runs on (hosts ``0 .. used - 1``)."""
        return len(self.first) - 1

    @property
    def count(self) -> int | None:
        """How many hosts there are in all (None without an allocation: any number)."""
        return None if self.allocation is None else len(self.allocation.hosts)

    def name(self, host: int) -> str:
        """Host ``host``'s name."""
        if self.allocation is None:
            return f"host{host}"
        return self.allocation.hosts[host].name

    def gpus(self, host: int) -> int:
        """How many GPUs host ``host`` has."""
        if self.allocation is None:
            return self._uniform
        return self.allocation.hosts[host].gpus

    def host_of(self, local: int) -> int:
        """The host running the layout's local rank ``local``."""
        if self.allocation is None:
            return local // self._uniform
        return bisect.bisect_right(self.first, local) - 1

    def ranks(self, host: int) -> range:
        """The layout's local ranks on host ``host`` (one of the layout's hosts)."""
        return range(self.first[host], self.first[host + 1])

    def number(self, value: int | str, what: str) -> int:
        """Host ``value`` (a number, checked by the caller, or a name) as a number.

        Raises:
            TopologyError: a name no host has, saying which hosts there are.
        """
        if not isinstance(value, str):
            return value
        if self.allocation is None:
            match = _SYNTHETIC.fullmatch(value)
            if match is None:
                raise TopologyError(
                    f"{what} {show(value)} is no host: without an allocation hosts are named "
                    f"host0 to host{self.used - 1} (host<number>); give a host number, or the "
                    "allocation that names the hosts"
                )
            return int(match[1])
        found = self._index.get(value)
        if found is None:
            names = [h.name for h in self.allocation.hosts]
            raise TopologyError(
                f"{what} {show(value)} is not in the allocation; its hosts: {_some(names)}"
            )
        return found

    def names(self, hosts: Sequence[int]) -> str:
        """Hosts ``hosts`` as a short host list, for a message."""
        return _some([self.name(h) for h in hosts])


@attrs.frozen
class Relaunch:
    """The hosts that run the new layout after a reshape, in node order, and what moves.

    Node rank ``i`` (line ``i`` of a hostfile) is ``hosts[i]``; it runs ``slots[i]`` ranks, the
    new ranks ``first_rank[i]`` onwards, on its local GPUs ``gpus[i]`` (a survivor keeps its
    GPU, a spare uses its first ones). ``idle`` are the hosts that survive but run no rank
    (dropped, left over or unused spares), ``lost`` the hosts that held a lost rank, and
    ``sources`` each new rank that must fetch its shard as ``(new rank, its host, the old rank
    holding the shard, that rank's host)``.

    >>> from topology import Topology, reshape
    >>> r = reshape(Topology(16, tp=2, pp=2), lost_hosts=[1], gpus_per_node=4)
    >>> launch = r.relaunch
    >>> launch.hosts, launch.slots, launch.lost, launch.idle
    (('host0', 'host2'), (4, 4), ('host1',), ('host3',))
    """

    hosts: tuple[str, ...]
    slots: tuple[int, ...]
    first_rank: tuple[int, ...]
    gpus: tuple[tuple[int, ...], ...]
    idle: tuple[str, ...]
    lost: tuple[str, ...]
    sources: tuple[tuple[int, str, int, str], ...]

    @property
    def nproc_per_node(self) -> int | None:
        """The ranks every host runs when all run as many (torchrun's ``--nproc-per-node``),
        else None."""
        return self.slots[0] if len(set(self.slots)) == 1 else None


def _pieces(
    table: HostTable,
    mapping: Sequence[int | None],
    new_offset: int,
    replaced: Sequence[tuple[int, int]],
) -> list[tuple[int, int, tuple[int, ...]]]:
    """``(first new local rank, host, local GPUs)`` of every new rank, a host's whole block at
    once where its ranks map to consecutive new ranks (the usual case), else rank by rank."""
    pieces: list[tuple[int, int, tuple[int, ...]]] = []
    for h in range(table.used):
        low, high = table.first[h], table.first[h + 1]
        chunk = mapping[low:high]
        # the fast path; rank by rank (below) gives the same pieces, so no mutant of these
        # three lines changes an answer
        first = chunk[0]  # pragma: no mutate
        block = range(first or 0, (first or 0) + len(chunk))  # pragma: no mutate
        if first is not None and tuple(chunk) == tuple(block):  # pragma: no mutate
            pieces.append((first - new_offset, h, tuple(range(len(chunk)))))
            continue
        pieces += [(t - new_offset, h, (g,)) for g, t in enumerate(chunk) if t is not None]
    for lost_host, spare in replaced:  # a spare runs the lost host's numbers, GPU for GPU
        ranks = table.ranks(lost_host)
        pieces.append((ranks.start, spare, tuple(range(len(ranks)))))
    pieces.sort()
    return pieces


def relaunch(
    table: HostTable,
    mapping: Sequence[int | None],
    new_world: int,
    offsets: tuple[int, int],
    replaced: Sequence[tuple[int, int]],
    sources: Sequence[tuple[int, int]],
    lost: Sequence[int],
    spares: Sequence[int],
) -> Relaunch:
    """The :class:`Relaunch` of a re-layout: ``mapping`` (old local rank -> new rank or None)
    on ``table``'s hosts, the lost hosts ``replaced`` by spares ``(lost host, spare host)``;
    ``offsets`` are the old and new layouts' rank offsets (``sources`` and ``lost`` hold ranks).

    Algorithm: every new rank gets the host (and local GPU) of the old rank mapped to it, or
    of the spare replacing the host of that number in the old layout (a fresh rank: the spares
    policy keeps every number); the pieces, in new-rank order, must tile ``0 .. new_world - 1``
    and each host must run one consecutive block, which is what a hostfile in node order
    launches. Linear in the hosts where hosts keep whole blocks, in the ranks otherwise.

    """
    old_offset, new_offset = offsets
    runs: list[tuple[int, int, tuple[int, ...]]] = []  # (first new local rank, host, GPUs)
    for start, h, gpus in _pieces(table, mapping, new_offset, replaced):
        if runs and runs[-1][1] == h and runs[-1][0] + len(runs[-1][2]) == start:
            runs[-1] = (runs[-1][0], h, runs[-1][2] + gpus)
        else:
            runs.append((start, h, gpus))
    seen = {h for _, h, _ in runs}
    firsts = [start for start, _, _ in runs]
    ends = [start + len(gpus) for start, _, gpus in runs]
    # every policy maps ranks in order (a host's ranks stay one block) and gives each new rank
    # one process: the hosts tile the new ranks (an internal check that never fails, so a mutant
    # that weakens it changes no answer)
    one_block = len(seen) == len(runs)  # pragma: no mutate
    tiled = firsts == [0, *ends[:-1]] and ends[-1] == new_world  # pragma: no mutate
    if not (one_block and tiled):  # pragma: no cover  # pragma: no mutate
        raise AssertionError(f"hosts do not tile ranks 0..{new_world - 1}")  # pragma: no mutate
    lost_hosts = sorted({table.host_of(r - old_offset) for r in lost})
    gone = set(lost_hosts) | seen
    total = table.count
    pool = range(total) if total is not None else (*range(table.used), *spares)
    idle = tuple(table.name(h) for h in pool if h not in gone)
    names = [table.name(h) for _, h, _ in runs]
    by_host = [
        (
            new,
            names[bisect.bisect_right(firsts, new - new_offset) - 1],
            old,
            table.name(table.host_of(old - old_offset)),
        )
        for new, old in sources
    ]
    return Relaunch(
        tuple(names),
        tuple(len(gpus) for _, _, gpus in runs),
        tuple(new_offset + start for start in firsts),
        tuple(gpus for _, _, gpus in runs),
        idle,
        tuple(table.name(h) for h in lost_hosts),
        tuple(by_host),
    )
