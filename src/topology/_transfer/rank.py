"""One rank's part of a transfer plan, without the whole plan (private).

A rank's operations are the units it sends or receives of the pieces whose holder set or
receivers it belongs to. Which holder serves a unit depends on the rotation of the piece's
holder set (:mod:`topology._transfer.plan`), and that rotation is carried from piece to piece over
every earlier weight with the same holder set, whether this rank takes part in those pieces or
not. So one rank's plan is one planning pass over every weight (its classes, pieces and
(holders, receivers) pairs, computed once each, as :class:`Planner` does) that keeps, per
holder set, only its rotation counter, and makes the patterns and operations of the pieces this
rank takes part in: no block, no statistics and no operation of another rank is kept.

Memory: the pass holds each class's pieces and each distinct (holders, receivers) pair's ranks,
as the whole plan's pass does (they grow with the ranks of one pipeline stage, not with the
number of weights or operations), plus this rank's own operations.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._machine.allocation import Allocation
from .._machine.rankmap import RankMap
from .._megatron.split.split import PipelineSplit
from .._megatron.topology import Topology
from .param_placement import Target
from .params import Param
from .plan import RankTransfer, TransferOp, plan_inputs
from .planner import Pattern, Planner, Row, Rows, bulk, unit_row

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
    ) -> None:
        super().__init__(src, dst, rank_map, splits, target=target)
        self.rank = rank
        self.roles: dict[int, tuple[bool, bool]] = {}
        """Per pair: whether ``rank`` holds its pieces, and whether it needs them."""
        self.mine: dict[tuple[int, int, int], Pattern] = {}
        """The patterns of the pieces ``rank`` takes part in, per (pair, cuts, rotation start)."""
        self.sent: list[Row] = []
        self.received: list[Row] = []

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
        role = self.roles.get(pair)
        if role is None:
            h, need = self.pair_list[pair]
            role = self.roles[pair] = (self.rank in self.holder_list[h], self.rank in need)
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
) -> RankTransfer:
    """What ``rank`` sends and receives in :func:`~topology.transfer`'s plan, without making the
    whole plan: equal to ``transfer(src, dst, params, ...).for_rank(rank)``.

    Algorithm: one planning pass over every weight that keeps a rotation counter per holder
    set and only ``rank``'s operations (a rank's senders depend on the rotation carried over
    every earlier weight with the same holders, so no weight can be skipped).

    Args:
        src, dst, params, allocation, num_layers, src_pipeline_split, dst_pipeline_split,
            target: as for :func:`~topology.transfer`.
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
    planner = RankPlanner(src, dst, given.rank_map, rank, splits=given.splits, target=target)
    with bulk():  # the pass makes acyclic tuples and records: no cyclic collection in it
        for index, param in enumerate(given.params):
            planner.weight(index, param, given.num_layers)
    weights = given.params
    with bulk():
        sends = tuple(TransferOp(r[0], r[1], weights[r[2]], *r[3:]) for r in planner.sent)
        recvs = tuple(TransferOp(r[0], r[1], weights[r[2]], *r[3:]) for r in planner.received)
    return RankTransfer(rank, sends, recvs)
