"""DeepSpeed's pipeline topology (``deepspeed.runtime.pipe.topology``) over a Grid (a façade).

Switch the import and keep the code::

    # from deepspeed.runtime.pipe.topology import ProcessTopology, PipelineParallelGrid
    from topology_torch.compat.deepspeed import ProcessTopology, PipelineParallelGrid

``ProcessTopology(axes, dims)`` lists its axes **outermost first** (row-major, the last axis
fastest), exactly like :class:`topology.Grid`, and every question it answers is the grid's:
``get_rank`` is ``Grid.rank``, ``filter_match`` is ``Grid.matching``, ``get_axis_comm_lists`` is
``Grid.groups``, ``get_rank_repr`` is ``Grid.rank_name``. Nothing enumerates the world unless the
answer is the world (DeepSpeed builds a dict of every coordinate and scans it). The results are
DeepSpeed 0.19.8's, lists and all, and ``get_coord`` returns the same ``ProcessCoord`` namedtuple.

``PipelineParallelGrid(topology)`` makes DeepSpeed's torch.distributed groups from the grid's rank
lists, calling ``new_group`` for every group in DeepSpeed's order (model, data, pipe, then slice
groups). SPMD contract: construct it on every rank, with an equal topology, in the same order
relative to other group creation.

Errors: bad input raises :class:`topology.TopologyError` (a ``ValueError``) where DeepSpeed raises
``ValueError``; where DeepSpeed ``assert``s (a coordinate outside the grid in ``get_rank``, a grid
that does not cover the world) it raises :class:`FacadeAssertionError`, also an
``AssertionError``. Deliberately different: an unknown axis in ``get_rank`` or ``filter_match``
is a ``TopologyError`` naming the valid axes (DeepSpeed raises ``TypeError`` or
``AttributeError``); axis names must be Python identifiers (DeepSpeed's namedtuple needs that too)
and sizes at least 1 (DeepSpeed accepts an empty world); ``PipelineParallelGrid`` does not print
the topology on rank 0, and ``process_group`` is ignored, as in DeepSpeed.

>>> topo = PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2)
>>> topo.get_axis_names(), topo.get_rank(pipe=1, data=0, model=1)
(['pipe', 'data', 'model'], 5)
>>> topo.get_coord(6), topo.filter_match(pipe=0, data=1)
(ProcessCoord(pipe=1, data=1, model=0), [2, 3])
>>> topo.get_axis_comm_lists("pipe"), topo.get_rank_repr(5)
([[0, 4], [1, 5], [2, 6], [3, 7]], 'model_01')
"""

from __future__ import annotations

import keyword
import operator
from collections import namedtuple
from collections.abc import Iterable, Sequence
from typing import Any

import torch.distributed as dist

from topology import Grid, TopologyError

from .._args import check_size
from .._process_groups import require_initialized
from ._errors import FacadeAssertionError

__all__ = [
    "PipeDataParallelTopology",
    "PipeModelDataParallelTopology",
    "PipelineParallelGrid",
    "ProcessTopology",
]

_SHOWN_IN_STR = 64
"""``str`` lists every coordinate, like DeepSpeed, up to this many ranks; beyond, the ends."""


def _integer(value: object) -> object:
    """``value`` as a plain int when it is an integer (a numpy or torch int), else unchanged."""
    if isinstance(value, bool) or type(value) is int:
        return value
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return value


class ProcessTopology:
    """Named axes of given sizes over ranks ``0 .. prod(dims) - 1``, outermost axis first.

    Args:
        axes: the axis names, outermost first (identifiers, each once).
        dims: the size of each axis.

    Raises:
        TopologyError: names that are not distinct identifiers, sizes below 1, or a length
            mismatch between ``axes`` and ``dims``.

    >>> topo = ProcessTopology(axes=["x", "y"], dims=[2, 3])
    >>> topo.get_rank(x=0, y=1), topo.get_dim("y"), topo.world_size()
    (1, 3, 6)
    >>> topo.get_axis_list(axis="y", idx=0), topo.get_coord(rank=4).y
    ([0, 3], 1)
    """

    def __init__(self, axes: Sequence[str], dims: Sequence[int]) -> None:
        if isinstance(axes, str) or not isinstance(axes, Iterable):
            raise TopologyError(f"axes must be a list of names like ['pipe', 'data'], got {axes!r}")
        if isinstance(dims, str) or not isinstance(dims, Iterable):
            raise TopologyError(f"dims must be a list of sizes like [2, 4], got {dims!r}")
        names = tuple(axes)
        self._grid = Grid(names, tuple(_integer(d) for d in dims))
        for name in names:
            if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
                raise TopologyError(
                    f"axis name {name!r} must be an identifier that is not a keyword and does not "
                    "start with '_' (it names a ProcessCoord field), e.g. 'pipe'"
                )
        self.ProcessCoord: Any = namedtuple("ProcessCoord", names)  # type: ignore[misc]

    @classmethod
    def from_grid(cls, grid: Grid) -> ProcessTopology:
        """The topology of a :class:`topology.Grid` that starts at rank 0.

        >>> ProcessTopology.from_grid(Grid.from_sizes(pipe=2, data=4)).get_dim("data")
        4
        """
        if not isinstance(grid, Grid) or grid.rank_offset:
            raise TopologyError(f"from_grid needs a Grid starting at rank 0, got {grid!r}")
        return cls(grid.axes, grid.shape)

    @property
    def grid(self) -> Grid:
        """The :class:`topology.Grid` that answers every question."""
        return self._grid

    @property
    def axes(self) -> list[str]:
        """The axis names, outermost first (a fresh list)."""
        return list(self._grid.axes)

    @property
    def dims(self) -> list[int]:
        """The axis sizes, outermost first (a fresh list)."""
        return list(self._grid.shape)

    def get_rank(self, /, **coord_kwargs: int) -> int:
        """The rank at a full coordinate, given as keywords.

        Raises:
            TopologyError: a missing or unknown axis (use ``filter_match`` for a slice).
            FacadeAssertionError: a coordinate outside its axis (DeepSpeed asserts).
        """
        axes = self._grid.axes
        unknown = [name for name in coord_kwargs if name not in axes]
        if unknown:
            raise TopologyError(f"unknown axis {unknown[0]!r}; this topology has axes {axes!r}")
        missing = [name for name in axes if name not in coord_kwargs]
        if missing:
            raise TopologyError(
                f"get_rank() needs a coordinate for every axis of {axes!r}, missing "
                f"{missing[0]!r}; use filter_match() for a slice"
            )
        coord = {name: _integer(value) for name, value in coord_kwargs.items()}
        try:
            return self._grid.rank(**coord)  # type: ignore[arg-type]
        except TopologyError as error:
            raise FacadeAssertionError(str(error)) from error

    def get_axis_names(self) -> list[str]:
        """The axis names, outermost first."""
        return list(self._grid.axes)

    def get_rank_repr(
        self,
        rank: int,
        omit_axes: Iterable[str] = ("data", "pipe"),
        inner_sep: str = "_",
        outer_sep: str = "-",
    ) -> str:
        """``rank``'s name for checkpoint files, e.g. ``'model_01'`` (``Grid.rank_name``).

        Axes in ``omit_axes`` that the topology lacks are ignored, as in DeepSpeed.

        >>> ProcessTopology(["a", "b"], [2, 2]).get_rank_repr(3, omit_axes=[])
        'a_01-b_01'
        """
        skipped = frozenset(omit_axes)
        omit = tuple(name for name in self._grid.axes if name in skipped)
        return self._grid.rank_name(
            _integer(rank),  # type: ignore[arg-type]
            omit=omit,
            inner_sep=inner_sep,
            outer_sep=outer_sep,
        )

    def get_dim(self, axis: str) -> int:
        """The size of ``axis``, or 0 when the topology has no such axis (as in DeepSpeed)."""
        if axis not in self._grid.axes:
            return 0
        return self._grid.shape[self._grid.axes.index(axis)]

    def get_coord(self, rank: int) -> Any:
        """``rank``'s coordinate as a ``ProcessCoord`` namedtuple (``.pipe``, ``.data``, ...).

        Raises:
            TopologyError: a rank outside ``0 .. world_size() - 1``.
        """
        return self.ProcessCoord(**self._grid.coord(_integer(rank)))  # type: ignore[arg-type]

    def get_axis_comm_lists(self, axis: str) -> list[list[int]]:
        """The rank lists that vary along ``axis`` only, ordered by their first rank.

        An unknown axis gives ``[]``, as in DeepSpeed (so generic code can ask for 'model').

        >>> ProcessTopology(["pipe", "data"], [2, 2]).get_axis_comm_lists("data")
        [[0, 1], [2, 3]]
        """
        if axis not in self._grid.axes:
            return []
        return [list(group) for group in self._grid.groups(axis)]

    def filter_match(self, /, **filter_kwargs: int) -> list[int]:
        """The ranks whose coordinates equal the given ones, ascending (``Grid.matching``).

        A coordinate outside its axis matches nothing, as in DeepSpeed.

        Raises:
            TopologyError: an axis the topology lacks (DeepSpeed raises ``AttributeError``).
        """
        axes = self._grid.axes
        coord: dict[str, int] = {}
        for name, value in filter_kwargs.items():
            if name not in axes:
                raise TopologyError(f"unknown axis {name!r}; this topology has axes {axes!r}")
            number = _integer(value)
            if type(number) is not int or not 0 <= number < self.get_dim(name):
                return []
            coord[name] = number
        return list(self._grid.matching(**coord))

    def get_axis_list(self, axis: str, idx: int) -> list[int]:
        """The ranks whose coordinate along ``axis`` is ``idx``, ascending.

        Raises:
            TopologyError: an axis the topology lacks (a ``ValueError``, as in DeepSpeed).
        """
        if axis not in self._grid.axes:
            raise TopologyError(
                f"unknown axis {axis!r}; this topology has axes {self._grid.axes!r}"
            )
        return self.filter_match(**{axis: idx})

    def world_size(self) -> int:
        """How many ranks the topology covers."""
        return self._grid.world_size

    def __str__(self) -> str:
        world = self._grid.world_size
        shown = range(world) if world <= _SHOWN_IN_STR else (0, 1, 2, None, world - 1)
        pieces = ["..." if r is None else f"{self.get_coord(r)}: {r}" for r in shown]
        return "{" + ", ".join(pieces) + "}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(axes={self.axes!r}, dims={self.dims!r})"


class PipeDataParallelTopology(ProcessTopology):
    """Axes ``['pipe', 'data']``: data parallelism fastest, so its reductions stay in a node.

    >>> PipeDataParallelTopology(num_pp=2, num_dp=4).get_axis_comm_lists("pipe")[0]
    [0, 4]
    """

    def __init__(self, num_pp: int, num_dp: int) -> None:
        super().__init__(axes=["pipe", "data"], dims=[num_pp, num_dp])


class PipeModelDataParallelTopology(ProcessTopology):
    """Axes ``['pipe', 'data', 'model']``: model (tensor slicing) fastest, then data, then pipe.

    >>> PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=3).dims
    [2, 3, 2]
    """

    def __init__(self, num_pp: int, num_mp: int, num_dp: int) -> None:
        super().__init__(axes=["pipe", "data", "model"], dims=[num_pp, num_dp, num_mp])


def _prime_factors(n: int) -> list[int]:
    """The prime factors of ``n >= 1`` with multiplicity, ascending.

    >>> _prime_factors(12), _prime_factors(1)
    ([2, 2, 3], [])
    """
    check_size("n", n)
    factors: list[int] = []
    candidate = 2
    while candidate * candidate <= n:
        while n % candidate == 0:
            factors.append(candidate)
            n //= candidate
        candidate += 1
    if n > 1:
        factors.append(n)
    return factors


def _default_topology(world_size: int) -> PipeDataParallelTopology:
    """DeepSpeed's default: alternate the world's ascending prime factors between pipe and data."""
    num_pp = num_dp = 1
    for index, prime in enumerate(_prime_factors(world_size)):
        if index % 2 == 0:
            num_pp *= prime
        else:
            num_dp *= prime
    return PipeDataParallelTopology(num_pp=num_pp, num_dp=num_dp)


def _as_topology(topology: object) -> ProcessTopology:
    if isinstance(topology, ProcessTopology):
        return topology
    names = getattr(topology, "get_axis_names", None)
    sizes = getattr(topology, "get_dim", None)
    if not callable(names) or not callable(sizes):
        raise TopologyError(
            f"topology must be a ProcessTopology (or one of DeepSpeed's), got {topology!r}"
        )
    axes = list(names())
    return ProcessTopology(axes, [sizes(name) for name in axes])


class PipelineParallelGrid:
    """DeepSpeed's pipeline grid: this rank's stage and data-parallel id, and its groups.

    SPMD contract: construct on every rank, with an equal topology, in the same order; it calls
    ``torch.distributed.new_group`` once per group, for every group, in DeepSpeed's order.

    Args:
        topology: a topology with ``pipe`` and ``data`` axes (and optionally ``model``) covering
            the world; None for DeepSpeed's default pipe × data split of the world size.
        process_group: ignored, as in DeepSpeed.

    Raises:
        TopologyError: torch.distributed is not initialized, or the topology lacks a ``pipe`` or
            ``data`` axis.
        FacadeAssertionError: the topology does not cover the world (DeepSpeed asserts).
    """

    def __init__(self, topology: object = None, process_group: object = None) -> None:
        require_initialized("PipelineParallelGrid()")
        self.global_rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        topo = _default_topology(self.world_size) if topology is None else _as_topology(topology)
        self._topo = topo
        for axis in ("pipe", "data"):
            if axis not in topo.get_axis_names():
                raise TopologyError(
                    f"PipelineParallelGrid needs a {axis!r} axis; this topology has axes "
                    f"{topo.get_axis_names()!r}"
                )
        if not self._is_grid_valid():
            sizes = " * ".join(f"{a}({topo.get_dim(a)})" for a in topo.get_axis_names())
            raise FacadeAssertionError(
                f"Invalid Grid: {sizes} = {topo.world_size()} ranks but the world has "
                f"{self.world_size}; give sizes whose product is the world size"
            )
        self.data_parallel_size = max(topo.get_dim("data"), 1)
        self.pipe_parallel_size = max(topo.get_dim("pipe"), 1)
        self.model_parallel_size = max(topo.get_dim("model"), 1)
        self.slice_parallel_size = self.model_parallel_size
        me = topo.get_coord(self.global_rank)
        self.stage_id: int = me.pipe
        self.data_parallel_id: int = me.data
        self.is_first_stage = self.stage_id == 0
        self.is_last_stage = self.stage_id == self.pipe_parallel_size - 1
        self._make_groups()

    def _make_groups(self) -> None:
        topo, grid, rank = self._topo, self._topo.grid, self.global_rank
        # Model groups (every axis but data), one per data-parallel index.
        for index in range(self.data_parallel_size):
            ranks = list(grid.matching(data=index))
            group = dist.new_group(ranks=ranks)
            if rank in ranks:
                self.ds_model_proc_group = group
                self.ds_model_world_size = len(ranks)
                self.ds_model_rank = ranks.index(rank)
        self.dp_groups = topo.get_axis_comm_lists("data")
        self.dp_group, self.dp_proc_group = self._new_groups(self.dp_groups)
        self.pipe_groups = topo.get_axis_comm_lists("pipe")
        self.pp_group, self.pp_proc_group = self._new_groups(self.pipe_groups)
        if self.model_parallel_size == 1:
            self.slice_group, self.slice_proc_group = self._new_groups(
                [[r] for r in range(self.world_size)]
            )
        else:
            self.mp_group: list[int] = []
            self.model_groups = topo.get_axis_comm_lists("model")
            self.slice_group, self.slice_proc_group = self._new_groups(self.model_groups)

    def _new_groups(self, lists: list[list[int]]) -> tuple[list[int], Any]:
        """Make every group of ``lists`` (on every rank); return this rank's ranks and group."""
        mine: tuple[list[int], Any] = ([], None)
        for ranks in lists:
            group = dist.new_group(ranks=ranks)
            if self.global_rank in ranks:
                mine = (ranks, group)
        return mine

    @property
    def p2p_groups(self) -> list[list[int]]:
        """``[rank, next rank in its pipeline (wrapping)]`` for every rank, in rank order."""
        grid, pipes = self._topo.grid, self.pipe_parallel_size
        pairs: list[list[int]] = []
        for rank in range(self.world_size):
            stage = grid.coord(rank)["pipe"]
            pairs.append([rank, grid.group_of(rank, "pipe")[(stage + 1) % pipes]])
        return pairs

    def _is_grid_valid(self) -> bool:
        return self._topo.world_size() == dist.get_world_size()

    def get_stage_id(self) -> int:
        """This rank's pipeline stage (its ``pipe`` coordinate)."""
        return int(self._topo.get_coord(self.global_rank).pipe)

    def get_data_parallel_id(self) -> int:
        """This rank's pipeline (its ``data`` coordinate)."""
        return int(self._topo.get_coord(self.global_rank).data)

    def stage_to_global(self, stage_id: int, **kwargs: int) -> int:
        """The rank at ``stage_id`` whose other coordinates are this rank's, or ``kwargs``'.

        Raises:
            TopologyError: an axis the topology lacks.
            FacadeAssertionError: a stage or coordinate outside its axis.
        """
        me = self._topo.get_coord(self.global_rank)._asdict()
        for name in kwargs:
            if name not in me:
                raise TopologyError(
                    f"unknown axis {name!r}; this topology has axes {self._topo.axes!r}"
                )
        me.update(kwargs, pipe=stage_id)
        return self._topo.get_rank(**me)

    def topology(self) -> ProcessTopology:
        """The topology the groups were made from."""
        return self._topo

    def get_global_rank(self) -> int:
        return self.global_rank

    def get_pipe_parallel_rank(self) -> int:
        """The stage of the pipeline this rank is in."""
        return self.get_stage_id()

    def get_pipeline_model_parallel_rank(self) -> int:
        return self.get_pipe_parallel_rank()

    def get_pipe_parallel_world_size(self) -> int:
        """How many pipeline stages there are."""
        return self.pipe_parallel_size

    def get_pipeline_model_parallel_world_size(self) -> int:
        return self.get_pipe_parallel_world_size()

    def get_pipe_parallel_group(self) -> Any:
        """The group of this rank's pipeline (one rank per stage)."""
        return self.pp_proc_group

    def get_data_parallel_rank(self) -> int:
        """Which pipeline this rank is in."""
        return self.data_parallel_id

    def get_data_parallel_world_size(self) -> int:
        """How many pipelines there are."""
        return self.data_parallel_size

    def get_data_parallel_group(self) -> Any:
        """The group of ranks at this rank's stage and model index in every pipeline."""
        return self.dp_proc_group

    def get_data_parallel_group_ranks(self) -> list[int]:
        """The ranks of the data-parallel group."""
        return self.dp_group

    def get_model_parallel_rank(self) -> int:
        """This rank's index among the ranks of its pipeline replica (all but data)."""
        return self.ds_model_rank

    def get_model_parallel_world_size(self) -> int:
        """How many ranks one pipeline replica spans (pipe × model)."""
        return self.ds_model_world_size

    def get_model_parallel_group(self) -> Any:
        """The group of this rank's pipeline replica (every axis but data)."""
        return self.ds_model_proc_group

    def get_slice_parallel_rank(self) -> int:
        """This rank's tensor-slicing index (its ``model`` coordinate, 0 without one)."""
        if "model" in self._topo.get_axis_names():
            return int(self._topo.get_coord(self.global_rank).model)
        return 0

    def get_tensor_model_parallel_rank(self) -> int:
        return self.get_slice_parallel_rank()

    def get_slice_parallel_world_size(self) -> int:
        """How many ranks slice one tensor (the ``model`` size)."""
        return self.slice_parallel_size

    def get_tensor_model_parallel_world_size(self) -> int:
        return self.get_slice_parallel_world_size()

    def get_slice_parallel_group(self) -> Any:
        """The tensor-slicing group (a singleton without model parallelism)."""
        return self.slice_proc_group
