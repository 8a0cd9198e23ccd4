"""One n-D torch ``DeviceMesh`` whose every slice and flatten is one of our communicators.

:func:`world_mesh` builds a single root mesh over some kinds (outermost first) with
``DeviceMesh.from_group`` over the groups a :class:`~topology_torch.ProcessGroups` already holds,
then pre-registers flattened 1-D meshes in the root's ``_flatten_mapping``: one for every run of
adjacent dimensions whose ranks are the ranks of a kind we created (under torch's default name,
``"dp_shard_cp"``, and the kind's, ``"intra_dp_cp"``), plus any ``flatten={name: kind}`` asked for
(``"fsdp"``, ``"batch"``, ``"loss"``, ``"efsdp"``, ``"ep"``: torchtitan's names). Each is backed by
our communicator for that rank set, so ``mesh["dp_shard", "cp"]._flatten()``,
``mesh["fsdp"]`` or ``mesh["pp", "dp_replicate", "efsdp", "ep"]`` make no process group.

This reaches into torch's private ``DeviceMesh`` internals (``_flatten_mapping``, ``_layout``,
``_rank_map``, ``_pg_registry``, ``_dim_group_names``, ``torch.distributed._mesh_layout``).
Verified with torch 2.11 to 2.15 (:data:`VERIFIED_TORCH`), read by feature, not by version:
torch 2.13 and newer write a flattened dim as a ``_FlatLayout``, 2.11 and 2.12 as a coalesced
pycute ``_MeshLayout`` and slice only flattened dims of one stride from the root, so there a
``flatten=`` kind of several strides is a ``TopologyError`` naming torch 2.13. A torch whose
internals differ gets a ``TopologyError`` naming what is missing instead of a silently wrong mesh.

The mesh's rank tensor comes from the core only: ranks reachable from this rank along the
dimensions' groups (:meth:`topology.Topology.group_of`), placed by their position in each group
(:meth:`topology.Topology.local_rank`); nothing is re-derived here.

>>> mesh = world_mesh(groups, ("pp", "dp-replicate", "dp-shard", "cp", "tp"),
...                   flatten={"fsdp": "intra-dp-cp", "batch": "dp"})  # doctest: +SKIP
>>> mesh["fsdp"].get_group() is groups.group("intra-dp-cp")  # doctest: +SKIP
True
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh

from topology import AxisGroups, Topology, TopologyError

from ._device import collective_device

__all__ = ["VERIFIED_TORCH", "Groups", "sliced", "world_mesh"]

VERIFIED_TORCH = ("2.11", "2.12", "2.13", "2.14", "2.15")
"""torch versions whose ``DeviceMesh`` internals this module was checked against."""


class Groups(Protocol):
    """What a world mesh needs of a :class:`~topology_torch.ProcessGroups`."""

    @property
    def topology(self) -> Topology | AxisGroups: ...

    @property
    def global_rank(self) -> int: ...

    @property
    def kinds(self) -> tuple[str, ...]: ...

    def group(self, kind: str) -> Any: ...

    def ranks(self, kind: str) -> tuple[int, ...]: ...

    def has_group(self, kind: str) -> bool: ...


@dataclass(frozen=True)
class _Layouts:
    """How this torch writes a 1-D flattened mesh's layout, as its own ``_flatten`` does."""

    flat: Callable[[tuple[int, ...], tuple[int, ...]], Any]
    """The layout of the ranks ``sizes:strides`` (outermost first) of the root's rank map."""
    one_stride: bool
    """Whether the root slices only flattened dims of one stride (torch before 2.13)."""


def _layouts() -> _Layouts:
    """This torch's flattened-mesh layouts, or ``TopologyError`` naming what it lacks.

    torch 2.13 and newer (``_FlatLayout``): ``_MeshLayout([_FlatLayout(sizes, strides)])``.
    torch 2.11 and 2.12 (``_MeshLayout`` is a pycute ``Layout``): ``_MeshLayout(sizes,
    strides).coalesce()``, nested when more than one stride is left; such a dim cannot be sliced
    from the root there ("only allows slicing out a contiguous flattened dim").
    """
    problem = ""
    try:
        from torch.distributed import _mesh_layout
    except ImportError as error:
        problem = f"torch.distributed._mesh_layout is missing ({error})"
    else:
        mesh_layout = _mesh_layout._MeshLayout
        flat_layout = getattr(_mesh_layout, "_FlatLayout", None)
        wanted = {"_layout", "_rank_map", "_root_mesh", "_init_backend", "mesh_dim_names"}
        have = set(inspect.signature(DeviceMesh.__init__).parameters)
        methods = ("from_group", "_flatten", "_create_flatten_mesh", "_get_slice_mesh_layout")
        if not wanted <= have:
            problem = f"DeviceMesh() takes no {sorted(wanted - have)}"
        elif not all(hasattr(DeviceMesh, m) for m in methods):
            problem = f"DeviceMesh lacks one of {methods}"
        elif flat_layout is not None and hasattr(mesh_layout, "collapse"):
            return _Layouts(lambda *walk: mesh_layout([flat_layout(*walk)]), one_stride=False)
        elif all(hasattr(mesh_layout, m) for m in ("coalesce", "nest", "remap_to_tensor")):

            def flat(sizes: tuple[int, ...], strides: tuple[int, ...]) -> Any:
                layout = mesh_layout(sizes, strides).coalesce()
                return layout.nest() if len(layout) > 1 else layout

            return _Layouts(flat, one_stride=True)
        else:
            problem = "_MeshLayout has neither collapse (_FlatLayout) nor coalesce/nest"
    raise _missing(problem)


def _missing(problem: str) -> TopologyError:
    """The error for a torch whose ``DeviceMesh`` internals are not those world_mesh uses."""
    return TopologyError(
        f"world_mesh needs torch DeviceMesh internals that torch {torch.__version__} does not "
        f"have ({problem}); it was verified with torch {', '.join(VERIFIED_TORCH)}: install one "
        "of those, or use ProcessGroups.device_mesh (one mesh per call) with this torch"
    )


def _one_stride(layouts: _Layouts, name: str, kind: str, walk: tuple[Any, Any]) -> None:
    """``TopologyError`` for a flatten of several strides on a torch that cannot slice it."""
    sizes, strides = walk
    if layouts.one_stride and len(sizes) > 1:
        raise TopologyError(
            f"flatten {name!r}: the {kind} group walks the mesh with sizes {sizes} and strides "
            f"{strides}, not one stride, and torch {torch.__version__} slices only flattened "
            "dims of one stride from a mesh; install torch 2.13 or newer, or flatten a kind "
            "whose ranks are one strided run"
        )


def _check_root(root: DeviceMesh) -> None:
    for name in ("_flatten_mapping", "_pg_registry", "_dim_group_names", "_layout", "_rank_map"):
        if not hasattr(root, name):
            raise _missing(f"a DeviceMesh has no {name}")  # torch 2.10 has no _pg_registry


def _grid(topology: Topology | AxisGroups, me: int, dims: Sequence[str]) -> torch.Tensor:
    """The ranks reachable from ``me`` along ``dims``' groups, placed by position in each group.

    Raises:
        TopologyError: the dims' groups do not form a grid (two dims share a direction).
    """
    sizes = [topology.size(d) for d in dims]
    seen = {me}
    frontier = [me]
    while frontier:
        rank = frontier.pop()
        for dim in dims:
            for other in topology.group_of(rank, dim):
                if other not in seen:
                    seen.add(other)
                    frontier.append(other)
    mesh = torch.full(sizes, -1, dtype=torch.int)
    for rank in seen:
        index = tuple(topology.local_rank(rank, d) for d in dims)
        if mesh[index] != -1 or len(seen) != math.prod(sizes):
            raise TopologyError(
                f"world_mesh dims {tuple(dims)} are not independent directions of {topology}: "
                f"their groups reach {len(seen)} ranks from rank {me}, not {math.prod(sizes)} "
                f"(the product of their sizes {sizes}); name each axis once"
            )
        mesh[index] = rank
    return mesh


def _line(mesh: torch.Tensor, me: int, lo: int, hi: int) -> tuple[int, ...]:
    """The ranks of dims ``lo..hi-1`` through ``me``, row-major (what ``_flatten`` yields)."""
    where = (mesh == me).nonzero()[0].tolist()
    index = tuple(slice(None) if lo <= k < hi else where[k] for k in range(mesh.dim()))
    return tuple(int(r) for r in mesh[index].flatten().tolist())


def _factor(positions: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Sizes and strides (outermost first) of a mixed-radix walk giving ``positions``, or None."""
    rel = [p - positions[0] for p in positions]
    sizes: list[int] = []
    strides: list[int] = []
    block = 1
    while block < len(rel):
        stride = rel[block]
        count = 1
        while (count + 1) * block <= len(rel) and all(
            rel[count * block + i] == count * stride + rel[i] for i in range(block)
        ):
            count += 1
        if count == 1 or stride <= 0:
            return None
        sizes.append(count)
        strides.append(stride)
        block *= count
    if block != len(rel):
        return None
    return tuple(reversed(sizes)), tuple(reversed(strides))


def _flat_mesh(
    root: DeviceMesh, name: str, layout: Any, group: Any, ranks: tuple[int, ...]
) -> DeviceMesh:
    """A 1-D flattened mesh of ``root`` with ``layout`` whose only group is ``group``."""
    flat = DeviceMesh(
        root.device_type,
        _layout=layout,
        _rank_map=root._rank_map,
        mesh_dim_names=(name,),
        _root_mesh=root,
        _init_backend=False,
    )
    if tuple(flat.mesh.tolist()) != ranks:  # pragma: no cover - a torch whose layouts differ
        raise TopologyError(
            f"flattened mesh {name!r} holds ranks {tuple(flat.mesh.tolist())}, our group {ranks}; "
            f"torch {torch.__version__} lays meshes out differently from the verified "
            f"{', '.join(VERIFIED_TORCH)}"
        )
    flat._dim_group_names = [group.group_name]
    root._pg_registry[group.group_name] = group
    return flat


def _backing(groups: Groups, ranks: tuple[int, ...], prefer: Sequence[str]) -> str | None:
    """The first created kind (``prefer`` first) whose group through this rank is ``ranks``."""
    for kind in (*prefer, *groups.kinds):
        if kind in groups.kinds and groups.has_group(kind) and groups.ranks(kind) == ranks:
            return kind
    return None


def _group_ranks(group: Any, kind: str, expected: tuple[int, ...]) -> None:
    actual = tuple(dist.get_process_group_ranks(group))
    if actual != expected:
        raise TopologyError(
            f"our {kind} group orders its ranks {actual}, the mesh needs {expected}; a mesh "
            "dimension must follow the group's rank order"
        )


def world_mesh(
    groups: Groups,
    dims: Sequence[str],
    *,
    names: Sequence[str] | None = None,
    flatten: Mapping[str, str] | None = None,
    device_type: str | None = None,
) -> DeviceMesh:
    """One ``DeviceMesh`` over ``dims`` whose slices and flattens are ``groups``' communicators.

    Args:
        groups: the process groups (every dim and every ``flatten`` kind must be created).
        dims: kinds, outermost first, e.g. ``("pp", "dp-replicate", "dp-shard", "cp", "tp")``.
        names: display names of the dims (default: the kinds with ``-`` as ``_``).
        flatten: extra flattened meshes, ``{name: kind}`` (``{"fsdp": "intra-dp-cp"}``); the
            kind's groups must be a sub-layout of the mesh (e.g. ``ep`` inside ``dp-shard x tp``).
            A kind whose ranks are a run of adjacent dims is also found without being named.
        device_type: ``"cuda"``, ``"cpu"``...; default the default group's: cuda on NCCL, else cpu.

    Raises:
        TopologyError: no or repeated dims, names of another length or repeated, dims that are
            not independent directions, a flatten kind whose groups are not a sub-layout, or a
            torch whose ``DeviceMesh`` internals differ from the verified ones.
    """
    layouts = _layouts()
    dims = tuple(dims)
    if not dims or len(set(dims)) != len(dims):
        raise TopologyError(f"world_mesh needs distinct dims, e.g. ('dp', 'tp'); got {dims!r}")
    shown = tuple(names) if names is not None else tuple(d.replace("-", "_") for d in dims)
    if len(shown) != len(dims) or len(set(shown)) != len(shown):
        raise TopologyError(
            f"world_mesh names {shown!r} must be {len(dims)} distinct names, one per dim {dims!r}"
        )
    wanted = dict(flatten or {})
    for kind in (*dims, *wanted.values()):
        groups.ranks(kind)  # TopologyError for an unknown or not created kind
    topology = groups.topology
    me = groups.global_rank
    grid = _grid(topology, me, dims)
    members = []
    for k, kind in enumerate(dims):
        group = groups.group(kind)
        _group_ranks(group, kind, _line(grid, me, k, k + 1))
        members.append(group)
    device = device_type or collective_device().type
    if len(dims) == 1:
        root = DeviceMesh.from_group(members[0], device, mesh_dim_names=shown)
    else:
        root = DeviceMesh.from_group(members, device, grid, mesh_dim_names=shown)
    _check_root(root)

    flats: dict[str, tuple[Any, str]] = {}  # name -> (layout, kind); first claim wins

    def claim(name: str, layout: Any, kind: str) -> None:
        if name not in shown and name not in flats:
            flats[name] = (layout, kind)

    position = {int(r): i for i, r in enumerate(root._rank_map.tolist())}
    for name, kind in wanted.items():
        ranks = groups.ranks(kind)
        walk = _factor([position[r] for r in ranks]) if set(ranks) <= set(position) else None
        if walk is None:
            raise TopologyError(
                f"flatten {name!r}: the {kind} group {ranks} is not a strided sub-layout of the "
                f"mesh {shown} (ranks {tuple(root._rank_map.tolist())}); pick a kind inside it"
            )
        _one_stride(layouts, name, kind, walk)
        claim(name, layouts.flat(*walk), kind)
        claim(kind.replace("-", "_"), layouts.flat(*walk), kind)
    for width in range(2, len(dims) + 1):
        for lo in range(len(dims) - width + 1):
            ranks = _line(grid, me, lo, lo + width)
            backing = _backing(groups, ranks, dims[lo : lo + width])
            if backing is None:
                continue  # no kind of ours has these ranks: torch would make a group for it
            # adjacent dims of the row-major grid: one stride, that of the innermost
            layout = layouts.flat(
                (math.prod(grid.shape[lo : lo + width]),), (grid.stride(lo + width - 1),)
            )
            claim("_".join(shown[lo : lo + width]), layout, backing)
            claim(backing.replace("-", "_"), layout, backing)
    for name, (layout, kind) in flats.items():
        group = groups.group(kind)
        ranks = groups.ranks(kind)
        _group_ranks(group, kind, ranks)
        root._flatten_mapping[name] = _flat_mesh(root, name, layout, group, ranks)
    return root


def sliced(mesh: DeviceMesh, *names: str) -> DeviceMesh:
    """``mesh[names]`` without torch's warning about slicing flattened names from the root.

    >>> sliced(mesh, "pp", "batch", "cp", "tp")  # doctest: +SKIP
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Slicing a flattened dim", category=UserWarning)
        return mesh[names if len(names) > 1 else names[0]]
