"""AxisGroups: any :class:`Grid`'s groups under kind names, for process groups and device meshes.

A :class:`~topology.Topology` knows Megatron's kinds; a grid with axes of your own (DeepSpeed's
``pipe``/``data``/``model``, or ``replica``/``shard``/``expert``) has no kind table. ``AxisGroups``
gives it one: each kind is a set of the grid's axes, written with ``-`` between the names
(axis names never hold ``-``), and its groups are :meth:`Grid.groups` along those axes. It answers
the questions :class:`~topology_torch.ProcessGroups` asks of a Topology (``kinds``, ``kind``,
``size``, ``groups``, ``group_of``, ``locate``), so the adapter builds torch groups and
``DeviceMesh`` objects for it without deriving a group itself.
"""

from __future__ import annotations

from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .grid import Grid, axis_indices, check_rank
from .groups import OrthogonalGroups
from .kind import Kind

__all__ = ["AxisGroups"]


def _grid(value: object) -> Grid:
    if not isinstance(value, Grid):
        raise TopologyError(
            f"grid must be a topology.Grid, got {show(value)} ({type(value).__name__}); build "
            "one with Grid.from_sizes(pipe=2, data=4, model=2)"
        )
    return value


def _kinds(value: object) -> Any:
    if isinstance(value, str):
        return (value,)  # one kind; a bare string is never a sequence of kinds here
    if isinstance(value, list):
        return tuple(value)
    return value


@attrs.frozen(repr=False)
class AxisGroups:
    """The groups of ``grid`` under kind names: a kind is a set of axes joined by ``-``.

    ``kinds`` lists the kinds to offer (default: each axis alone, outermost first). A kind may
    name its axes in any order (``"model-pipe"`` is ``"pipe-model"``); it is kept in the grid's
    order, outermost first. Every rank of the grid is in exactly one group of each kind.

    >>> layout = AxisGroups(Grid.from_sizes(pipe=2, data=2, model=2), kinds=("data", "model-pipe"))
    >>> layout.kinds
    ('data', 'pipe-model')
    >>> layout.group_of(5, "data"), layout.group_of(5, "pipe-model"), layout.local_rank(5, "data")
    ((5, 7), (0, 1, 4, 5), 0)
    """

    grid: Grid = attrs.field(converter=_grid)
    """The layout: named axes, their sizes and strides, and the first rank."""
    kinds: tuple[str, ...] = attrs.field(default=None, converter=_kinds)
    """The kinds offered, each in the grid's axis order (``"pipe-model"``), none twice."""

    def __attrs_post_init__(self) -> None:
        given = self.kinds
        if given is None:
            object.__setattr__(self, "kinds", self.grid.axes)
            return
        if not isinstance(given, tuple) or not given:
            raise TopologyError(
                f"kinds must be a non-empty sequence of axis sets such as ('data', 'pipe-model'), "
                f"got {show(given)}"
            )
        canonical: list[str] = []
        for name in given:
            kind = self._canonical(name)
            if kind in canonical:
                raise TopologyError(
                    f"kind {show(name)} is listed twice in {show(given)} (as {kind!r}); list each "
                    "set of axes once"
                )
            canonical.append(kind)
        object.__setattr__(self, "kinds", tuple(canonical))

    # -- what ProcessGroups asks of a layout --------------------------------------------------

    @property
    def world_size(self) -> int:
        """How many ranks the grid holds."""
        return self.grid.world_size

    @property
    def rank_offset(self) -> int:
        """The grid's first rank."""
        return self.grid.rank_offset

    def kind(self, name: str) -> Kind:
        """The kind called ``name`` (its axes in any order).

        >>> AxisGroups(Grid.from_sizes(pipe=2, model=2)).kind("model").axes
        ('model',)
        """
        kind = self._known(name)
        return Kind(kind, (), self.grid, tuple(kind.split("-")))

    def size(self, kind: str) -> int:
        """How many ranks one group of ``kind`` holds."""
        return self.grid.size(*self._axes(kind))

    def groups(self, kind: str) -> OrthogonalGroups:
        """All groups of ``kind``, lazily, ascending (see :meth:`Grid.groups`)."""
        return self.grid.groups(*self._axes(kind))

    def group_of(self, rank: int, kind: str) -> tuple[int, ...]:
        """The group of ``kind`` that holds ``rank``.

        Raises:
            TopologyError: for a kind this layout does not offer or a rank outside the grid.
        """
        return self.grid.group_of(rank, *self._axes(kind))

    def local_rank(self, rank: int, kind: str) -> int:
        """The rank's position in its group of ``kind``."""
        return self.grid.index_in_group(rank, *self._axes(kind))

    def group_index(self, rank: int, kind: str) -> int:
        """Which group of ``kind`` holds ``rank``: ``groups(kind)[group_index(rank, kind)]``."""
        return self.locate(rank, kind)[0]

    def locate(self, rank: int, kind: str) -> tuple[int, int]:
        """``(group index, local rank)`` of ``rank`` for ``kind``."""
        axes = self._axes(kind)
        check_rank(self.grid, rank)  # TopologyError for a rank outside the grid
        index = self.grid.groups(*axes).index_of_rank(rank)
        return index or 0, self.grid.index_in_group(rank, *axes)

    def has_group(self, rank: int, kind: str) -> bool:
        """True for every rank of the grid and offered kind (every axis set covers the grid).

        Raises:
            TopologyError: for a kind this layout does not offer or a rank outside the grid.
        """
        self._axes(kind)
        check_rank(self.grid, rank)
        return True

    # -- helpers --------------------------------------------------------------------------------

    def _canonical(self, name: object) -> str:
        if not isinstance(name, str) or not name:
            raise TopologyError(
                f"a kind must be axis names joined by '-' such as 'pipe-model', got {show(name)}"
            )
        indices = axis_indices(self.grid, (name,))  # TopologyError: unknown or repeated axis
        return "-".join(self.grid.axes[i] for i in sorted(indices))

    def _known(self, name: object) -> str:
        try:
            kind = self._canonical(name)
        except TopologyError:
            kind = None
        if kind not in self.kinds:
            raise TopologyError(
                f"unknown kind {show(name)}; this layout offers {', '.join(self.kinds)} (pass "
                "kinds=... to AxisGroups for other sets of axes)"
            )
        return kind

    def _axes(self, kind: str) -> tuple[str, ...]:
        return tuple(self._known(kind).split("-"))

    def __str__(self) -> str:
        return f"{self.grid} with kinds {', '.join(self.kinds)}"

    def __repr__(self) -> str:
        return f"AxisGroups({self.grid!r}, kinds={self.kinds!r})"
