"""One rank's part of a transfer plan, without the whole plan (private).

A rank's operations are the units it sends or receives of the pieces whose holder set or
receivers it belongs to. Which holder serves a unit depends on the rotation of the piece's
holder set (:mod:`topology._transfer.plan`), and that rotation is carried from piece to piece over
every earlier weight with the same holder set, whether this rank takes part in those pieces or
not. So one rank's plan needs, of every weight, only the pieces whose holder set is *relevant*:
one that some piece pairs with this rank (as a holder or a receiver). The pass
(:meth:`RankPlanner.plan`):

1. the class of every weight (:meth:`Planner.class_key`);
2. the classes this rank is in (among the holders of their source placement or the receivers
   of their destination placement): their pieces, and from them the relevant holder sets;
3. the other classes whose source placement has a relevant holder set: their pieces (they
   turn a rotation this rank depends on, without pairing with it);
4. every weight in plan order, through its class's pieces of relevant holder sets only:
   each turns its holder set's rotation, and those pairing with this rank keep its units.

No class outside steps 2 and 3 has its destination placement or pieces made, no block,
statistic or operation of another rank is kept.

With a relay step (:mod:`topology._transfer.relay`) the receivers a piece's network stage
serves, and so the units of its pattern, depend on who relayed what before it in every domain
it reaches: the pass then plans every weight as the whole plan's pass does, keeping only this
rank's units of both stages (still no block or operation of another rank).

Memory: the classes' keys, one per weight, the placements and pieces of the classes of steps 2
and 3 (they grow with the ranks of one pipeline stage, not with the number of weights or
operations), plus this rank's own operations.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import attrs

from .._machine.allocation import Allocation
from .._machine.rankmap import RankMap
from .._megatron.split.split import PipelineSplit
from .._megatron.topology import Topology
from .param_placement import Target
from .params import Param
from .plan import RankTransfer, TransferOp, check_relay, plan_inputs
from .planner import (
    Block,
    ClassPiece,
    Pattern,
    Planner,
    Row,
    Rows,
    bulk,
    rows_bytes,
    turn,
    unit_row,
)

_Move = tuple[int, int, int, int, int, Rows | None, int, int, int, int, bool]
"""A piece of a class (:data:`~topology._transfer.planner.ClassPiece`) with its holder set, the
set's size, its cut count, its rotation's turn and whether it pairs with the rank."""

__all__ = ["RankPlanner", "transfer_rank"]


class RankPlanner(Planner):
    """A planning pass that keeps only ``rank``'s operations (see the module)."""

    def __init__(
        self,
        src: Topology,
        dst: Topology,
        rank_map: RankMap | None,
        rank: int,
        splits: tuple[PipelineSplit | None, PipelineSplit | None] = (None, None),
        target: Target | None = None,
        relay: bool = False,
    ) -> None:
        super().__init__(src, dst, rank_map, splits, target=target, relay=relay)
        self.rank = rank
        self.roles: dict[int, tuple[bool, bool]] = {}
        """Per pair: whether ``rank`` holds its pieces, and whether it needs them."""
        self.mine: dict[tuple[int, int, int], Pattern] = {}
        """The patterns of the pieces ``rank`` takes part in, per (pair, cuts, rotation start)."""
        self.sent: list[Row] = []
        self.received: list[Row] = []
        self.relay_sent: list[Row] = []
        """With a relay step: the relay copies (stage 2) ``rank`` sends, in plan order."""
        self.relay_received: list[Row] = []
        """With a relay step: the relay copies ``rank`` receives, in plan order."""
        self.num_layers = 0
        """The model's depth (set by :meth:`plan`)."""
        self.receives = dst.rank_offset <= rank < dst.rank_offset + dst.world_size
        """Whether ``rank`` is one of the destination's ranks."""
        self.holding: dict[Hashable, bool] = {}
        """Per source key: whether ``rank`` holds some of it."""
        self.receiving: dict[Hashable, bool] = {}
        """Per destination key: whether ``rank`` receives some of it."""

    def plan(self, params: Sequence[Param], num_layers: int) -> None:
        """Plan ``rank``'s part of every weight (see the module)."""
        self.num_layers = num_layers
        if self.relay is not None:
            for index, param in enumerate(params):
                self.weight(index, param, num_layers)
            return
        keys = [self.class_key(param, num_layers) for param in params]
        first: dict[tuple[Hashable, Hashable], int] = {}
        for index, key in enumerate(keys):
            first.setdefault(key, index)
        others = [key for key, index in first.items() if not self._takes_part(key, params[index])]
        relevant = {
            self.pair_list[piece[4]][0]
            for pieces in self.classes.values()
            for piece in pieces
            if any(self._role(piece[4]))
        }
        wanted = {self.holder_list[h] for h in relevant}
        for key in others:
            if not wanted.isdisjoint(self.sources[key[0]].holders.values()):
                self.classes[key] = self._pieces(params[first[key]], num_layers, key)
        moves = {key: self._moves(pieces, relevant) for key, pieces in self.classes.items()}
        rotation = self.rotation
        for index, key in enumerate(keys):
            found = moves.get(key)
            if not found:
                continue
            param = params[index]
            for lo, hi, src_lo, dst_lo, pair, rows, h, n, cuts, step, mine in found:
                start = rotation[h]
                rotation[h] = (start + step) % n
                if mine:
                    row_bytes = param.row_bytes if rows is None else rows_bytes(param, rows)
                    self.keep((index, lo, hi, src_lo, dst_lo), row_bytes, pair, cuts, start, rows)

    def _takes_part(self, key: tuple[Hashable, Hashable], param: Param) -> bool:
        """Whether ``rank`` holds or receives some of the class ``key`` (whose first weight is
        ``param``); if so, make the class's pieces."""
        num_layers = self.num_layers
        rank = self.rank
        held = self.holding.get(key[0])
        if held is None:
            source = self.source(key[0], param, num_layers)
            held = self.holding[key[0]] = any(rank in h for h in source.holders.values())
        got: bool | None = False
        if not held and self.receives:
            got = self.receiving.get(key[1])
            if got is None:
                target = self.destination(key[1], param, num_layers)
                got = self.receiving[key[1]] = any(rank in r for r in target.receivers.values())
        if held or got:
            self.classes[key] = self._pieces(param, num_layers, key)
        return bool(held or got)

    def _role(self, pair: int) -> tuple[bool, bool]:
        """Whether ``rank`` holds the pieces of ``pair``, and whether it needs them."""
        role = self.roles.get(pair)
        if role is None:
            h, need = self.pair_list[pair]
            role = self.roles[pair] = (self.rank in self.holder_list[h], self.rank in need)
        return role

    def _moves(self, pieces: list[ClassPiece], relevant: set[int]) -> list[_Move]:
        """A class's pieces of relevant holder sets, each with its holder set, the set's size,
        the piece's cut count, the turn of its rotation and whether it pairs with ``rank``."""
        found: list[_Move] = []
        for piece in pieces:
            h, need = self.pair_list[piece[4]]
            if h not in relevant:
                continue
            n = len(self.holder_list[h])
            cuts, step = turn(n, len(need), piece[1] - piece[0])
            found.append((*piece, h, n, cuts, step, any(self._role(piece[4]))))
        return found

    def keep_relay(self, block: Block, row_bytes: int) -> None:
        """Keep ``rank``'s units of one piece's relay copies."""
        pattern = block[5]
        units = pattern.by_sender.get(self.rank)
        if units:
            self.relay_sent += [unit_row(block, row_bytes, u) for u in units]
        if self.rank in pattern.need:
            self.relay_received += [
                unit_row(block, row_bytes, u) for u in pattern.received_by(self.rank)
            ]

    def keep(
        self,
        where: tuple[int, int, int, int, int],
        row_bytes: int,
        pair: int,
        cuts: int,
        first: int,
        rows: Rows | None,
    ) -> None:
        """Keep ``rank``'s units of one piece (the rotation has moved on already)."""
        role = self._role(pair)
        if not (role[0] or role[1]):
            return
        pattern = self.mine.get((pair, cuts, first))
        if pattern is None:
            pattern = self.mine[pair, cuts, first] = self.pattern(pair, cuts, first)
        block = (*where, pattern, rows)
        if role[0]:
            self.sent += [
                unit_row(block, row_bytes, u) for u in pattern.by_sender.get(self.rank, ())
            ]
        if role[1]:
            self.received += [unit_row(block, row_bytes, u) for u in pattern.received_by(self.rank)]


def transfer_rank(
    src: Topology,
    dst: Topology,
    params: Sequence[Param],
    rank: int,
    *,
    allocation: Allocation | RankMap | None = None,
    num_layers: int | None = None,
    src_pipeline_split: PipelineSplit | None = None,
    dst_pipeline_split: PipelineSplit | None = None,
    target: Target | None = None,
    relay: bool = False,
) -> RankTransfer:
    """What ``rank`` sends and receives in :func:`~topology.transfer`'s plan, without making the
    whole plan: equal to ``transfer(src, dst, params, ...).for_rank(rank)``.

    Algorithm: the class of every weight, the pieces of the classes this rank takes part in
    and of those sharing a holder set with them, then one pass over the weights in plan order
    through those pieces that turns each holder set's rotation and keeps only ``rank``'s
    operations (a rank's senders depend on the rotation carried over every earlier weight
    with the same holders; see the module).

    Args:
        src, dst, params, allocation, num_layers, src_pipeline_split, dst_pipeline_split,
            target, relay: as for :func:`~topology.transfer` (with ``relay`` every weight is
            planned, see the module).
        rank: the rank, in ``range`` of the ranks both layouts span.

    Returns:
        A :class:`~topology.RankTransfer`: its sends and its receives, each in plan order.

    Raises:
        TopologyError: what :func:`~topology.transfer` raises, or a rank outside the layouts'
            ranks (checked before any planning).

    >>> from topology import Topology
    >>> w = [Param("w", (8, 8), sharding="column", layer=0)]
    >>> mine = transfer_rank(Topology(2, tp=2), Topology(2, dp=2, rank_offset=2), w, 0)
    >>> [(op.src, op.dst, op.start, op.stop) for op in mine.sends]
    [(0, 2, 0, 4), (0, 3, 0, 4)]
    """
    given = plan_inputs(
        src, dst, params, allocation, num_layers, (src_pipeline_split, dst_pipeline_split), rank
    )
    check_relay(relay, given.rank_map, allocation)
    planner = RankPlanner(
        src, dst, given.rank_map, rank, splits=given.splits, target=target, relay=relay
    )
    with bulk():  # the pass makes acyclic tuples and records: no cyclic collection in it
        planner.plan(given.params, given.num_layers)
    with bulk():
        sends = _ops(planner.sent, given.params) + _ops(planner.relay_sent, given.params, 2)
        recvs = _ops(planner.received, given.params)
        recvs += _ops(planner.relay_received, given.params, 2)
    return RankTransfer(rank, tuple(sends), tuple(recvs))


def _ops(rows: list[Row], params: Sequence[Param], stage: int = 1) -> list[TransferOp]:
    """The operations of ``rows`` (of plan stage ``stage``) on ``params``."""
    ops = [TransferOp(r[0], r[1], params[r[2]], *r[3:]) for r in rows]
    return ops if stage == 1 else [attrs.evolve(op, stage=stage) for op in ops]
