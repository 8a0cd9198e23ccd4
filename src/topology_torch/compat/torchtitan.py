"""torchtitan's ``ParallelDims`` on our communicators (checked against torchtitan 0.3.0).

``ParallelDims(dp_replicate=, dp_shard=, cp=, tp=, pp=, ep=, world_size=)`` takes torchtitan's
fields, raises its validation errors (as :class:`~topology.TopologyError` subclasses that are
also torchtitan's ``AssertionError`` / ``ValueError``) and answers its properties. ``build_mesh()``
creates our process groups for the layout (:meth:`topology_torch.ProcessGroups.create`) and one
world mesh over them (:func:`topology_torch._world_mesh.world_mesh`); every mesh torchtitan's
``get_mesh`` names (``pp``, ``batch``, ``loss``, ``dp_replicate``, ``dp_shard``, ``fsdp``, ``dp``,
``cp``, ``tp``, ``ep``, ``efsdp``) is a slice of that one mesh and uses a communicator we made:
torch creates no process group of its own, and one rank set is one communicator.

The layout is torchtitan's: mesh ``(pp, dp_replicate, dp_shard, cp, tp)``, tp fastest, which is
``Topology(W, tp=, cp=, pp=, ep=, etp=1, order="tp-cp-ep-dp-pp", dist_opt_instances=dp_replicate)``:
``batch`` is our ``dp``, ``loss`` is ``dp-cp``, ``fsdp`` (``dp_shard x cp``) is ``intra-dp-cp``,
``efsdp`` is ``intra-edp`` and torchtitan's ``ep`` is ours with ``etp=1`` (Megatron's default
``etp=tp`` gives other groups).

Differences: ``world_mesh`` is the n-D root mesh ``(pp, dp_replicate, dp_shard, cp, tp)``, not
torchtitan's 1-D ``("world",)`` mesh (slice it; ``get_mesh`` answers as torchtitan's); a size-1
axis is a real singleton group (free: made by this rank alone) where torchtitan uses a fake
backend; ``ep`` must divide ``dp_shard * cp * tp`` at construction (torchtitan 0.3.0 fails later,
inside ``build_mesh``; its main branch checks it here too).

>>> dims = ParallelDims(dp_replicate=2, dp_shard=-1, cp=1, tp=2, pp=1, ep=1, world_size=8)
>>> dims.dp_shard, dims.fsdp_enabled, dims.non_data_parallel_size, dims.seq_len_divisor
(2, True, 2, 4)
>>> ParallelDims(dp_replicate=2, dp_shard=2, cp=1, tp=2, pp=1, ep=1, world_size=10)
Traceback (most recent call last):
...
topology_torch.compat._errors.FacadeAssertionError: Invalid parallel dims: dp_replicate(2) * \
dp_shard(2) * cp(1) * tp(2) * pp(1) != WORLD_SIZE(10)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.distributed.device_mesh import DeviceMesh

from topology import Topology, TopologyError

from .._args import check_size
from .._process_groups import ProcessGroups
from .._world_mesh import sliced, world_mesh
from ._errors import FacadeAssertionError, as_assertion

__all__ = ["MeshNameError", "ParallelDims", "device_type"]

device_type = "cuda" if torch.cuda.is_available() else "cpu"
"""The device of the meshes (torchtitan's ``device_type``; tests patch it to ``"cpu"``)."""

_BACKENDS = ("partial_dtensor", "full_dtensor", "spmd_types")
_AXES = ("pp", "dp_replicate", "dp_shard", "cp", "tp")


class MeshNameError(TopologyError, ValueError):
    """A mesh torchtitan answers with ``ValueError``: unknown name or a disabled axis."""


def _kind(topology: Topology, wanted: str, single: str) -> str:
    """``wanted`` when the core has it; ``single`` (same groups when dp_replicate is 1) else."""
    if wanted in topology.kinds:
        return wanted
    if topology.dist_opt_instances > 1:  # pragma: no cover - a core without dp-replicate
        raise TopologyError(f"{topology} has no {wanted!r} kind; this core is too old")
    return single


@dataclass
class ParallelDims:
    """torchtitan's ``ParallelDims``: parallel degrees, validated; meshes on our groups.

    ``dp_shard=-1`` takes what the other degrees leave of ``world_size``.
    """

    dp_replicate: int
    dp_shard: int
    cp: int
    tp: int
    pp: int
    ep: int
    world_size: int
    spmd_backend: str = "spmd_types"
    _single_axis_meshes: dict[str, DeviceMesh] = field(default_factory=dict)
    _multi_axis_meshes: dict[tuple[str, ...], DeviceMesh] = field(default_factory=dict)
    _world_mesh: DeviceMesh | None = None
    _spmd_meshes: list[DeviceMesh] = field(default_factory=list)
    _global_meshes: dict[str, DeviceMesh] = field(default_factory=dict, repr=False)
    _groups: ProcessGroups | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, parallelism_config: Any, world_size: int) -> ParallelDims:
        """From torchtitan's ``ParallelismConfig`` (or anything with its attribute names)."""
        c = parallelism_config
        return cls(
            dp_replicate=c.data_parallel_replicate_degree,
            dp_shard=c.data_parallel_shard_degree,
            cp=c.context_parallel_degree,
            tp=c.tensor_parallel_degree,
            pp=c.pipeline_parallel_degree,
            ep=c.expert_parallel_degree,
            world_size=world_size,
            spmd_backend=getattr(c, "spmd_backend", "spmd_types"),
        )

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        degrees = (self.dp_replicate, self.dp_shard, self.cp, self.tp, self.pp, self.ep)
        if not all(isinstance(d, int) and not isinstance(d, bool) for d in degrees):
            raise FacadeAssertionError(f"parallel degrees must be integers, got {degrees}")
        as_assertion(lambda: check_size("world_size", self.world_size))
        if self.spmd_backend not in _BACKENDS:
            raise FacadeAssertionError(
                f"spmd_backend {self.spmd_backend!r} is not one of {', '.join(_BACKENDS)}"
            )
        if min(self.dp_replicate, self.cp, self.tp, self.pp, self.ep) < 1:
            raise FacadeAssertionError("Parallelism degree should be >= 1, except for dp_shard")
        if self.dp_shard != -1 and self.dp_shard < 1:
            raise FacadeAssertionError("dp_shard must -1 or >=1.")
        if self.dp_shard == -1:
            self.dp_shard = self.world_size // (self.dp_replicate * self.cp * self.tp * self.pp)
        if self.dp_shard < 1:
            raise FacadeAssertionError(
                f"dp_shard=-1 leaves no data-parallel rank: world_size {self.world_size} < "
                f"dp_replicate*cp*tp*pp = {self.dp_replicate * self.cp * self.tp * self.pp}"
            )
        product = self.dp_replicate * self.dp_shard * self.cp * self.tp * self.pp
        if product != self.world_size:
            raise FacadeAssertionError(
                f"Invalid parallel dims: dp_replicate({self.dp_replicate}) * "
                f"dp_shard({self.dp_shard}) * cp({self.cp}) * tp({self.tp}) * pp({self.pp}) "
                f"!= WORLD_SIZE({self.world_size})"
            )
        region = self.dp_shard * self.cp * self.tp
        if region % self.ep:
            raise MeshNameError(
                f"expert_parallel_degree ({self.ep}) must divide dp_shard * cp * tp ({region})"
            )

    # -- the layout ---------------------------------------------------------------------------

    def topology(self) -> Topology:
        """Our layout of these degrees (torchtitan's mesh order, ``ep`` with ``etp=1``)."""
        return Topology(
            self.world_size,
            tp=self.tp,
            cp=self.cp,
            pp=self.pp,
            ep=self.ep,
            etp=1,
            order="tp-cp-ep-dp-pp",
            dist_opt_instances=self.dp_replicate,
        )

    def _kinds(self, topology: Topology) -> tuple[tuple[str, ...], dict[str, str]]:
        """The kinds of the mesh dims and of the flattened meshes, by torchtitan's names."""
        one = "etp"  # always a singleton here: the kind for an absent dp_replicate
        dims = (
            "pp",
            _kind(topology, "dp-replicate", one),
            _kind(topology, "dp-shard", "dp"),
            "cp",
            "tp",
        )
        fsdp = _kind(topology, "intra-dp-cp", "dp-cp")
        flatten = {
            "batch": "dp",
            "dp": "dp",
            "loss": "dp-cp",
            "loss_mesh": "dp-cp",
            "batch_cp": "dp-cp",
            "fsdp": fsdp,
            "dp_shard_cp": fsdp,
            "efsdp": _kind(topology, "intra-edp", "edp"),
            "ep": "ep",
        }
        return dims, flatten

    @property
    def groups(self) -> ProcessGroups:
        """Our process groups behind every mesh (built on first use)."""
        if self._groups is None:
            self.build_mesh()
        assert self._groups is not None
        return self._groups

    # -- meshes -------------------------------------------------------------------------------

    def _mesh_exist(self, name: str, degree: int) -> bool:
        """Whether torchtitan gives ``name`` a real (not fake) group at this ``degree``."""
        if name == "fsdp":
            return True  # kept at size 1: fully_shard wants it for mixed precision
        if name == "dp_shard" and self.spmd_backend in ("full_dtensor", "spmd_types"):
            return True
        if name == "efsdp":
            return self.ep > 1
        return degree > 1

    def build_mesh(self) -> DeviceMesh:
        """Create our groups and the world mesh; every named mesh is a slice of it.

        SPMD contract: call on every rank of the default group, as ``ProcessGroups.create``.
        """
        topology = self.topology()
        dims, flatten = self._kinds(topology)
        kinds = tuple(dict.fromkeys((*dims, *flatten.values())))
        groups = ProcessGroups.create(topology, kinds=kinds, gloo=())
        root = world_mesh(groups, dims, names=_AXES, flatten=flatten, device_type=device_type)
        self._groups, self._world_mesh = groups, root
        dataloading = sliced(root, "pp", "batch", "cp", "tp")
        loss = sliced(dataloading, "batch", "cp")._flatten("loss_mesh")
        dense = root
        spmd_dense: DeviceMesh | None = None
        if self.spmd_backend == "spmd_types":
            spmd_dense = sliced(root, "pp", "dp", "cp", "tp")["dp", "cp", "tp"]
            candidates = ["dp", "cp", "tp"]
        elif self.spmd_backend == "full_dtensor":
            candidates = ["dp_replicate", "dp_shard", "cp", "tp"]
        else:
            dense = sliced(root, "pp", "dp_replicate", "fsdp", "tp")
            candidates = ["dp_replicate", "fsdp", "tp"]
        sparse = sliced(root, "pp", "dp_replicate", "efsdp", "ep")
        self._global_meshes = {"dataloading": dataloading, "loss": loss}
        self._global_meshes.update(dense=dense, sparse=sparse)
        if spmd_dense is not None:
            self._global_meshes["spmd_dense_for_fwdbwd"] = spmd_dense
            if self.ep > 1:
                self._global_meshes["spmd_sparse_for_fwdbwd"] = sparse[
                    "dp_replicate", "efsdp", "ep"
                ]
        one = {"pp": sliced(root, "pp"), "batch": dataloading["batch"], "loss": loss}
        one.update(dp_replicate=root["dp_replicate"], cp=root["cp"], tp=root["tp"])
        one.update(ep=sparse["ep"], efsdp=sparse["efsdp"])  # torchtitan's order of names
        if spmd_dense is not None:
            one.update(dp=spmd_dense["dp"], dp_shard=root["dp_shard"])
        elif self.spmd_backend == "full_dtensor":
            one["dp_shard"] = root["dp_shard"]
        else:
            one["fsdp"] = dense["fsdp"]
        self._single_axis_meshes = one
        self._multi_axis_meshes = {}
        self._check_sizes()
        self._spmd_meshes = [
            mesh
            for mesh in (
                self.get_activated_mesh(candidates),
                self.get_activated_mesh(["dp_replicate", "efsdp", "ep"]),
            )
            if mesh is not None
        ]
        return root

    def _check_sizes(self) -> None:
        batch = self.dp_replicate * self.dp_shard
        sizes = {
            "pp": self.pp,
            "batch": batch,
            "loss": batch * self.cp,
            "dp_replicate": self.dp_replicate,
            "cp": self.cp,
            "tp": self.tp,
            "ep": self.ep,
            "efsdp": self.dp_shard * self.cp * self.tp // self.ep,
            "dp": batch,
            "dp_shard": self.dp_shard,
            "fsdp": self.dp_shard * self.cp,
        }
        for name, mesh in self._single_axis_meshes.items():
            if mesh.size() != sizes[name]:  # pragma: no cover - a core or torch defect
                raise TopologyError(f"mesh {name!r} has {mesh.size()} ranks, not {sizes[name]}")

    def _built(self) -> None:
        if not self._single_axis_meshes:
            self.build_mesh()

    def get_optional_mesh(
        self, dims: str | list[str], *, include_singleton_axes: bool = False
    ) -> DeviceMesh | None:
        """The mesh of ``dims`` (one name or several), None when an axis is not enabled.

        Raises:
            MeshNameError: an unknown name, or names that no mesh holds together.
        """
        self._built()
        names = [dims] if isinstance(dims, str) else list(dims)
        unknown = [n for n in names if n not in self._single_axis_meshes]
        if unknown:
            raise MeshNameError(
                f"Invalid mesh dim: '{unknown[0]}'. "
                f"Valid dimensions are: {list(self._single_axis_meshes.keys())}"
            )
        if not include_singleton_axes and not all(
            self._mesh_exist(n, self._single_axis_meshes[n].size()) for n in names
        ):
            return None
        if len(names) == 1:
            return self._single_axis_meshes[names[0]]
        key = tuple(names)
        if key not in self._multi_axis_meshes:
            holder = next(
                (
                    mesh
                    for mesh in self._global_meshes.values()
                    if set(names) <= set(mesh.mesh_dim_names or ())
                ),
                None,
            )
            if holder is None:
                raise MeshNameError(f"Invalid mesh name combinations {names}.")
            self._multi_axis_meshes[key] = holder[key]
        return self._multi_axis_meshes[key]

    def get_mesh(self, dims: str | list[str]) -> DeviceMesh:
        """The mesh of ``dims``; ``MeshNameError`` (a ``ValueError``) when not enabled."""
        mesh = self.get_optional_mesh(dims)
        if mesh is None:
            which = "enabled (size > 1)" if isinstance(dims, str) else "all enabled"
            raise MeshNameError(
                f"Mesh '{dims}' is not available. "
                f"Ensure the corresponding parallelism dimension is {which}."
            )
        return mesh

    def get_activated_mesh(self, axes: list[str]) -> DeviceMesh | None:
        """The mesh of those ``axes`` that are enabled; None when none is."""
        self._built()
        live = [
            a
            for a in axes
            if a in self._single_axis_meshes and self.get_optional_mesh(a) is not None
        ]
        return self.get_optional_mesh(live) if live else None

    def spmd_meshes(self) -> list[DeviceMesh]:
        """The dense and sparse SPMD meshes, restricted to enabled axes."""
        if not self._spmd_meshes:
            self.build_mesh()
        return self._spmd_meshes

    def spmd_dense_mesh(self) -> DeviceMesh:
        """The ``(dp, cp, tp)`` mesh of the ``spmd_types`` backend."""
        self._built()
        mesh = self._global_meshes.get("spmd_dense_for_fwdbwd")
        if mesh is None:
            raise MeshNameError(
                f"spmd_dense_mesh exists only with spmd_backend='spmd_types', "
                f"not {self.spmd_backend!r}"
            )
        return mesh

    def spmd_sparse_mesh(self) -> DeviceMesh | None:
        """The ``(dp_replicate, efsdp, ep)`` mesh of ``spmd_types`` with ep > 1, else None."""
        self._built()
        return self._global_meshes.get("spmd_sparse_for_fwdbwd")

    def get_dense_tp_mesh(self) -> DeviceMesh:
        """The tp mesh that dense forward/backward computation uses."""
        if self.spmd_backend == "spmd_types":
            return self.spmd_dense_mesh()["tp"]
        if self.spmd_backend == "full_dtensor":
            return self.spmd_meshes()[0]["tp"]
        return self.get_mesh("tp")

    def resolve_mesh(self, axes: Iterable[Any]) -> DeviceMesh | None:
        """The SPMD mesh of ``axes`` (names or torchtitan ``MeshAxisName``s), as torchtitan's."""
        names = [str(getattr(a, "value", a)) for a in axes]
        if self.spmd_backend == "partial_dtensor":
            names = [n for n in names if n in ("tp", "ep")]
        elif self.spmd_backend == "full_dtensor":
            names = [
                u for n in names for u in (("dp_replicate", "dp_shard") if n == "dp" else (n,))
            ]
        else:
            names = [n for n in names if n in ("dp", "cp", "tp", "ep")]
        mesh = self.get_activated_mesh(names)
        valid = [list(m.mesh_dim_names or ()) for m in self.spmd_meshes()]
        if (
            mesh is not None
            and self.spmd_backend == "full_dtensor"
            and mesh not in self._spmd_meshes
        ):
            raise MeshNameError(
                f"Resolved mesh {list(mesh.mesh_dim_names or ())} does not match any SPMD mesh. "
                f"Valid meshes: {valid}."
            )
        return mesh

    def get_all_one_dimensional_meshes(self) -> dict[str, DeviceMesh]:
        """Every enabled 1-D mesh by name (size > 1 and not fake in torchtitan)."""
        self._built()
        return {
            name: mesh
            for name, mesh in self._single_axis_meshes.items()
            if mesh.ndim == 1 and mesh.size() > 1 and self._mesh_exist(name, mesh.size())
        }

    @property
    def world_mesh(self) -> DeviceMesh:
        """The root mesh ``(pp, dp_replicate, dp_shard, cp, tp)`` (built on first use)."""
        if self._world_mesh is None:
            self.build_mesh()
        assert self._world_mesh is not None
        return self._world_mesh

    # -- degrees --------------------------------------------------------------------------------

    @property
    def dp_enabled(self) -> bool:
        return self.dp_replicate > 1 or self.dp_shard > 1

    @property
    def dp_replicate_enabled(self) -> bool:
        return self.dp_replicate > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self.dp_shard > 1

    @property
    def cp_enabled(self) -> bool:
        return self.cp > 1

    @property
    def dp_cp_enabled(self) -> bool:
        return self.dp_enabled or self.cp_enabled

    @property
    def fsdp_enabled(self) -> bool:
        return self.dp_shard_enabled or self.cp_enabled

    @property
    def tp_enabled(self) -> bool:
        return self.tp > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pp > 1

    @property
    def ep_enabled(self) -> bool:
        return self.ep > 1

    @property
    def non_data_parallel_size(self) -> int:
        """Ranks that hold one data-parallel replica: ``cp * tp * pp``."""
        return self.cp * self.tp * self.pp

    @property
    def seq_len_divisor(self) -> int:
        """What the sequence length must divide by: tp (sequence parallel) x 2*cp (balanced CP)."""
        return self.tp * self.cp * 2
