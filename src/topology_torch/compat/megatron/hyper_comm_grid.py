"""Megatron-core 0.19's ``megatron.core.hyper_comm_grid.HyperCommGrid``, name for name (a façade).

A HyperCommGrid names the dims of one hyperrectangle of ranks, ``shape[0]`` varying fastest (the
order of Megatron's ``order`` string), from ``rank_offset`` on; ``create_pg(dims)`` makes the
groups that vary along ``dims`` (in any order). The groups are the core's: the base factorization
and every view registered with ``register_view`` are :class:`topology.Grid` values
(``Grid(reversed(dim_names), reversed(shape), rank_offset)``, so ``get_rank_enum`` is
``Grid.groups``), and they are created by :meth:`ProcessGroups.create
<topology_torch.ProcessGroups.create>` (one ``split_group`` per call on a bound NCCL group, else
one ``new_group`` per group this rank is in): the calls per rank do not grow with the world,
where Megatron's ``new_subgroups_by_enumeration`` calls ``new_group`` once per group on every rank.

Megatron's ``BridgeCommunicator`` and ``MultiModuleCommunicator`` read each group's members in the
order of the dims they name (``_gen_rank_enum``): :meth:`~topology.Grid.groups_in_axis_order`
gives that order. Empty dims are one group per rank, as Megatron's; ``backend`` goes to torch
unchecked (``ProcessGroups.create(check_backends=False)``), as Megatron hands it to
``new_subgroups_by_enumeration``: torch refuses what it cannot make (NCCL on a CPU torch).

Where Megatron raises ``ValueError``, ``KeyError`` or ``RuntimeError``, this raises a
:class:`topology.TopologyError` that is also that class; messages keep Megatron's words where its
tests pin them ("Process group ... has already been created") and add the arithmetic and the fix.

>>> grid = HyperCommGrid([2, 2, 2], ["tp", "cp", "dp"])  # doctest: +SKIP
>>> grid.get_rank_enum(["dp", "tp"])  # doctest: +SKIP
[[0, 1, 4, 5], [2, 3, 6, 7]]
>>> tp = grid.create_pg("tp")  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from typing import Any

import attrs
import torch.distributed as dist

from topology import AxisGroups, Grid, TopologyError

from ..._process_groups import ProcessGroups
from .._errors import FacadeRuntimeError

__all__ = ["HyperCommGrid"]

_BASE = "base"
_CREATE_OPTIONS = ("timeout", "pg_options", "group_desc")  # new_subgroups_by_enumeration's

Key = str | tuple[str, tuple[str, ...]]
"""Where a group is kept: base groups by their dims joined by '-' (outermost first), a view's own
groups by ``(view, dims)``, as Megatron keys them."""


class FacadeKeyError(TopologyError, KeyError):
    """A missing view or group, or one made twice: a ``TopologyError`` and a ``KeyError``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@attrs.frozen
class _View:
    """One factorization of the grid's ranks: its dims (``shape[0]`` fastest) and its Grid."""

    name: str
    shape: tuple[int, ...]
    dim_names: tuple[str, ...]
    shared_dims: tuple[str, ...]
    grid: Grid


def _size(shape: Sequence[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def _world_size() -> int:
    """``$WORLD_SIZE``, else the default group's size (Megatron's rule, so a grid can be built
    and enumerated before ``init_process_group``)."""
    if "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"])
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    raise FacadeRuntimeError(
        "HyperCommGrid cannot tell the world size: WORLD_SIZE is not set and torch.distributed "
        "is not initialized; set WORLD_SIZE or call torch.distributed.init_process_group first"
    )


def _check_factorization(what: str, shape: object, dim_names: object) -> tuple[int, ...]:
    """``shape`` as a tuple of positive ints, one per name of ``dim_names`` (checked in Megatron's
    order: lengths, repeated names, then sizes); names are strings without '-'."""
    if not isinstance(shape, list | tuple) or not isinstance(dim_names, list | tuple):
        raise TopologyError(
            f"{what} shape and dim_names must be lists, got {shape!r} and {dim_names!r}; "
            "e.g. shape=[2, 4], dim_names=['tp', 'dp']"
        )
    if len(shape) != len(dim_names):
        raise TopologyError(
            f"len(shape) {list(shape)} != len(dim_names) {list(dim_names)}: {len(shape)} sizes "
            f"for {len(dim_names)} names; give one size per dim"
        )
    for name in dim_names:
        if not isinstance(name, str) or not name or "-" in name:
            raise TopologyError(
                f"{what} dim name {name!r} is not valid; use a non-empty string without '-', "
                "e.g. 'tp'"
            )
    if len(set(dim_names)) != len(dim_names):
        twice = next(n for n in dim_names if list(dim_names).count(n) > 1)
        raise TopologyError(
            f"{what} has duplicate dim_names: {list(dim_names)} names {twice!r} twice; "
            "name each dim once"
        )
    if any(
        not isinstance(s, numbers.Integral) or isinstance(s, bool) or int(s) <= 0 for s in shape
    ):
        raise TopologyError(
            f"{what} shape must be positive ints, got {list(shape)}; give every dim of "
            f"{list(dim_names)} a size of at least 1"
        )
    return tuple(int(s) for s in shape)


class HyperCommGrid:
    r"""N-dimensional communication grid: named dims over ``size`` ranks from ``rank_offset``.

    ``shape[0]`` varies fastest, as in Megatron's ``order`` argument: ``HyperCommGrid([2, 3, 4, 5],
    ["tp", "cp", "pp", "dp"])`` lays ranks out like ``initialize_model_parallel(2, 4,
    context_parallel_size=3, order="tp-cp-pp-dp")`` on 120 ranks. Groups are created explicitly
    by :meth:`create_pg` (once per set of dims and view) and read back with :meth:`get_pg`.

    Args:
        shape: the size of each dim.
        dim_names: the name of each dim (distinct, without '-').
        rank_offset: the grid's first rank in the default group.
        backend: the backend of every group (default: the default group's), handed to torch
            unchecked as Megatron does.

    Raises:
        TopologyError: (a ``ValueError``) bad sizes or names; (a ``RuntimeError``) a grid that
            does not fit the world from ``rank_offset``, or no known world size.

    >>> from unittest import mock
    >>> with mock.patch.dict("os.environ", WORLD_SIZE="8"):  # or after init_process_group
    ...     grid = HyperCommGrid([2, 2, 2], ["tp", "cp", "dp"])
    >>> grid.get_rank_enum("cp")
    [[0, 2], [1, 3], [4, 6], [5, 7]]
    """

    def __init__(
        self,
        shape: list[int],
        dim_names: list[str],
        rank_offset: int = 0,
        backend: str | None = None,
    ) -> None:
        sizes = _check_factorization("the grid", shape, dim_names)
        if not isinstance(rank_offset, numbers.Integral) or isinstance(rank_offset, bool):
            raise TopologyError(f"rank_offset must be an int, got {rank_offset!r}")
        if rank_offset < 0:
            raise TopologyError(
                f"rank_offset must be non-negative, got {rank_offset}; the first rank is 0"
            )
        if backend is not None and not isinstance(backend, str):
            raise TopologyError(f"backend must be a name like 'nccl' or None, got {backend!r}")
        world_size = _world_size()
        size = _size(sizes)
        if size > world_size - rank_offset:
            raise FacadeRuntimeError(
                f"HyperCommGrid shape {list(shape)} is over sized with world size {world_size} "
                f"and rank offset {rank_offset}: {rank_offset} + {size} ranks > {world_size}; "
                f"use at most {max(world_size - rank_offset, 0)} ranks from this offset"
            )
        self.shape: list[int] = list(sizes)
        self.dim_names: list[str] = list(dim_names)
        self.rank_offset: int = int(rank_offset)
        self.size: int = size
        self.backend: str | None = backend
        self._views: dict[str, _View] = {_BASE: self._view(_BASE, sizes, tuple(dim_names), ())}
        self._groups: dict[Key, Any] = {}  # key -> this rank's group (None: not a member)
        self._made: list[ProcessGroups] = []  # what create_pg made (destroy frees it)

    def _view(
        self, name: str, shape: tuple[int, ...], dim_names: tuple[str, ...], shared: tuple[str, ...]
    ) -> _View:
        grid = Grid(dim_names[::-1], shape[::-1], self.rank_offset)
        return _View(name, shape, dim_names, shared, grid)

    # -- views ----------------------------------------------------------------------------------

    def register_view(
        self,
        name: str,
        shape: list[int],
        dim_names: list[str],
        shared_dims: list[str] | None = None,
    ) -> None:
        r"""Register another factorization of the same ranks, used with ``view=name``.

        Each of ``shared_dims`` (in both views) must give the same groups in both views, and so
        must all of them together; their groups are then the base view's (one communicator).

        Raises:
            TopologyError: (a ``ValueError``) a name registered before, bad sizes or names, a
                size other than the grid's, or shared dims whose groups differ.
        """
        if not isinstance(name, str) or not name:
            raise TopologyError(f"a view name must be a non-empty string, got {name!r}")
        if name in self._views:
            raise TopologyError(
                f"view {name!r} is already registered (views: {sorted(self._views)}); "
                "register it under another name"
            )
        what = f"view {name!r}"
        sizes = _check_factorization(what, shape, dim_names)
        if _size(sizes) != self.size:
            product = " * ".join(map(str, sizes))
            raise TopologyError(
                f"view {name!r} shape {list(sizes)} has size {product} = {_size(sizes)}, but the "
                f"grid size is {self.size}; give the view {self.size} ranks"
            )
        shared = [] if shared_dims is None else shared_dims
        if not isinstance(shared, list | tuple) or not all(isinstance(d, str) for d in shared):
            raise TopologyError(f"{what} shared_dims must be a list of dim names, got {shared!r}")
        if len(set(shared)) != len(shared):
            raise TopologyError(
                f"{what} has duplicate shared_dims: {list(shared)}; name each shared dim once"
            )
        view = self._view(name, sizes, tuple(dim_names), tuple(shared))
        base = self._views[_BASE]
        for dim in shared:
            if dim not in base.dim_names:
                raise TopologyError(
                    f"Shared dim {dim!r} of view {name!r} is not in the base view "
                    f"{self.dim_names}; share only dims both views have"
                )
            if dim not in view.dim_names:
                raise TopologyError(
                    f"Shared dim {dim!r} of view {name!r} is not in the view's dim_names "
                    f"{list(dim_names)}; add it to the view or stop sharing it"
                )
            self._check_shared(base, view, [dim], f"Shared dim {dim!r} has")
        if len(shared) > 1:
            self._check_shared(base, view, list(shared), f"Shared dims {list(shared)!r} have")
        self._views[name] = view

    def _check_shared(self, base: _View, view: _View, dims: list[str], subject: str) -> None:
        mine, theirs = base.grid.groups(*dims), view.grid.groups(*dims)
        if list(mine) != list(theirs):
            first = next(i for i, (a, b) in enumerate(zip(mine, theirs, strict=True)) if a != b)
            raise TopologyError(
                f"{subject} different membership across views: base group {first} is "
                f"{list(mine[first])} but view {view.name!r} group {first} is "
                f"{list(theirs[first])}; place the shared dims alike in both views"
            )

    # -- groups ---------------------------------------------------------------------------------

    def create_pg(self, dims: str | list[str], *, view: str | None = None, **kwargs: Any) -> Any:
        r"""Create the groups that vary along ``dims`` (any order) and return this rank's.

        SPMD contract: call on every rank of the default group, with equal arguments, in the
        same order. Returns None on a rank outside the grid.

        Args:
            dims: a dim name or a list of them; ``[]``: every rank alone (key ``""``).
            view: a view registered with :meth:`register_view` (default: the base one).
            timeout: a ``timedelta`` for the groups (``new_subgroups_by_enumeration``'s).
            pg_options: torch ``pg_options`` (e.g. ``ProcessGroupNCCL.Options``).
            group_desc: accepted for Megatron's signature; the groups are described as
                ``topology:<dims>`` (``ProcessGroups`` names its groups).

        Raises:
            TopologyError: (a ``KeyError``) an unknown view or groups created before;
                (a ``ValueError``) a dim the view does not have; a ``TypeError`` for another
                keyword, as ``new_subgroups_by_enumeration`` raises.
        """
        unknown = sorted(set(kwargs) - set(_CREATE_OPTIONS))
        if unknown:
            raise TypeError(
                f"create_pg() got an unexpected keyword argument {unknown[0]!r}; it takes "
                f"{', '.join(_CREATE_OPTIONS)}"
            )
        desc = kwargs.get("group_desc")
        if desc is not None and not isinstance(desc, str):
            raise TopologyError(f"group_desc must be a string or None, got {desc!r}")
        target, ordered = self._locate(dims, view)
        key = self._key(target, ordered)
        if key in self._groups:
            where = "" if isinstance(key, str) else f" for view {target.name!r}"
            raise FacadeKeyError(
                f"Process group {dims}{where} has already been created. Because there is no way "
                "to check whether options to create process group matches the first, we error "
                "out instead of returning the process group that has already been created "
                "before; keep the group create_pg returned or call get_pg"
            )
        layout, kind = _layout(target.grid, ordered)
        options = kwargs.get("pg_options")
        made = ProcessGroups.create(
            layout,
            backend=self.backend,
            check_backends=False,  # torch decides, as new_subgroups_by_enumeration lets it
            timeout=kwargs.get("timeout"),
            pg_options=None if options is None else {kind: options},
        )
        self._made.append(made)
        group = made.group(kind) if self.is_current_rank_in_grid() else None
        self._groups[key] = group
        return group

    def get_pg(self, dims: str | list[str], *, view: str | None = None) -> Any:
        r"""This rank's group along ``dims`` (any order), made before by :meth:`create_pg`.

        Raises:
            TopologyError: (a ``KeyError``) an unknown view or groups not created yet;
                (a ``ValueError``) a dim the view does not have.
        """
        target, ordered = self._locate(dims, view)
        key = self._key(target, ordered)
        if key not in self._groups:
            call = f"create_pg({dims!r}{'' if view is None else f', view={view!r}'})"
            if isinstance(key, str):
                raise FacadeKeyError(
                    f"Process group for {key} hasn't been created. Call create_pg first: {call}"
                )
            raise FacadeKeyError(
                f"Process group {dims} for view {target.name!r} hasn't been created. Call "
                f"create_pg first: {call}"
            )
        return self._groups[key]

    def get_rank_enum(self, dims: str | list[str], *, view: str | None = None) -> list[list[int]]:
        r"""Every group along ``dims`` (any order) as global ranks: what :meth:`create_pg` makes.

        Groups are ascending and come in ascending order of their first rank (Megatron's
        enumeration); a group's position is its mixed-radix coordinate, ``shape[0]`` fastest.
        ``[]`` gives one group per rank.

        >>> from unittest import mock
        >>> with mock.patch.dict("os.environ", WORLD_SIZE="16"):
        ...     grid = HyperCommGrid([2, 2, 2], ["tp", "cp", "dp"], rank_offset=8)
        >>> grid.get_rank_enum(["dp", "tp"])
        [[8, 9, 12, 13], [10, 11, 14, 15]]
        """
        target, ordered = self._locate(dims, view)
        return [list(group) for group in target.grid.groups(*ordered)]

    def _gen_rank_enum(self, dims: list[str]) -> list[list[int]]:
        r"""Every group along ``dims`` (base view), each listing its ranks by their coordinates
        on ``dims`` **as given, the last fastest**: Megatron's private enumeration, which its
        ``BridgeCommunicator`` and ``MultiModuleCommunicator`` call (``get_rank_enum`` and
        :meth:`create_pg` list each group ascending). ``[]`` gives one group per rank.

        >>> from unittest import mock
        >>> with mock.patch.dict("os.environ", WORLD_SIZE="8"):
        ...     grid = HyperCommGrid([2, 2, 2], ["a", "b", "c"])
        >>> grid._gen_rank_enum(["a", "b"])
        [[0, 2, 1, 3], [4, 6, 5, 7]]

        Raises:
            TopologyError: (a ``ValueError``) a dim the grid lacks, or one named twice.
        """
        return _in_given_order(self._views[_BASE].grid, dims)

    def _gen_rank_enum_for(
        self, shape: list[int], dim_names: list[str], dims: list[str]
    ) -> list[list[int]]:
        r""":meth:`_gen_rank_enum` for another factorization (``shape``/``dim_names``, this grid's
        ``rank_offset``), as Megatron's helper of that name.

        Raises:
            TopologyError: (a ``ValueError``) bad sizes or names, a dim ``dim_names`` lacks, or
                one named twice.
        """
        sizes = _check_factorization("the factorization", shape, dim_names)
        return _in_given_order(Grid(tuple(dim_names)[::-1], sizes[::-1], self.rank_offset), dims)

    def _order_dims_for(self, dim_names: list[str], dims: str | list[str]) -> tuple[list[str], str]:
        r"""``dims`` ordered as ``reversed(dim_names)`` (outermost first) and their group key
        (joined by '-'), as Megatron's helper of that name; a string is one dim.

        >>> from unittest import mock
        >>> with mock.patch.dict("os.environ", WORLD_SIZE="8"):
        ...     grid = HyperCommGrid([2, 2, 2], ["tp", "cp", "dp"])
        >>> grid._order_dims_for(grid.dim_names, ["tp", "dp"])
        (['dp', 'tp'], 'dp-tp')

        Raises:
            TopologyError: (a ``ValueError``) a dim ``dim_names`` lacks.
        """
        requested = dims if isinstance(dims, list) else [dims]
        missing = [d for d in requested if d not in dim_names]
        if missing:
            raise TopologyError(
                f"{missing[0]!r} is not in dim_names {list(dim_names)}; name dims of the grid"
            )
        outermost = list(dim_names)[::-1]
        ordered = sorted(requested, key=outermost.index) if isinstance(dims, list) else requested
        return ordered, "-".join(ordered)

    def destroy(self) -> None:
        """Destroy every group this grid created (each communicator once) and forget them all.

        SPMD contract: call on every rank, in the same order.
        """
        for made in reversed(self._made):
            made.destroy()
        self._made.clear()
        self._groups.clear()

    def is_current_rank_in_grid(self) -> bool:
        """Whether this rank is in ``[rank_offset, rank_offset + size)``."""
        rank = dist.get_rank()
        return bool(self.rank_offset <= rank < self.rank_offset + self.size)

    # -- helpers --------------------------------------------------------------------------------

    def _locate(self, dims: object, view: str | None) -> tuple[_View, tuple[str, ...]]:
        """The view that enumerates ``dims`` and the dims outermost first: a view's dims that
        are all shared are the base view's (Megatron keeps one group for them)."""
        name = _BASE if view is None else view
        chosen = self._views.get(name) if isinstance(name, str) else None
        if chosen is None:
            raise FacadeKeyError(
                f"View {name!r} is not registered. Registered views: {sorted(self._views)}; "
                "call register_view first"
            )
        requested = list(dims) if isinstance(dims, list | tuple) else [dims]
        for dim in requested:
            if dim not in chosen.dim_names:
                raise TopologyError(
                    f"{dim!r} is not in view {chosen.name!r} with dim_names "
                    f"{list(chosen.dim_names)}; name dims of that view"
                    + ("" if view is not None else " or pass view=")
                )
        if len(set(requested)) != len(requested):
            raise TopologyError(
                f"dims {requested!r} must name each dim once; e.g. {list(chosen.dim_names[:2])!r}"
            )
        if chosen.name != _BASE and all(d in chosen.shared_dims for d in requested):
            chosen = self._views[_BASE]
        outermost = chosen.grid.axes
        return chosen, tuple(d for d in outermost if d in requested)

    @staticmethod
    def _key(view: _View, ordered: tuple[str, ...]) -> Key:
        return "-".join(ordered) if view.name == _BASE else (view.name, ordered)

    def __repr__(self) -> str:
        views = [v for v in self._views if v != _BASE]
        extra = f", views={views}" if views else ""
        return (
            f"HyperCommGrid({self.shape}, {self.dim_names}, rank_offset={self.rank_offset}, "
            f"backend={self.backend!r}{extra})"
        )


def _in_given_order(grid: Grid, dims: object) -> list[list[int]]:
    """``grid.groups_in_axis_order(*dims)`` as lists (a string is one dim)."""
    names = list(dims) if isinstance(dims, list | tuple) else [dims]
    for name in names:
        if name not in grid.axes:
            raise TopologyError(
                f"{name!r} is not a dim of this grid (dim_names {list(grid.axes[::-1])}); "
                "name dims of the grid"
            )
    return [list(group) for group in grid.groups_in_axis_order(*names)]


def _layout(grid: Grid, ordered: tuple[str, ...]) -> tuple[AxisGroups, str]:
    """The groups along ``ordered`` as ``ProcessGroups.create`` takes them, and their kind. No
    dims: every rank alone (Megatron's ``create_pg([])``), the groups along a size-1 axis."""
    if ordered:
        kind = "-".join(ordered)
        return AxisGroups(grid, kinds=(kind,)), kind
    alone = Grid(("rank", "alone"), (grid.world_size, 1), grid.rank_offset)
    return AxisGroups(alone, kinds=("alone",)), "alone"


def attach_group(grid: HyperCommGrid, dims: list[str], view: str | None, group: Any) -> None:
    """Keep ``group`` (made elsewhere, not destroyed by :meth:`HyperCommGrid.destroy`) as
    ``grid.get_pg(dims, view)``'s (MIMO's grids serve the groups it made)."""
    target, ordered = grid._locate(dims, view)
    grid._groups[grid._key(target, ordered)] = group
