"""Which ranks of a layout hold which slice of a weight (private).

A weight lives on the pipeline stage (and virtual chunk) of its layer, is cut by the tensor-
parallel axis (tp, or etp for experts) along its cut dim, part by part, and is replicated over
the remaining axes of its stage: dp and cp for dense weights, edp for experts, whose ep axis
picks the rank holding the expert.

Algorithm: layer ``l`` of ``L`` sits in model chunk ``c = l // (L / (pp * vpp))``, held by stage
``c % pp`` as virtual chunk ``c // pp`` (:meth:`Topology.layers`). Shard ``a`` of ``T`` holds,
of each part ``[o, o + n)`` of the cut dim, ``[o + a * n / T, o + (a + 1) * n / T)``; its ranks are
``grid.matching(tp=a, pp=stage)`` (``etp=a, ep=e // (E / ep)`` for expert ``e`` of ``E``).

Megatron's GTP (weight rematerialisation, ``gtp`` dense, ``egtp`` expert, size ``G``) cuts dim 0
of every rank's tensor-parallel shard of a weight (two or more dims; biases, norms and whole
weights stay whole) into ``G`` contiguous blocks, after padding its ``W`` rows at the tail to a
multiple of ``P * G`` (``P`` = :data:`GTP_ALIGNMENT`): gtp rank ``j`` holds local rows
``[j * s, min((j + 1) * s, W))`` with ``s = ceil(W / (P * G)) * P`` (none, only padding, when
``j * s >= W``), as shard ``a * G + j`` on ``grid.matching(tp=a, gtp=j, pp=stage)``. A
column-parallel weight is cut on dim 0 by both, so these are slices of its cut dim; a
row-parallel one (tp cuts dim 1, so its tp shard has all ``W = shape[0]`` rows: Megatron's
``_gtp_pre_init`` pads ``out_features`` with ``out_split_size`` 1) holds a 2-D block: its tp
ranges along the cut dim times the rows ``[j * s, min((j + 1) * s, W))`` of dim 0
(:attr:`ParamShard.rows`).

>>> from topology import Topology
>>> w = Param("fc1", (8, 4), sharding="column", parts=(4, 4), layer=3)
>>> p = param_placement(Topology(8, tp=2, pp=2), w, num_layers=4)
>>> [(s.index, s.stage, s.ranks, s.ranges) for s in p.shards]
[(0, 1, (4, 6), ((0, 2), (4, 6))), (1, 1, (5, 7), ((2, 4), (6, 8)))]
>>> p.dtensor
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from typing import Protocol

import attrs

from .._errors import TopologyError
from .._layout.grid import Grid
from .._megatron.pipeline import check_layers
from .._megatron.split.split import PipelineSplit, check_split, layers_of
from .._megatron.topology import Topology
from .params import Param

__all__ = [
    "GTP_ALIGNMENT",
    "LayoutTarget",
    "ParamPlacement",
    "ParamShard",
    "Piece",
    "PieceRanks",
    "PlacementKeys",
    "ShardRuns",
    "Target",
    "layer_chunks",
    "param_placement",
    "piece_ranks",
    "pieces",
    "placement_key",
    "runs_ranks",
    "shard_runs",
    "shard_size",
]

GTP_ALIGNMENT = 16
"""Megatron's ``GTPRematConfig.pad_for_alignment`` default (BF16 and FP8 / NVFP4 runs; MXFP8 runs
use 32): GTP pads each tensor-parallel shard's dim 0 to a multiple of this times the GTP size."""


@attrs.frozen
class ParamShard:
    """One slice of a weight and the ranks that hold it.

    ``ranges`` are ``[start, stop)`` intervals of the cut dim, one per part, laid one after
    another in the holder's local tensor; ``index`` is the shard's tensor-parallel coordinate
    (times the GTP size, plus the gtp coordinate, under GTP: then a range may cover part of a
    part, and a holder of only GTP padding has none).
    """

    index: int
    stage: int
    chunk: int
    ranks: tuple[int, ...]
    ranges: tuple[tuple[int, int], ...]
    rows: tuple[int, int] | None = None
    """The ``[start, stop)`` of dim 0 held, when GTP cuts dim 0 of a weight whose cut dim is
    another (a row-parallel weight: a 2-D block); None: every row."""


@attrs.frozen
class ParamPlacement:
    """Where a weight lives in one layout: its shards, and their DTensor-style description."""

    param: Param
    split: int
    shards: tuple[ParamShard, ...]
    axes: tuple[str, ...]
    """The axes of the holding stage's sub-mesh, outermost first (pp and ep left out)."""
    gtp: int = 1
    """How many blocks Megatron's GTP axis cuts each tensor-parallel shard into (1: none)."""

    @property
    def dtensor(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """``(mesh axes, placements)`` as DTensor spells them, or None for fused parts (whose
        tp split is strided: DTensor's private ``_StridedShard``, not a plain ``ParamShard``)
        and under GTP (cut inside the tp shard, tail-padded: no DTensor placement says it)."""
        if (len(self.param.part_sizes) > 1 and self.split > 1) or self.gtp > 1:
            return None
        row = self.param.row
        cut = "etp" if "etp" in self.axes else "tp"
        place = tuple(
            f"Shard({self.param.cut_dim})" if axis == cut and row.dim is not None else "Replicate()"
            for axis in self.axes
        )
        return self.axes, place


def shard_size(param: Param, split: int, axis: str = "tp") -> int:
    """Length of one shard along the cut dim (each part divided by ``split``).

    Raises:
        TopologyError: a part is not divisible by ``split``.
    """
    for n in param.part_sizes:
        if n % split:
            raise TopologyError(
                f"Param {param.name!r} part of {n} along dim {param.cut_dim} is not divisible by "
                f"{axis}({split}); use {axis} among the divisors of {n}"
            )
    return sum(param.part_sizes) // split


@functools.lru_cache(maxsize=256)
def layer_chunks(
    topology: Topology, num_layers: int, pipeline_split: PipelineSplit | None = None
) -> tuple[tuple[int, int], ...]:
    """``(stage, virtual chunk)`` of every layer, from :meth:`Topology.layers`.

    With ``pipeline_split``, exactly Megatron's split (:class:`PipelineSplit`; what Megatron
    refuses is refused). Without it, Megatron's even split when ``pp * vpp`` divides
    ``num_layers``; else, where Megatron refuses and asks for a split, the model chunks take
    ``ceil`` then ``floor`` of ``num_layers / (pp * vpp)`` layers, the longer ones first
    (numpy's ``array_split``; DeepSeek-V3's 61 layers on pp 16 give 4 layers to stages 0..12,
    3 after): a documented default for layouts that name no split, not what a Megatron run
    holds (NeMo-RL's DeepSeek-V3 pp 16 recipe holds 3, 4 x 14, 2).

    >>> layer_chunks(Topology(4, pp=2, vpp=2), 8)
    ((0, 0), (0, 0), (1, 0), (1, 0), (0, 1), (0, 1), (1, 1), (1, 1))
    >>> layer_chunks(Topology(3, pp=3), 5, PipelineSplit(first_stage_layers=1, last_stage_layers=1))
    ((0, 0), (1, 0), (1, 0), (1, 0), (2, 0))
    """
    check_layers("num_layers", num_layers)
    pp, chunks = topology.pp, topology.vpp or 1
    if pipeline_split is not None or num_layers % (pp * chunks) == 0:
        placed = tuple(topology.layers(stage, num_layers, pipeline_split) for stage in range(pp))
    elif num_layers < pp * chunks:
        raise TopologyError(
            f"num_layers {num_layers} is fewer than pp({pp}) * vpp({chunks}) = {pp * chunks} "
            "model chunks; use fewer stages or chunks"
        )
    else:
        base, longer = divmod(num_layers, pp * chunks)
        placed = layers_of(
            [[base + (v * pp + p < longer) for v in range(chunks)] for p in range(pp)]
        )
    found: list[tuple[int, int]] = [(0, 0)] * num_layers
    for stage, stage_chunks in enumerate(placed):
        for chunk, layers in enumerate(stage_chunks):
            for layer in layers:
                found[layer] = (stage, chunk)
    return tuple(found)


def _stages(
    topology: Topology, param: Param, num_layers: int, pipeline_split: PipelineSplit | None
) -> tuple[tuple[int, int], ...]:
    """``(stage, chunk)`` pairs holding ``param``."""
    if param.layer is not None:
        if param.layer >= num_layers:
            raise TopologyError(
                f"Param {param.name!r} layer {param.layer} is outside the model's {num_layers} "
                f"layers; give a layer in range({num_layers})"
            )
        return (layer_chunks(topology, num_layers, pipeline_split)[param.layer],)
    last = (topology.pp - 1, (topology.vpp or 1) - 1)
    if param.position == "first":
        return ((0, 0),)
    if param.position == "last":
        return (last,)
    stages = sorted(s % topology.pp for s in topology.embedding_stages)
    return tuple((0, 0) if s == 0 else (s, last[1]) for s in dict.fromkeys(stages))


def _grid(topology: Topology, param: Param) -> Grid:
    grid = topology.expert if param.row.grid == "expert" else None
    return grid if grid is not None else topology.dense  # no expert folding: the dense grid


def _gtp_size(param: Param, grid: Grid) -> int:
    """How many blocks the grid's GTP axis cuts each tensor-parallel shard of ``param`` into."""
    axis = param.row.gtp_axis
    size = grid.size(axis) if axis in grid.axes else 1
    if size == 1 or param.row.dim is None or len(param.shape) < 2:
        return 1
    return size


def _gtp_block(ranges: list[tuple[int, int]], start: int, stop: int) -> tuple[tuple[int, int], ...]:
    """The global ranges of local rows ``[start, stop)`` of a holder of ``ranges`` (in order)."""
    found, local = [], 0
    for lo, hi in ranges:
        a, z = max(start, local), min(stop, local + hi - lo)
        if a < z:
            found.append((lo + a - local, lo + z - local))
        local += hi - lo
    return tuple(found)


def _gtp_blocks(ranges: list[tuple[int, int]], size: int) -> list[tuple[tuple[int, int], ...]]:
    """The ranges of each of ``size`` GTP blocks of a tp shard holding ``ranges`` (see module)."""
    rows = sum(hi - lo for lo, hi in ranges)
    step = -(-rows // (GTP_ALIGNMENT * size)) * GTP_ALIGNMENT
    return [_gtp_block(ranges, j * step, min((j + 1) * step, rows)) for j in range(size)]


def _expert_coord(topology: Topology, param: Param, grid: Grid) -> dict[str, int]:
    if "ep" not in grid.axes:
        return {}
    assert param.expert is not None and param.num_experts is not None
    if param.num_experts % topology.ep:
        raise TopologyError(
            f"Param {param.name!r} num_experts {param.num_experts} is not divisible by "
            f"ep({topology.ep}); use an ep that divides {param.num_experts}"
        )
    return {"ep": param.expert // (param.num_experts // topology.ep)}


def placement_key(
    topology: Topology,
    param: Param,
    *,
    num_layers: int,
    pipeline_split: PipelineSplit | None = None,
) -> Hashable:
    """What decides the ranks and ranges of ``param``'s shards in ``topology``: weights with
    equal keys have equal shards (:func:`param_placement` but for ``param``): the grid, whether
    it is cut, the parts, the stages, the expert coordinate and the GTP blocks per shard (1 for
    a bias, which GTP leaves whole; with the rows of dim 0 when GTP cuts a row-parallel one).
    Checks what :func:`param_placement` checks, in the same order. (For many weights of one
    layout, :class:`PlacementKeys` computes what depends on the layout alone once.)

    >>> t = Topology(8, tp=2, pp=2)
    >>> a = Param("a", (8, 4), sharding="column", layer=3)
    >>> b = Param("b", (8, 6), sharding="column", layer=2)
    >>> placement_key(t, a, num_layers=4) == placement_key(t, b, num_layers=4)
    True
    >>> placement_key(t, Param("norm", (8,), layer=3), num_layers=4)
    ('dense', False, (8,), ((1, 0),), (), 1)
    """
    return PlacementKeys(topology, num_layers, pipeline_split).key(param)


class PlacementKeys:
    """:func:`placement_key` of many weights in one layout: the grid, cut axis and GTP size of
    each sharding, the widths checked, the stages of each layer and the expert coordinate of each
    expert are computed once."""

    def __init__(
        self, topology: Topology, num_layers: int, pipeline_split: PipelineSplit | None
    ) -> None:
        check_split(pipeline_split, "pipeline_split")
        self.topology, self.num_layers, self.split = topology, num_layers, pipeline_split
        self._grids: dict[tuple[str, bool], tuple[Grid, str, int, int]] = {}
        self._widths: set[tuple[tuple[int, ...], int]] = set()
        self._stages: dict[tuple[int | None, str], tuple[tuple[int, int], ...]] = {}
        self._coords: dict[tuple[str, int | None, int | None], tuple[tuple[str, int], ...]] = {}

    def key(self, param: Param) -> Hashable:
        """``param``'s :func:`placement_key` in this layout."""
        row = param.row
        found = self._grids.get((row.name, len(param.shape) >= 2))
        if found is None:
            grid = _grid(self.topology, param)
            axis = "etp" if "etp" in grid.axes else "tp"
            split = grid.size(axis) if row.dim is not None else 1
            found = (grid, axis, split, _gtp_size(param, grid))
            self._grids[row.name, len(param.shape) >= 2] = found
        grid, axis, split, gtp = found
        parts = param.part_sizes
        if (parts, split) not in self._widths:
            shard_size(param, split, axis)
            self._widths.add((parts, split))
        coord = self._coords.get((row.grid, param.expert, param.num_experts))
        if coord is None:
            coord = tuple(_expert_coord(self.topology, param, grid).items())
            self._coords[row.grid, param.expert, param.num_experts] = coord
        where = (param.layer, param.position)
        stages = self._stages.get(where)
        if stages is None:
            stages = _stages(self.topology, param, self.num_layers, self.split)
            self._stages[where] = stages
        cut = gtp if gtp == 1 or param.cut_dim == 0 else (gtp, param.shape[0])
        return (row.grid, row.dim is not None, parts, stages, coord, cut)


def param_placement(
    topology: Topology,
    param: Param,
    *,
    num_layers: int,
    pipeline_split: PipelineSplit | None = None,
) -> ParamPlacement:
    """Every shard of ``param`` in ``topology`` and the ranks holding it (see the module).

    Args:
        topology: the layout.
        param: the weight.
        num_layers: the model's transformer layers (places ``param.layer``).
        pipeline_split: Megatron's split of those layers over the stages
            (:class:`PipelineSplit`; None: even, else longest chunks first, see
            :func:`layer_chunks`).

    Raises:
        TopologyError: a part not divisible by tp (etp), experts not divisible by ep, a layer
            outside the model, or a split Megatron refuses.
    """
    check_split(pipeline_split, "pipeline_split")
    grid = _grid(topology, param)
    row = param.row
    axis = "etp" if "etp" in grid.axes else "tp"
    split = grid.size(axis) if row.dim is not None else 1
    width = shard_size(param, split, axis)
    gtp = _gtp_size(param, grid)
    coord = _expert_coord(topology, param, grid)
    offsets = [sum(param.part_sizes[:j]) for j in range(len(param.part_sizes))]
    shards = []
    for stage, chunk in _stages(topology, param, num_layers, pipeline_split):
        for index in range(split):
            fixed = {**coord, "pp": stage, **({axis: index} if row.dim is not None else {})}
            ranges = [
                (o + index * (n // split), o + (index + 1) * (n // split))
                for o, n in zip(offsets, param.part_sizes, strict=True)
            ]
            assert sum(hi - lo for lo, hi in ranges) == width
            if gtp == 1:
                shards.append(
                    ParamShard(index, stage, chunk, grid.matching(**fixed), tuple(ranges))
                )
                continue
            if param.cut_dim == 0:
                for j, block in enumerate(_gtp_blocks(ranges, gtp)):
                    ranks = grid.matching(**fixed, **{row.gtp_axis: j})
                    shards.append(ParamShard(index * gtp + j, stage, chunk, ranks, block))
                continue
            for j, rows in enumerate(_gtp_blocks([(0, param.shape[0])], gtp)):
                ranks = grid.matching(**fixed, **{row.gtp_axis: j})
                held = tuple(ranges) if rows else ()
                shards.append(ParamShard(index * gtp + j, stage, chunk, ranks, held, *rows[:1]))
    axes = tuple(a for a in grid.axes if a not in ("pp", "ep"))
    return ParamPlacement(param, split, tuple(shards), axes, gtp)


def _runs(placement: ParamPlacement) -> list[tuple[int, int, int, int]]:
    """``(start, stop, shard index, local start)`` of every range of every shard index, sorted
    (the shards of one index on several stages hold the same ranges: counted once)."""
    runs, seen = [], set()
    for shard in placement.shards:
        if shard.index in seen:
            continue
        seen.add(shard.index)
        local = 0
        for lo, hi in shard.ranges:
            runs.append((lo, hi, shard.index, local))
            local += hi - lo
    runs.sort()
    return runs


Piece = tuple[int, int, int, int, int, int, tuple[int, int, int, int] | None]
"""``(start, stop, source index, target index, source local start, target local start,
rows)``: ``rows`` is ``(start, stop, source local start, target local start)`` along dim 0 when
GTP cuts dim 0 of a weight cut on another dim on either side, else None (every row)."""


def pieces(source: ParamPlacement, target: ParamPlacement) -> list[Piece]:
    """Every maximal block that one source shard and one target shard both hold: ``[start,
    stop)`` of the cut dim (times a range of dim 0 under GTP of a row-parallel weight), in
    order (see :data:`Piece`). Both placements must be of the same weight.

    >>> from topology import Topology
    >>> w = Param("w", (8, 2), sharding="column")
    >>> pieces(param_placement(Topology(2, tp=2), w, num_layers=1),
    ...        param_placement(Topology(4, tp=4), w, num_layers=1))[:2]
    [(0, 2, 0, 0, 0, 0, None), (2, 4, 0, 1, 2, 0, None)]
    >>> r = Param("r", (40, 4), sharding="row")  # tp 2, gtp 2: rows [0, 32) and [32, 40)
    >>> pieces(param_placement(Topology(4, tp=2, gtp=2), r, num_layers=1),
    ...        param_placement(Topology(4, tp=4), r, num_layers=1))[:2]
    [(0, 1, 0, 0, 0, 0, (0, 32, 0, 0)), (0, 1, 1, 0, 0, 0, (32, 40, 0, 32))]
    """
    return _pieces(shard_runs(source), shard_runs(target), source.param.shape[0])


def _pieces(src: ShardRuns, dst: ShardRuns, height: int) -> list[Piece]:
    """:func:`pieces` of two placements' runs (``height``: the weight's dim 0)."""
    if src.rows or dst.rows or src.overlap or dst.overlap:
        return _blocks(height, src.runs, dst.runs, src.rows, dst.rows)
    found: list[Piece] = []
    source, target = src.runs, dst.runs
    i = k = 0
    while i < len(source) and k < len(target):
        (lo, hi, a, at), (lo2, hi2, b, bt) = source[i], target[k]
        start, stop = max(lo, lo2), min(hi, hi2)
        if start < stop:
            found.append((start, stop, a, b, at + start - lo, bt + start - lo2, None))
        if hi <= hi2:
            i += 1
        else:
            k += 1
    return found


@attrs.frozen(eq=False)
class ShardRuns:
    """A placement as :func:`pieces` reads it (from :func:`shard_runs`): made once per placement
    class, it serves every pair of classes that placement meets."""

    runs: tuple[tuple[int, int, int, int], ...]
    """``(start, stop, shard index, local start)`` of every range of every shard index, sorted."""
    rows: dict[int, tuple[int, int]]
    """The dim-0 rows of each shard index that holds only some (a row-parallel GTP block)."""
    overlap: bool
    """Whether two runs overlap (shards sharing some of their ranges, as an engine's ranks
    sharing a KV head do): then :func:`pieces` intersects every run with every run."""
    holders: dict[int, tuple[int, ...]]
    """Every rank of each shard index's shards on any stage, ascending (the senders' view)."""
    receivers: dict[int, tuple[int, ...]]
    """The ranks of each shard index's shards, in the shards' order (the receivers' view)."""


def shard_runs(placement: ParamPlacement) -> ShardRuns:
    """``placement`` as :func:`pieces` and :func:`piece_ranks` read it (see :class:`ShardRuns`).

    >>> from topology import Topology
    >>> w = Param("w", (4, 2), sharding="column")
    >>> found = shard_runs(param_placement(Topology(4, tp=2, dp=2), w, num_layers=1))
    >>> found.runs, found.holders, found.overlap
    (((0, 2, 0, 0), (2, 4, 1, 0)), {0: (0, 2), 1: (1, 3)}, False)
    """
    runs = _runs(placement)
    holders: dict[int, tuple[int, ...]] = {}
    receivers: dict[int, list[int]] = {}
    for shard in placement.shards:
        holders[shard.index] = tuple(sorted({*holders.get(shard.index, ()), *shard.ranks}))
        receivers.setdefault(shard.index, []).extend(shard.ranks)
    return ShardRuns(
        tuple(runs),
        _rows_of(placement),
        _overlap(runs),
        holders,
        {index: tuple(ranks) for index, ranks in receivers.items()},
    )


def _overlap(runs: list[tuple[int, int, int, int]]) -> bool:
    """Whether two sorted runs overlap (see :attr:`ShardRuns.overlap`)."""
    return any(runs[k][0] < runs[k - 1][1] for k in range(1, len(runs)))


def _rows_of(placement: ParamPlacement) -> dict[int, tuple[int, int]]:
    """The dim-0 rows of each shard index that holds only some (a row-parallel GTP block)."""
    return {s.index: s.rows for s in placement.shards if s.rows is not None}


def _blocks(
    height: int,
    src: Sequence[tuple[int, int, int, int]],
    dst: Sequence[tuple[int, int, int, int]],
    src_rows: dict[int, tuple[int, int]],
    dst_rows: dict[int, tuple[int, int]],
) -> list[Piece]:
    """:func:`pieces` when a side holds 2-D blocks: every run against every run, both dims
    intersected (the runs of one side overlap along the cut dim: a few dozen each, once per
    class), ordered by cut-dim start, then dim-0 start."""
    found: list[Piece] = []
    for lo, hi, a, at in src:
        r0, r1 = src_rows.get(a, (0, height))
        for lo2, hi2, b, bt in dst:
            start, stop = max(lo, lo2), min(hi, hi2)
            q0, q1 = dst_rows.get(b, (0, height))
            top, bottom = max(r0, q0), min(r1, q1)
            if start < stop and top < bottom:
                rows = None if (top, bottom) == (0, height) else (top, bottom, top - r0, top - q0)
                found.append((start, stop, a, b, at + start - lo, bt + start - lo2, rows))
    found.sort(key=lambda p: (p[0], p[6][0] if p[6] is not None else 0, p[2], p[3]))
    return found


PieceRanks = tuple[
    int, int, int, int, tuple[int, ...], tuple[int, ...], tuple[int, int, int, int] | None
]
"""A piece of :func:`pieces` with the ranks at both ends (see :func:`piece_ranks`)."""


def piece_ranks(source: ParamPlacement, target: ParamPlacement) -> list[PieceRanks]:
    """Every piece of :func:`pieces` with the ranks at both ends: ``(start, stop, source local
    start, target local start, holders, receivers, rows)``, the holders being every rank of the
    source shard on any stage (sorted), the receivers every rank of the target shard (in the
    target's shard order, some of them perhaps holders already).

    >>> from topology import Topology
    >>> w = Param("w", (4, 2), sharding="column")
    >>> piece_ranks(param_placement(Topology(2, tp=2), w, num_layers=1),
    ...             param_placement(Topology(2, dp=2), w, num_layers=1))
    [(0, 2, 0, 0, (0,), (0, 1), None), (2, 4, 0, 2, (1,), (0, 1), None)]
    """
    return runs_ranks(shard_runs(source), shard_runs(target), source.param.shape[0])


def runs_ranks(source: ShardRuns, target: ShardRuns, height: int) -> list[PieceRanks]:
    """:func:`piece_ranks` of two placements' :func:`shard_runs` (``height``: the weight's dim
    0, which a 2-D block's rows are cut from)."""
    holders, receivers = source.holders, target.receivers
    return [
        (lo, hi, src_lo, dst_lo, holders[a], receivers[b], rows)
        for lo, hi, a, b, src_lo, dst_lo, rows in _pieces(source, target, height)
    ]


class Target(Protocol):
    """A destination's placements: each weight's :class:`ParamPlacement` and the key of its class
    (weights of equal keys have equal shards; the planner computes one placement per key)."""

    def key(self, param: Param, num_layers: int) -> Hashable:
        """What decides ``param``'s shards (see :func:`placement_key`)."""
        ...  # pragma: no cover

    def placement(self, param: Param, num_layers: int) -> ParamPlacement:
        """``param``'s shards and their ranks."""
        ...  # pragma: no cover


@attrs.frozen
class LayoutTarget:
    """The :class:`Target` of a Megatron layout: :func:`placement_key` and
    :func:`param_placement` of ``topology`` under ``pipeline_split``.

    >>> from topology import Topology
    >>> t = LayoutTarget(Topology(2, tp=2))
    >>> [s.ranges for s in t.placement(Param("w", (4, 2), sharding="column"), 1).shards]
    [((0, 2),), ((2, 4),)]
    """

    topology: Topology
    pipeline_split: PipelineSplit | None = None

    def key(self, param: Param, num_layers: int) -> Hashable:
        """:func:`placement_key` of ``param``."""
        return placement_key(
            self.topology, param, num_layers=num_layers, pipeline_split=self.pipeline_split
        )

    def placement(self, param: Param, num_layers: int) -> ParamPlacement:
        """:func:`param_placement` of ``param``."""
        return param_placement(
            self.topology, param, num_layers=num_layers, pipeline_split=self.pipeline_split
        )
