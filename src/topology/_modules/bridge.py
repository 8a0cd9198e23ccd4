"""The bridge between two modules: who sends which activation slice to whom (pure).

Two modules joined by pipeline communication: every rank of the sender module's last pipeline
stage holds activations, and every rank of the receiver module's first stage needs some. On each
side the activations of one micro-batch are split by the module's data-parallel *lanes* (the
``batch_axes``, dp and Megatron's gtp by default) along the batch and by its context-parallel
ranks (the ``sequence_axes``, cp) along the sequence; the other axes of the stage (tp, ...) hold
copies. Megatron's ``BridgeCommunicator`` (megatron/core/pipeline_parallel/bridge_communicator.py)
refuses cp > 1 and lane counts that do not divide each other; this schedule takes both.

Algorithm (an lcm split): cut the batch into ``L = lcm(lanes_s, lanes_r)`` units and the sequence
into ``M = lcm(k * cp_s, k * cp_r)`` units (``k = 2`` with ``zigzag``, Megatron's load-balanced
context parallelism: cp rank ``j`` of ``C`` holds chunks ``j`` and ``2C - 1 - j`` of ``2C``, else
``k = 1``, contiguous chunks). Batch unit ``b`` lives on sender lane ``b * lanes_s // L`` and is
needed by receiver lane ``b * lanes_r // L``; sequence unit ``u`` likewise by chunk. Every block
(sender lane and cp rank) x (receiver lane and cp rank) that meets is one rectangle of units,
sent to every copy of the receiving block, each by one copy of the sending block: the receiving
rank itself when it holds the data (colocated modules copy locally), else the copy with the
fewest handoffs so far (the lowest rank on ties), so the copies share the work. The micro-batch
size must be a multiple of ``L`` and the sequence length of ``M``.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterator, Sequence
from math import lcm, prod

import attrs

from .._args import show
from .._errors import TopologyError
from .._layout.grid import Grid
from .._megatron.kinds import DENSE_KINDS
from .._megatron.topology import Topology
from .module import Module, span_text

__all__ = ["ROLES", "Bridge", "Handoff", "bridge"]

ROLES = ("sender", "receiver", "both", "none")
"""A rank's part in a bridge: it sends, receives, does both (a local copy counts), or neither."""

Units = tuple[int, int]


@attrs.frozen(order=True)
class Handoff:
    """One rectangle of activation units from global rank ``src`` to global rank ``dst``.

    ``batch`` and ``sequence`` are half-open unit ranges ``(start, stop)`` of the bridge's
    ``batch_units`` and ``sequence_units``. ``src == dst`` is a local copy.
    """

    src: int
    dst: int
    batch: Units
    sequence: Units

    @property
    def units(self) -> int:
        """How many (batch unit, sequence unit) cells the handoff carries."""
        return (self.batch[1] - self.batch[0]) * (self.sequence[1] - self.sequence[0])


_Links = tuple[tuple[int, ...], tuple[int, ...], tuple[Handoff, ...]]
"""A rank's destinations and sources (ascending) and its handoffs (in order)."""
_NONE: _Links = ((), (), ())


@attrs.frozen(repr=False)
class Bridge:
    """Every handoff of one bridge, sorted, and each rank's part in it.

    >>> from topology import Module, Topology
    >>> enc = Module("vision", Topology(4, cp=2))            # 2 lanes x cp 2
    >>> llm = Module("language", Topology(6, tp=2), rank_offset=4)   # 3 lanes x tp 2
    >>> link = bridge(enc, llm, zigzag=False)
    >>> link.batch_units, link.sequence_units, link.role(0), link.role(5), link.sends(0)
    (6, 2, 'sender', 'receiver', (4, 5, 6, 7))
    >>> link.receives(8)
    (2, 3)
    """

    sender: str
    receiver: str
    batch_units: int
    """``L``: the micro-batch is cut into this many equal units (its size must be a multiple)."""
    sequence_units: int
    """``M``: the sequence is cut into this many equal units (its length must be a multiple)."""
    handoffs: tuple[Handoff, ...]
    """Every handoff, sorted by source, destination, batch and sequence units."""

    def role(self, rank: int) -> str:
        """``"sender"``, ``"receiver"``, ``"both"`` or ``"none"`` (see :data:`ROLES`)."""
        sends, receives = bool(self.sends(rank)), bool(self.receives(rank))
        if sends and receives:
            return "both"
        return "sender" if sends else "receiver" if receives else "none"

    def sends(self, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` sends to, ascending (itself for a local copy)."""
        return self._by_rank.get(rank, _NONE)[0]

    def receives(self, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` receives from, ascending (itself for a local copy)."""
        return self._by_rank.get(rank, _NONE)[1]

    def handoffs_of(self, rank: int) -> tuple[Handoff, ...]:
        """The handoffs ``rank`` sends or receives, in order."""
        return self._by_rank.get(rank, _NONE)[2]

    @functools.cached_property
    def _by_rank(self) -> dict[int, _Links]:
        """Each rank's destinations, sources and handoffs, built on first use (one pass)."""
        sends: dict[int, set[int]] = defaultdict(set)
        receives: dict[int, set[int]] = defaultdict(set)
        handoffs: dict[int, list[Handoff]] = defaultdict(list)
        for t in self.handoffs:
            sends[t.src].add(t.dst)
            receives[t.dst].add(t.src)
            handoffs[t.src].append(t)
            if t.dst != t.src:
                handoffs[t.dst].append(t)
        return {
            rank: (
                tuple(sorted(sends.get(rank, ()))),
                tuple(sorted(receives.get(rank, ()))),
                tuple(found),
            )
            for rank, found in handoffs.items()
        }

    def __repr__(self) -> str:
        return (
            f"Bridge({self.sender!r} -> {self.receiver!r}, units {self.batch_units}x"
            f"{self.sequence_units}, <{len(self.handoffs)} handoffs>)"
        )


@attrs.frozen
class _Side:
    """One module's boundary stage: per (lane, cp rank) block its ranks (copies), ascending."""

    lanes: int
    chunks: int
    blocks: dict[tuple[int, int], list[int]]


def _axes_of(grid: Grid, names: Sequence[str]) -> list[str]:
    return [a for a in names if a in grid.axes]


def _index(coord: dict[str, int], grid: Grid, axes: Sequence[str]) -> int:
    """Mixed-radix index of ``coord`` over ``axes`` (the first outermost)."""
    index = 0
    for axis in axes:
        index = index * grid.size(axis) + coord[axis]
    return index


def _side(
    module: Module,
    last: bool,
    batch_axes: Sequence[str],
    sequence_axes: Sequence[str],
    stage_axis: str,
) -> _Side:
    grid = _grid_of(module)
    batch, sequence = _axes_of(grid, batch_axes), _axes_of(grid, sequence_axes)
    stages = grid.size(stage_axis) if stage_axis in grid.axes else 1
    boundary = stages - 1 if last else 0
    blocks: dict[tuple[int, int], list[int]] = {}
    for rank in module.span:
        coord = dict(grid.coord(rank))
        if coord.get(stage_axis, 0) != boundary:
            continue
        key = (_index(coord, grid, batch), _index(coord, grid, sequence))
        blocks.setdefault(key, []).append(rank)
    lanes = prod(grid.size(a) for a in batch)
    chunks = prod(grid.size(a) for a in sequence)
    return _Side(lanes, chunks, blocks)


def _runs(owner: Sequence[tuple[int, int]]) -> Iterator[tuple[tuple[int, int], int, int]]:
    """``(value, start, stop)`` for each run of equal values in ``owner``."""
    start = 0
    for i in range(1, len(owner) + 1):
        if i == len(owner) or owner[i] != owner[start]:
            yield owner[start], start, i
            start = i


def _chunk_owners(units: int, ranks: int, zigzag: bool) -> list[int]:
    """The cp rank that holds each of ``units`` sequence units."""
    if not zigzag:
        return [u * ranks // units for u in range(units)]
    owners = []
    for u in range(units):
        chunk = u * 2 * ranks // units
        owners.append(chunk if chunk < ranks else 2 * ranks - 1 - chunk)
    return owners


def _least_loaded(copies: list[int], load: dict[int, int]) -> int:
    """The copy with the fewest handoffs so far, the lowest rank on ties."""
    return min(copies, key=lambda rank: (load.get(rank, 0), rank))


def _check(value: object, name: str) -> Module:
    if not isinstance(value, Module):
        raise TopologyError(
            f"{name} must be a topology.Module, got {show(value)} ({type(value).__name__}); "
            "wrap the layout as Module('name', layout, rank_offset=...)"
        )
    return value


_DENSE_AXES = frozenset(axis for axes in DENSE_KINDS.values() for axis in axes)
"""The axes a Topology's dense grid may have (one of size 1 is left out of the grid)."""


def _grid_of(module: Module) -> Grid:
    layout = module.layout
    return layout.dense if isinstance(layout, Topology) else layout.grid


def _known_axes(*modules: Module) -> frozenset[str]:
    """The axis names a bridge of ``modules`` may name: Megatron's dense axes (the defaults;
    present or not) and each grid module's own axes."""
    known = set(_DENSE_AXES)
    for module in modules:
        known |= set(_grid_of(module).axes)
    return frozenset(known)


def _axis_names(value: object, name: str, known: frozenset[str], example: str) -> tuple[str, ...]:
    """``value`` as a tuple of axis names, each one ``known`` (a string is refused: it would be
    read letter by letter)."""
    if (
        isinstance(value, str)
        or not isinstance(value, Sequence)
        or not all(isinstance(axis, str) for axis in value)
    ):
        raise TopologyError(
            f"{name} must be a list of axis names, got {show(value)}; e.g. {name}={example}"
        )
    unknown = [axis for axis in value if axis not in known]
    if unknown:
        raise TopologyError(
            f"{name} names {show(unknown[0])}, an axis of neither module nor of Megatron's "
            f"dense grid; valid: {', '.join(sorted(known))}"
        )
    return tuple(value)


def bridge(
    sender: Module,
    receiver: Module,
    *,
    zigzag: bool = True,
    batch_axes: Sequence[str] = ("dp", "gtp"),
    sequence_axes: Sequence[str] = ("cp",),
    stage_axis: str = "pp",
) -> Bridge:
    """Who sends which activation slice to whom, from ``sender``'s last stage to ``receiver``'s
    first (see the module docstring for the lcm split and the balance).

    Args:
        sender, receiver: the two modules (a Topology's dense grid axes, or a grid's).
        zigzag: True (the default) for Megatron's load-balanced context parallelism (cp rank
            ``j`` holds sequence chunks ``j`` and ``2C - 1 - j``), False for contiguous chunks.
        batch_axes: the axes whose ranks hold different samples, outermost first (absent
            axes are skipped).
        sequence_axes: the axes that split the sequence.
        stage_axis: the pipeline axis (absent: one stage).

    Returns:
        A :class:`Bridge`.

    Raises:
        TopologyError: for arguments that are not modules, a module bridged to itself, axes
            given as a string (not a list of names) or naming an axis of neither module.
    """
    sender, receiver = _check(sender, "sender"), _check(receiver, "receiver")
    if sender.name == receiver.name:
        raise TopologyError(
            f"a bridge joins two modules, got {sender.name!r} {span_text(sender.span)} twice; "
            "pass the sending and the receiving module"
        )
    if type(zigzag) is not bool:
        raise TopologyError(f"zigzag must be True or False, got {show(zigzag)}")
    known = _known_axes(sender, receiver)
    batch_axes = _axis_names(batch_axes, "batch_axes", known, "('dp',)")
    sequence_axes = _axis_names(sequence_axes, "sequence_axes", known, "('cp',)")
    if type(stage_axis) is not str:
        raise TopologyError(f"stage_axis must be one axis name, got {show(stage_axis)}; e.g. 'pp'")
    (stage_axis,) = _axis_names((stage_axis,), "stage_axis", known, "'pp'")
    src = _side(sender, True, batch_axes, sequence_axes, stage_axis)
    dst = _side(receiver, False, batch_axes, sequence_axes, stage_axis)
    k = 2 if zigzag else 1
    batch_units = lcm(src.lanes, dst.lanes)
    sequence_units = lcm(k * src.chunks, k * dst.chunks)
    batch_owner = [
        (b * src.lanes // batch_units, b * dst.lanes // batch_units) for b in range(batch_units)
    ]
    chunk_owner = list(
        zip(
            _chunk_owners(sequence_units, src.chunks, zigzag),
            _chunk_owners(sequence_units, dst.chunks, zigzag),
            strict=True,
        )
    )
    load: dict[int, int] = {}
    handoffs = []
    for (lane_s, lane_r), b0, b1 in _runs(batch_owner):
        for (cp_s, cp_r), s0, s1 in _runs(chunk_owner):
            copies = src.blocks[(lane_s, cp_s)]
            for rank in dst.blocks[(lane_r, cp_r)]:
                source = rank if rank in copies else _least_loaded(copies, load)
                load[source] = load.get(source, 0) + 1
                handoffs.append(Handoff(source, rank, (b0, b1), (s0, s1)))
    return Bridge(sender.name, receiver.name, batch_units, sequence_units, tuple(sorted(handoffs)))
