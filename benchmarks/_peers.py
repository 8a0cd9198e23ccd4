"""The peers' source choices, re-implemented on our pieces, for ``bench_transfer.py``.

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
  choice depends on its global rank, not on the slice.

``tests/torch/test_transfer_megatron.py`` checks ``megatron`` against Megatron's own planner.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from topology import Topology
from topology._preflight.allocation.rankmap import RankMap
from topology._transfer.params import Param
from topology._transfer.placement import param_placement
from topology._transfer.plan import _Planner

POLICIES = ("balanced", "first", "megatron")


class PeerPlanner(_Planner):
    """:class:`_Planner` with the peers' source choices as policies (``first``, ``megatron``)."""

    def __init__(
        self, src: Topology, dst: Topology, rank_map: RankMap | None, policy: str = "balanced"
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        super().__init__(src, dst, rank_map, policy)
        self.tp_kind = "tp"
        self.whole = False
        self.owners: tuple[int, ...] = ()
        self.groups: list[list[int]] = []
        self.chosen: dict[int, int] = {}
        self.tp_groups: dict[tuple[str, int], frozenset[int]] = {}

    def weight(self, index: int, param: Param, num_layers: int) -> None:
        """Plan one weight, after gathering its source holders for :meth:`representative`."""
        if self.policy == "megatron":
            source = param_placement(self.src, param, num_layers=num_layers)
            self.owners = tuple(sorted({r for shard in source.shards for r in shard.ranks}))
            by_dp: dict[tuple[int, ...], list[int]] = defaultdict(list)
            for rank in self.owners:
                by_dp[self.src.group_of(rank, "dp")].append(rank)
            self.groups = [by_dp[key] for key in sorted(by_dp)]
            self.tp_kind = "etp" if param.row.grid == "expert" else "tp"
            self.whole = param.row.dim is None
            self.chosen = {}
        super().weight(index, param, num_layers)

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

    def baseline(
        self,
        where: tuple[int, int, int, int, int],
        row_bytes: int,
        holders: tuple[int, ...],
        need: list[int],
    ) -> None:
        """One row per receiver, from the peer's choice of sender."""
        index, lo, hi, src_lo, dst_lo = where
        for r in need:
            sender = holders[0] if self.policy == "first" else self.sender(r, holders)
            self.rows.append((sender, r, index, lo, hi, src_lo, dst_lo, (hi - lo) * row_bytes))


def plan_rows(
    src: Topology,
    dst: Topology,
    params: Sequence[Param],
    policy: str,
    rank_map: RankMap | None = None,
    num_layers: int | None = None,
) -> PeerPlanner:
    """A planner that has planned ``params`` under ``policy`` (its ``rows`` and ``stats()``);
    ``num_layers`` defaults to one more than the largest ``param.layer``, as in ``transfer``."""
    planner = PeerPlanner(src, dst, rank_map, policy)
    layers = num_layers or 1 + max((p.layer for p in params if p.layer is not None), default=0)
    for index, param in enumerate(params):
        planner.weight(index, param, layers)
    return planner
