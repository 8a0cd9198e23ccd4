"""The peers' source choices, re-implemented on our pieces: ``benchmarks/bench_transfer.py``'s
baselines, and what the transfer tests check them by.

- ``first``: NeMo-RL's ``nccl_reshard``, the first holder of each slice.
- ``megatron``: megatron-core 0.19's resharding planner (``select_src_metadata_balanced``, then
  ``_plan_tp`` / ``_finalize_dp_transfers``). For each receiver ``r`` and weight it picks one
  *representative* source rank ``o``: ``r`` itself if ``r`` holds any shard of the weight
  (colocated), else, grouping the holders by their data-parallel group (dp, without cp: the
  ``pg_collection.dp`` of dense and expert weights alike) and sorting the groups, group
  ``r mod n`` of the ``n`` groups and, in it, holder ``(r div n) mod size``; with one group
  (a stage's replicas of a source with tp = cp = 1), its first holder. Every slice of the
  weight then comes from ``o``'s tensor-parallel group (etp for experts): the member holding it
  (``o`` itself for a whole weight). So one receiver draws a weight from one tp group, and the
  choice depends on its global rank, not on the slice. Checked without GTP only: a source under
  gtp (egtp) > 1 is refused.

Both send each piece whole, one row per (piece, receiver lacking it), on the pieces
:func:`topology.transfer` cuts (:func:`topology._transfer.param_placement.pieces`), so the
bytes moved are equal; the statistics are :func:`topology.transfer`'s, bounds included.
``tests/torch/test_transfer_megatron.py`` checks ``megatron`` against Megatron's own planner;
``tests/test_transfer_reference.py`` checks ``first`` against the reference planner. They are
built on the planner's private pieces, so they live with the tests (the benchmark imports only
public modules of the library, and this one).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import Any

from topology import PipelineSplit, Topology
from topology._machine.rankmap import RankMap
from topology._transfer.param_placement import param_placement, piece_ranks, placement_key
from topology._transfer.params import Param
from topology._transfer.planner import Row, Rows, levels, rows_bytes, tally

POLICIES = ("first", "megatron")

_Piece = tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], Rows | None]
"""(lo, hi, src_lo, dst_lo, holders, the receivers lacking it, dim-0 rows of a 2-D block) of one
placement class."""


class PeerPlanner:
    """A plan under one of the peers' source choices (see the module): its ``rows`` and
    ``stats()``, keyed and ordered as :func:`topology.transfer`'s."""

    def __init__(
        self,
        src: Topology,
        dst: Topology,
        rank_map: RankMap | None,
        policy: str,
        splits: tuple[PipelineSplit | None, PipelineSplit | None] = (None, None),
    ) -> None:
        self.splits = splits
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        if policy == "megatron" and (src.gtp > 1 or src.egtp > 1):
            raise ValueError(
                f"the megatron policy is checked without GTP only, got gtp({src.gtp}) / "
                f"egtp({src.egtp}); use a source with gtp = egtp = 1"
            )
        self.src, self.dst, self.policy = src, dst, policy
        self.names, self.labels = levels(rank_map)
        self.classes: dict[tuple[Hashable, Hashable], tuple[list[_Piece], tuple[int, ...]]] = {}
        self.needed: dict[tuple[int, ...], int] = defaultdict(int)
        self.demands: dict[tuple[tuple[int, ...], tuple[int, ...]], None] = {}
        self.rows: list[Row] = []
        self.tp_kind = "tp"
        self.whole = False
        self.owners: tuple[int, ...] = ()
        self.groups: list[list[int]] = []
        self.chosen: dict[int, int] = {}
        self.tp_groups: dict[tuple[str, int], frozenset[int]] = {}

    def weight(self, index: int, param: Param, num_layers: int) -> None:
        """Plan every piece of one weight, one row per receiver lacking it."""
        key = (
            placement_key(self.src, param, num_layers=num_layers, pipeline_split=self.splits[0]),
            placement_key(self.dst, param, num_layers=num_layers, pipeline_split=self.splits[1]),
        )
        if key not in self.classes:
            self.classes[key] = self._pieces(param, num_layers)
        found, owners = self.classes[key]
        if self.policy == "megatron":
            self._owners(param, owners)
        for lo, hi, src_lo, dst_lo, holders, need, rows in found:
            row_bytes = rows_bytes(param, rows)
            nbytes = (hi - lo) * row_bytes
            self.needed[holders] += nbytes * len(need)
            self.demands[holders, need] = None
            for r in need:
                sender = holders[0] if self.policy == "first" else self.sender(r, holders)
                row = (sender, r, index, lo, hi, src_lo, dst_lo, nbytes)
                self.rows.append(row if rows is None else (*row, rows))

    def _pieces(self, param: Param, num_layers: int) -> tuple[list[_Piece], tuple[int, ...]]:
        """The pieces of one class that some receiver lacks, and every source holder."""
        source = param_placement(
            self.src, param, num_layers=num_layers, pipeline_split=self.splits[0]
        )
        target = param_placement(
            self.dst, param, num_layers=num_layers, pipeline_split=self.splits[1]
        )
        found: list[_Piece] = []
        for lo, hi, src_lo, dst_lo, holders, receivers, rows in piece_ranks(source, target):
            held = set(holders)
            need = tuple(r for r in receivers if r not in held)
            if need:
                found.append((lo, hi, src_lo, dst_lo, holders, need, rows))
        owners = tuple(sorted({r for shard in source.shards for r in shard.ranks}))
        return found, owners

    def _owners(self, param: Param, owners: tuple[int, ...]) -> None:
        """Gather one weight's source holders by dp group for :meth:`representative`."""
        self.owners = owners
        by_dp: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for rank in owners:
            by_dp[self.src.group_of(rank, "dp")].append(rank)
        self.groups = [by_dp[key] for key in sorted(by_dp)]
        self.tp_kind = "etp" if param.row.grid == "expert" else "tp"
        self.whole = param.row.dim is None
        self.chosen = {}

    def representative(self, receiver: int) -> int:
        """Megatron's representative source rank for ``receiver`` (see the module)."""
        if receiver not in self.chosen:
            if receiver in self.owners or len(self.groups) == 1:
                chosen = receiver if receiver in self.owners else self.owners[0]
            else:
                n = len(self.groups)
                group = self.groups[receiver % n]
                chosen = group[(receiver // n) % len(group)]
            self.chosen[receiver] = chosen
        return self.chosen[receiver]

    def sender(self, receiver: int, holders: tuple[int, ...]) -> int:
        """The rank Megatron reads a slice held by ``holders`` from, for ``receiver``."""
        owner = self.representative(receiver)
        if self.whole:
            return owner
        key = (self.tp_kind, owner)
        if key not in self.tp_groups:
            self.tp_groups[key] = frozenset(self.src.group_of(owner, self.tp_kind))
        (found,) = self.tp_groups[key].intersection(holders)
        return found

    def stats(self) -> dict[str, Any]:
        """:func:`topology.transfer`'s statistics, of these rows."""
        return tally(  # bytes at 7: a 2-D block's ops add its rows at 8
            self.src,
            self.names,
            self.labels,
            ((row[0], row[1], row[7]) for row in self.rows),
            ops=len(self.rows),
            needed=self.needed.items(),
            demands=list(self.demands),
        )


def plan_rows(
    src: Topology,
    dst: Topology,
    params: Sequence[Param],
    policy: str,
    rank_map: RankMap | None = None,
    num_layers: int | None = None,
    splits: tuple[PipelineSplit | None, PipelineSplit | None] = (None, None),
) -> PeerPlanner:
    """A planner that has planned ``params`` under ``policy`` (its ``rows`` and ``stats()``);
    ``num_layers`` defaults to one more than the largest ``param.layer``, as in ``transfer``."""
    planner = PeerPlanner(src, dst, rank_map, policy, splits)
    layers = num_layers or 1 + max((p.layer for p in params if p.layer is not None), default=0)
    for index, param in enumerate(params):
        planner.weight(index, param, layers)
    return planner
