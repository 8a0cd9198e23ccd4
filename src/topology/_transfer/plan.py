"""The transfer plan: which rank sends which slice of which weight to which rank (private).

For every weight the cut dims of both layouts are intersected shard range by shard range
(:func:`~topology._transfer.param_placement.pieces`: part by part, GTP blocks included) into
*pieces* ``[lo, hi)``, each held by the ranks of one source shard (its *holders*) and needed by the
ranks of one destination shard (its *receivers*). A receiver that holds the piece already (colocated
layouts) needs nothing. When the allocation has an NVLink tier (an NVL72 rack), the others are
grouped by its domains and draw from the holders in their own domain when there are any, else from
every holder. (Hosts alone are not a preference: keeping each host's traffic inside it costs
balance, 1.12x the bound for Llama-70B tp8 x pp8 -> tp16 on 4-GPU hosts.)

Algorithm (balance): a piece needed by ``R`` receivers and held by ``H`` holders is cut into
``s = max(1, H // R)`` near-equal sub-pieces along the cut dim; of the ``R * s`` units each holder
serves ``floor(R * s / H)``, and ``(R * s) mod H`` of them one more, those taken in turn (a
rotation per holder set, carried from piece to piece). So every holder set carries its bytes
within one unit of evenly, whatever the number of weights. With an NVLink tier, a unit goes to a
holder in its receiver's domain while one has capacity left, else to any holder with capacity:
the preference never changes how many units each holder serves.

Lower bounds (``max_send_bound``, ``max_recv_bound``, ``max_send_peers_bound``,
``max_recv_peers_bound``): see :mod:`topology._transfer.bounds`. Speed: weights that sit alike
share their pieces and sources (:mod:`topology._transfer.planner`), so a 4,096 -> 4,096-rank
plan of 1,000 weights (4.5 million operations) takes a fraction of a second; operations are
made when asked for.
"""

from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from collections.abc import Hashable, Iterable, Iterator, Sequence
from typing import Any

import attrs

from .._args import check_index, check_size, show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.rankmap import RankMap
from .._megatron.pipeline import check_layers
from .._megatron.split.split import PipelineSplit, check_split
from .._megatron.topology import Topology
from .param_placement import LayoutTarget, ParamPlacement, Target
from .params import Param
from .planner import (
    Block,
    Pattern,
    Planner,
    Row,
    block_bytes,
    block_rows,
    bulk,
    rows_bytes,
    unit_row,
)

__all__ = [
    "MAX_TRANSFER_RANKS",
    "PlanInputs",
    "RankTransfer",
    "Transfer",
    "TransferOp",
    "check_rank",
    "check_relay",
    "plan_inputs",
    "rank_map_of",
    "spanned_ranks",
    "transfer",
]

MAX_TRANSFER_RANKS = 2**17
"""The most ranks a plan spans (``max(rank_offset + world_size)`` of its layouts): 131,072,
eight times the 16,384-rank plans of ``benchmarks/bench_transfer_rank.py``. The planner keeps
each holder set's ranks, each pattern's senders and the statistics' sums per rank (Llama-7B tp8
-> tp4: 1.1 kB and 11 us per rank; DeepSeek-V3 16,384 -> 16,384: about 200 MB in all), so a
plan past it is refused before anything is allocated."""


@attrs.frozen
class TransferOp:
    """One message: ``src`` sends ``dst`` rows ``[start, stop)`` of weight ``param`` along its cut
    dim, found at ``src_start`` of the sender's shard and stored at ``dst_start`` of the
    receiver's (the other dims whole, but dim 0 when ``rows`` is given: a 2-D block under GTP
    of a weight cut on another dim, ``(start, stop, src_start, dst_start)`` along dim 0).

    ``stage`` 2 marks a relay copy (plans made with ``relay=True``): the sender received the
    slice in stage 1 and sends it from its *destination* shard (``src_start`` and the rows'
    ``src_start`` are places in that shard); run every stage-1 operation first."""

    src: int
    dst: int
    param: Param
    start: int
    stop: int
    src_start: int
    dst_start: int
    nbytes: int
    rows: tuple[int, int, int, int] | None = None
    stage: int = 1

    @property
    def src_slice(self) -> tuple[slice, ...]:
        """The slice of the sender's local shard (indexable on a tensor)."""
        return self._slice(self.src_start, 2)

    @property
    def dst_slice(self) -> tuple[slice, ...]:
        """The slice of the receiver's local shard."""
        return self._slice(self.dst_start, 3)

    @property
    def global_slice(self) -> tuple[slice, ...]:
        """The slice of the whole, unsharded weight."""
        return self._slice(self.start, 0)

    def _slice(self, start: int, side: int) -> tuple[slice, ...]:
        dim = self.param.cut_dim
        cut = (slice(None),) * dim + (slice(start, start + self.stop - self.start),)
        if self.rows is None:
            return cut
        top = self.rows[side]
        return (slice(top, top + self.rows[1] - self.rows[0]), *cut[1:])

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ranks, the weight's name, the cut dim, the ranges and bytes (and, for a 2-D
        block, ``rows``: its dim-0 range, keyed as the cut dim's; for a relay copy, ``stage``:
        2)."""
        return {
            "src": self.src,
            "dst": self.dst,
            "param": self.param.name,
            "dim": self.param.cut_dim,
            "start": self.start,
            "stop": self.stop,
            "src_start": self.src_start,
            "dst_start": self.dst_start,
            "bytes": self.nbytes,
            **({} if self.rows is None else {"rows": dict(zip(_ROWS, self.rows, strict=True))}),
            **({} if self.stage == 1 else {"stage": self.stage}),
        }


_ROWS = ("start", "stop", "src_start", "dst_start")
"""The keys of :meth:`TransferOp.to_dict`'s ``rows``: the dim-0 range of a 2-D block."""


@attrs.frozen
class RankTransfer:
    """One rank's part of a plan: what it sends and what it receives, each in plan order (from
    :meth:`Transfer.for_rank`, or :func:`~topology.transfer_rank` without the whole plan)."""

    rank: int
    sends: tuple[TransferOp, ...]
    recvs: tuple[TransferOp, ...]

    @property
    def ops(self) -> tuple[TransferOp, ...]:
        """Its sends, then its receives (no operation is both: a rank never sends to itself)."""
        return self.sends + self.recvs


@attrs.frozen
class Transfer:
    """A plan from :func:`transfer`: its operations (in a deterministic order) and statistics.

    The plan is kept as blocks (one piece of one weight and the pattern serving it, see
    :mod:`topology._transfer.planner`); operations are made when asked for. The per-rank
    queries read an index built on first use.
    """

    src: Topology
    dst: Topology
    params: tuple[Param, ...]
    num_layers: int
    blocks: tuple[Block, ...] = attrs.field(repr=False)
    stats: dict[str, Any] = attrs.field(eq=False)
    src_pipeline_split: PipelineSplit | None = None
    dst_pipeline_split: PipelineSplit | None = None
    target: Target | None = attrs.field(default=None, eq=False, repr=False)
    """Where the destination holds each weight when not ``dst``'s own layout (an engine's, see
    ``topology.refit``; then ``dst`` only names its ranks)."""

    def __len__(self) -> int:
        return self._count

    @functools.cached_property
    def _count(self) -> int:
        return sum(len(block[5].senders) for block in self.blocks)

    @functools.cached_property
    def rows(self) -> tuple[Row, ...]:
        """Every operation as ``(src, dst, param index, start, stop, src_start, dst_start,
        bytes)``, in plan order."""
        with bulk():
            return tuple(row for block in self.blocks for row in self._rows_of(block))

    def _rows_of(self, block: Block) -> Iterator[Row]:
        return block_rows(block, block_bytes(block, self.params[block[0]]))

    @property
    def ops(self) -> tuple[TransferOp, ...]:
        """Every operation, grouped by weight, then piece (then sender, without an NVLink tier);
        with a relay step, the relay copies (stage 2) after every stage-1 operation."""
        with bulk():
            return tuple(
                self._op(row, block[5].stage)
                for block in self.blocks
                for row in self._rows_of(block)
            )

    @property
    def relay(self) -> bool:
        """Whether the plan was made with a relay step (``transfer(..., relay=True)``: its
        relay copies, stage-2 operations, if any, come last in :attr:`blocks`)."""
        return "relay_ops" in self.stats

    def _op(self, row: Row, stage: int = 1) -> TransferOp:
        src, dst, index, *rest = row
        op = TransferOp(src, dst, self.params[index], *rest)
        return op if stage == 1 else attrs.evolve(op, stage=stage)

    @functools.cached_property
    def _index(self) -> tuple[dict[int, list[list[int]]], dict[int, list[list[int]]]]:
        """For each rank, the lists of positions of the blocks whose pattern it sends in (and
        receives in): one list per pattern, each ascending."""
        uses: dict[int, tuple[Pattern, list[int]]] = {}
        for position, block in enumerate(self.blocks):
            uses.setdefault(id(block[5]), (block[5], []))[1].append(position)
        sending: dict[int, list[list[int]]] = defaultdict(list)
        receiving: dict[int, list[list[int]]] = defaultdict(list)
        for pattern, positions in uses.values():
            for rank in dict.fromkeys(pattern.senders):
                sending[rank].append(positions)
            for rank in pattern.need:
                receiving[rank].append(positions)
        return sending, receiving

    def _rank(self, rank: object) -> int:
        """``rank`` if it is a non-negative int (a rank outside both layouts has nothing to do:
        a world may run more processes than the plan uses), else a TopologyError."""
        return check_index("rank", rank)

    @functools.cached_property
    def _row_bytes(self) -> tuple[int, ...]:
        """Each weight's :attr:`Param.row_bytes` (a computed property), once."""
        return tuple(param.row_bytes for param in self.params)

    def rank_rows(self, rank: int, side: int) -> Iterator[Row]:
        """The operations ``rank`` sends (side 0) or receives (side 1) as :attr:`rows`, in plan
        order (made one block at a time: what ``--write-plans`` streams)."""
        return (row for _, row in self.staged_rank_rows(rank, side))

    def staged_rank_rows(self, rank: int, side: int) -> Iterator[tuple[int, Row]]:
        """:meth:`rank_rows`, each with its stage (2: a relay copy)."""
        lists = self._index[side].get(rank, ())
        positions = lists[0] if len(lists) == 1 else sorted(itertools.chain(*lists))
        blocks, params, row_bytes = self.blocks, self.params, self._row_bytes
        for position in positions:
            block = blocks[position]
            index, lo, hi, src_lo, dst_lo, pattern, rows = block
            per = row_bytes[index] if rows is None else rows_bytes(params[index], rows)
            units = pattern.by_sender[rank] if side == 0 else pattern.received_by(rank)
            stage = pattern.stage
            if pattern.cuts == 1:
                senders, need, nbytes = pattern.senders, pattern.need, (hi - lo) * per
                for u in units:
                    row = (senders[u], need[u], index, lo, hi, src_lo, dst_lo, nbytes)
                    yield stage, row if rows is None else (*row, rows)
            else:
                for u in units:
                    yield stage, unit_row(block, per, u)

    def _of(self, rank: int, side: int) -> tuple[TransferOp, ...]:
        """The operations ``rank`` sends (side 0) or receives (side 1), in plan order."""
        rank = self._rank(rank)
        return tuple(self._op(row, stage) for stage, row in self.staged_rank_rows(rank, side))

    def sends(self, rank: int) -> tuple[TransferOp, ...]:
        """What ``rank`` sends, in plan order (one side of a ``batch_isend_irecv``)."""
        return self._of(rank, 0)

    def recvs(self, rank: int) -> tuple[TransferOp, ...]:
        """What ``rank`` receives, in plan order."""
        return self._of(rank, 1)

    def for_rank(self, rank: int) -> RankTransfer:
        """What ``rank`` sends and receives: the operations of :attr:`ops` with ``src == rank``,
        then those with ``dst == rank``, each in plan order.

        Raises:
            TopologyError: ``rank`` is no int in ``range(`` the ranks both layouts span ``)``.

        >>> from topology import Topology
        >>> w = [Param("w", (8, 8), sharding="column", layer=0)]
        >>> plan = transfer(Topology(2, tp=2), Topology(2, tp=1, dp=2, rank_offset=2), w)
        >>> mine = plan.for_rank(2)
        >>> [(op.src, op.dst) for op in mine.sends], [(op.src, op.dst) for op in mine.recvs]
        ([], [(0, 2), (1, 2)])
        """
        check_rank(rank, self.src, self.dst)
        return RankTransfer(rank, self.sends(rank), self.recvs(rank))

    @functools.cached_property
    def _shards(self) -> tuple[list[dict[int, _Held]], ...]:
        """For each weight and side, ``(start, stop, local start)`` of the ranges each rank
        holds, and its dim-0 rows (one map per placement class, shared)."""
        classes: dict[tuple[int, Hashable], dict[int, _Held]] = {}
        sides: tuple[list[dict[int, _Held]], ...] = ([], [])
        targets = (
            LayoutTarget(self.src, self.src_pipeline_split),
            self.target or LayoutTarget(self.dst, self.dst_pipeline_split),
        )
        for param in self.params:
            for side, target in enumerate(targets):
                key = (side, target.key(param, self.num_layers))
                if key not in classes:
                    classes[key] = _ranges_by_rank(target.placement(param, self.num_layers))
                sides[side].append(classes[key])
        return sides

    def held(self, rank: int) -> tuple[TransferOp, ...]:
        """What ``rank`` copies from its own source shard into its destination shard (colocated
        layouts): operations with ``src == dst == rank``, not part of :attr:`ops`."""
        rank = self._rank(rank)
        found = []
        for param, haves, wants in zip(self.params, *self._shards, strict=True):
            have, want = haves.get(rank), wants.get(rank)
            if have is None or want is None:
                continue
            rows, row_bytes = _common_rows(param, have[1], want[1])
            if row_bytes == 0:
                continue
            for lo, hi, src_at in have[0]:
                for a, z, dst_at in want[0]:
                    start, stop = max(lo, a), min(hi, z)
                    if start < stop:
                        found.append(
                            TransferOp(
                                rank,
                                rank,
                                param,
                                start,
                                stop,
                                src_at + start - lo,
                                dst_at + start - a,
                                (stop - start) * row_bytes,
                                rows,
                            )
                        )
        return tuple(found)


_Held = tuple[list[tuple[int, int, int]], tuple[int, int] | None]
"""What a rank holds of a weight: ``(start, stop, local start)`` of its ranges along the cut dim
and its rows of dim 0 (None: every row)."""


def _common_rows(
    param: Param, have: tuple[int, int] | None, want: tuple[int, int] | None
) -> tuple[tuple[int, int, int, int] | None, int]:
    """The dim-0 rows both sides of a rank hold, as :attr:`TransferOp.rows` (None: every row),
    and the bytes per index of the cut dim they make (0: none in common)."""
    if have is None and want is None:
        return None, param.row_bytes
    height = param.shape[0]
    r0, r1 = have if have is not None else (0, height)
    q0, q1 = want if want is not None else (0, height)
    top, bottom = max(r0, q0), min(r1, q1)
    if top >= bottom:
        return None, 0
    rows = None if (top, bottom) == (0, height) else (top, bottom, top - r0, top - q0)
    return rows, rows_bytes(param, (top, bottom))


def _ranges_by_rank(placement: ParamPlacement) -> dict[int, _Held]:
    """``(start, stop, local start)`` of each range every holder of a weight holds, and its
    dim-0 rows (a rank in two shards, of two stages, keeps the first)."""
    found: dict[int, _Held] = {}
    for shard in placement.shards:
        local, ranges = 0, []
        for lo, hi in shard.ranges:
            ranges.append((lo, hi, local))
            local += hi - lo
        for rank in shard.ranks:
            found.setdefault(rank, (ranges, shard.rows))
    return found


def rank_map_of(allocation: object, world: int) -> RankMap | None:
    """The rank map of ``allocation`` (an :class:`Allocation`, a :class:`RankMap` or None) for
    layouts using ranks ``0 .. world - 1``; a wrong type or too few ranks raise."""
    if allocation is None or isinstance(allocation, RankMap):
        rank_map = allocation
    elif isinstance(allocation, Allocation):
        rank_map = allocation.rank_map(world)
    else:
        raise TopologyError(
            f"allocation must be an Allocation, a RankMap or None, got {show(allocation)} "
            f"({type(allocation).__name__}); give Allocation(...) or alloc.rank_map(n)"
        )
    if rank_map is not None and rank_map.world_size < world:
        raise TopologyError(
            f"allocation places {rank_map.world_size} ranks but the layouts use ranks up to "
            f"{world - 1}; give an allocation of at least {world} ranks"
        )
    return rank_map


def _check_params(params: object) -> tuple[Param, ...]:
    found = tuple(params) if isinstance(params, Iterable) else None
    if found is None or not found or not all(isinstance(p, Param) for p in found):
        raise TopologyError(
            f"params must be a non-empty sequence of Param, got {show(params)}; "
            "describe each weight with topology.Param"
        )
    return found


def _check_layouts(src: object, dst: object) -> None:
    for name, value in (("src", src), ("dst", dst)):
        if not isinstance(value, Topology):
            raise TopologyError(
                f"{name} must be a Topology, got {show(value)} ({type(value).__name__})"
            )


def _check_split_fits(
    side: str, topology: Topology, split: PipelineSplit | None, num_layers: int
) -> None:
    """Refuse a split Megatron refuses for ``topology``'s pp and vpp, naming the side."""
    if split is not None:
        try:
            topology.layers(0, num_layers, split)
        except TopologyError as error:
            raise TopologyError(f"{side}_pipeline_split ({split}) on {topology}: {error}") from None


def transfer(
    src: Topology,
    dst: Topology,
    params: Sequence[Param],
    *,
    allocation: Allocation | RankMap | None = None,
    num_layers: int | None = None,
    src_pipeline_split: PipelineSplit | None = None,
    dst_pipeline_split: PipelineSplit | None = None,
    target: Target | None = None,
    relay: bool = False,
) -> Transfer:
    """The plan that moves every weight from layout ``src`` to layout ``dst``.

    The layouts may share ranks (colocated: what a rank already holds moves nothing) or not
    (give ``dst`` a ``rank_offset``). See the module for the balance and the bounds.

    Args:
        src, dst: the two layouts (training and generation, say).
        params: the weights (:class:`Param`), in the order the plan lists them.
        allocation: where ranks run (an :class:`Allocation` of both layouts' ranks, or its
            :class:`RankMap`): prefers a source in the receiver's domain of the innermost NVLink
            tier, if the allocation has one, and counts bytes per tier (``node``, the
            allocation's tiers, ``world``).
        num_layers: the model's transformer layers (default: one more than the largest
            ``param.layer``).
        src_pipeline_split, dst_pipeline_split: how each layout splits those layers over its
            pipeline stages, as Megatron's config says (:class:`PipelineSplit`; NeMo-RL's
            DeepSeek-V3 pp 16 recipe is ``PipelineSplit(first_stage_layers=3,
            last_stage_layers=2)``). None: the even split, and where ``pp * vpp`` does not
            divide the layers (Megatron refuses), the longer chunks first
            (:func:`~topology._transfer.param_placement.layer_chunks`).
        target: where the destination holds each weight when not ``dst``'s layout (an engine's:
            ``topology.refit`` gives it; ``dst`` then only names the destination's ranks).
        relay: with an allocation, route a piece that several receivers of one NVLink domain
            (a host) need, and that no rank of the domain holds, to one of them over the
            network, then on to the others over NVLink (stage-2 operations, see
            :mod:`topology._transfer.relay`): each piece enters a domain's NICs once. Default
            False (every receiver gets its pieces from a holder).

    Returns:
        A :class:`Transfer`.

    Raises:
        TopologyError: bad arguments, layouts spanning more than :data:`MAX_TRANSFER_RANKS`
            ranks, a weight neither layout can shard (see :func:`param_placement`), or
            ``relay`` without an allocation.

    >>> from topology import Allocation, Host, Topology
    >>> w = [Param("w", (8, 8), sharding="column", layer=0)]
    >>> plan = transfer(Topology(2, tp=2), Topology(2, tp=1, dp=2, rank_offset=2), w)
    >>> [(op.src, op.dst, op.start, op.stop) for op in plan.ops]
    [(0, 2, 0, 4), (0, 3, 0, 4), (1, 2, 4, 8), (1, 3, 4, 8)]
    >>> plan.stats["max_send_bytes"], plan.stats["max_send_bound"]
    (128, 128)
    >>> hosts = Allocation([Host("a", 2), Host("b", 2)])
    >>> plan = transfer(Topology(2, tp=2), Topology(2, tp=1, dp=2, rank_offset=2), w,
    ...                 allocation=hosts, relay=True)
    >>> [(op.src, op.dst, op.start, op.stop, op.stage) for op in plan.ops]
    [(0, 2, 0, 4, 1), (1, 3, 4, 8, 1), (2, 3, 0, 4, 2), (3, 2, 4, 8, 2)]
    """
    given = plan_inputs(
        src, dst, params, allocation, num_layers, (src_pipeline_split, dst_pipeline_split)
    )
    check_relay(relay, given.rank_map, allocation)
    planner = Planner(src, dst, given.rank_map, splits=given.splits, target=target, relay=relay)
    with bulk():  # the pass makes acyclic tuples and records: no cyclic collection in it
        for index, param in enumerate(given.params):
            planner.weight(index, param, given.num_layers)
    blocks, stats = planner.all_blocks(), planner.stats()
    return Transfer(src, dst, given.params, given.num_layers, blocks, stats, *given.splits, target)


@attrs.frozen
class PlanInputs:
    """The checked arguments of a plan (see :func:`plan_inputs`)."""

    params: tuple[Param, ...]
    num_layers: int
    rank_map: RankMap | None
    splits: tuple[PipelineSplit | None, PipelineSplit | None]


def check_relay(relay: object, rank_map: RankMap | None, allocation: object) -> None:
    """Refuse a ``relay`` that is not a bool, or True without an allocation (``rank_map``: the
    checked ``allocation``'s)."""
    if relay is not False and (relay is not True or rank_map is None):
        raise TopologyError(
            f"relay must be True or False, and True needs an allocation, got {show(relay)} "
            f"with allocation {show(allocation)}; give allocation=... or relay=False"
        )


def spanned_ranks(src: Topology, dst: Topology) -> int:
    """How many ranks the two layouts span together (ranks ``0 .. n - 1``)."""
    return max(src.rank_offset + src.world_size, dst.rank_offset + dst.world_size)


def check_rank(rank: object, src: Topology, dst: Topology) -> int:
    """``rank`` if it is an int in ``range(spanned_ranks(src, dst))``, else raise."""
    world = spanned_ranks(src, dst)
    return check_index(
        "rank", rank, at_most=world - 1, why=f"the layouts span ranks 0..{world - 1}"
    )


def plan_inputs(
    src: Topology,
    dst: Topology,
    params: object,
    allocation: object,
    num_layers: int | None,
    splits: tuple[object, object],
    rank: object = None,
) -> PlanInputs:
    """Check :func:`transfer`'s arguments, before anything sized by a rank count is made: the
    layouts, the splits, the weights, the ranks spanned (at most :data:`MAX_TRANSFER_RANKS`),
    ``rank`` when given (one of them), the allocation (its rank map) and the layers each split
    places."""
    _check_layouts(src, dst)
    checked = (
        check_split(splits[0], "src_pipeline_split"),
        check_split(splits[1], "dst_pipeline_split"),
    )
    weights = _check_params(params)
    world = spanned_ranks(src, dst)
    check_size(
        "the plan's ranks (max of rank_offset + world_size)",
        world,
        at_most=MAX_TRANSFER_RANKS,
        why="the most ranks a transfer plan spans",
    )
    if rank is not None:
        check_rank(rank, src, dst)
    rank_map = rank_map_of(allocation, world)
    if num_layers is None:
        num_layers = 1 + max((p.layer for p in weights if p.layer is not None), default=0)
    check_layers("num_layers", num_layers)
    for side, topology, split in (("src", src, checked[0]), ("dst", dst, checked[1])):
        _check_split_fits(side, topology, split, num_layers)
    return PlanInputs(weights, num_layers, rank_map, checked)
