"""RankInfo: everything the layout says about one rank."""

from __future__ import annotations

from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._fields import instance, pairs, whole
from .._layout.groups import Ranks
from .kinds import canonical_kind
from .pipeline import Pipeline

__all__ = ["RankInfo"]


@attrs.frozen(repr=False)
class RankInfo:
    """One rank's coordinates in both grids, its group of every kind, and its pipeline.

    ``groups`` pairs each kind with the rank's group as a lazy :class:`Ranks` (equal to the
    tuple :meth:`Topology.group_of` returns), or ``None`` where the rank belongs to no group
    of that kind (a middle pipeline stage has no embedding group). Nothing is enumerated, so
    a RankInfo is small at any world size.

    >>> from topology import Topology
    >>> info = Topology(8, tp=2, pp=2).rank_info(5)
    >>> info.coord("dense"), info.group("dp"), info.local_rank("dp")
    ({'pp': 1, 'dp': 0, 'cp': 0, 'tp': 1}, (5, 7), 0)
    """

    rank: int = attrs.field(validator=whole(0))
    dense: tuple[tuple[str, int], ...] = attrs.field(validator=pairs(int))
    expert: tuple[tuple[str, int], ...] = attrs.field(validator=pairs(int))
    groups: tuple[tuple[str, Ranks | None], ...] = attrs.field(validator=pairs(Ranks, None))
    pipeline: Pipeline = attrs.field(validator=instance(Pipeline))

    def coord(self, grid: str = "dense") -> dict[str, int]:
        """The rank's coordinates in the ``"dense"`` or ``"expert"`` grid, outermost first.

        The expert coordinates are empty for a dense-only layout without an expert grid.
        """
        if grid not in ("dense", "expert"):
            raise TopologyError(f"grid must be 'dense' or 'expert', got {show(grid)}")
        return dict(self.dense if grid == "dense" else self.expert)

    def group(self, kind: str) -> Ranks | None:
        """The rank's group of ``kind`` (None if it has none); Megatron names are accepted."""
        groups = dict(self.groups)
        name = canonical_kind(kind) if isinstance(kind, str) else None
        if name not in groups:
            raise TopologyError(f"unknown kind {show(kind)}; valid kinds: {', '.join(groups)}")
        return groups[name]

    def local_rank(self, kind: str) -> int | None:
        """The rank's position in its group of ``kind`` (None if it has none)."""
        group = self.group(kind)
        return None if group is None else group.index(self.rank)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``{"rank", "dense", "expert", "groups": {kind: {...}}, "pipeline"}``.

        A group's ``ranks`` is a list up to 1024 ranks, else a summary object with ``size``,
        ``first``, ``last`` and ``runs`` (docs/cli.md).
        """
        return {
            "rank": self.rank,
            "dense": dict(self.dense),
            "expert": dict(self.expert),
            "groups": {
                kind: None
                if group is None
                else {
                    "ranks": group.to_json(),
                    "local_rank": group.index(self.rank),
                    "size": len(group),
                }
                for kind, group in self.groups
            },
            "pipeline": self.pipeline.to_dict(),
        }

    def __repr__(self) -> str:
        present = sum(group is not None for _, group in self.groups)
        return (
            f"RankInfo(rank={self.rank}, dense={dict(self.dense)}, expert={dict(self.expert)}, "
            f"groups=<{present} of {len(self.groups)} kinds>, pipeline={self.pipeline!r})"
        )
