"""Megatron-core's ``parallel_state`` module globals as read-only views of the façade's state.

Megatron's tests (and some of its code) read ``parallel_state._MODEL_PARALLEL_GROUP`` and its
kin directly. The façade keeps no such globals; its module ``__getattr__`` answers each name
from :data:`GLOBALS`: a function of the default :class:`ProcessGroups` (None before
initialization) and the ``set_*`` overrides, giving what Megatron's global would hold (None where
Megatron's is None).

>>> GLOBALS["_MODEL_PARALLEL_GROUP"](None, {})
>>> GLOBALS["_MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE"](None, {"tp_size": 4})
4

The view makers live in :mod:`topology_torch.compat._views` (``compat.ezpz`` uses them too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.distributed as dist

from ..._process_groups import ProcessGroups
from .._errors import topology_of
from .._views import View, group_view, member, ranks_view
from . import _hybrid
from ._install import published_value

__all__ = ["GLOBALS"]

# global holding a group -> our kind
_GROUPS = {
    "_TENSOR_MODEL_PARALLEL_GROUP": "tp",
    "_PIPELINE_MODEL_PARALLEL_GROUP": "pp",
    "_MODEL_PARALLEL_GROUP": "tp-pp",
    "_EMBEDDING_GROUP": "embedding",
    "_POSITION_EMBEDDING_GROUP": "position-embedding",
    "_DATA_PARALLEL_GROUP": "dp",
    "_DATA_PARALLEL_GROUP_WITH_CP": "dp-cp",
    "_TENSOR_AND_DATA_PARALLEL_GROUP": "tp-dp",
    "_TENSOR_AND_DATA_PARALLEL_GROUP_WITH_CP": "tp-dp-cp",
    "_TENSOR_AND_CONTEXT_PARALLEL_GROUP": "tp-cp",
    "_CONTEXT_PARALLEL_GROUP": "cp",
    "_EXPERT_MODEL_PARALLEL_GROUP": "ep",
    "_EXPERT_TENSOR_PARALLEL_GROUP": "etp",
    "_EXPERT_TENSOR_AND_MODEL_PARALLEL_GROUP": "etp-ep",
    "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP": "etp-ep-pp",
    "_EXPERT_DATA_PARALLEL_GROUP": "edp",
    "_INTER_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": "inter-edp",
}
# global holding a group whose kind exists only with several distributed-optimizer instances;
# with one instance Megatron points it at the full group (second entry)
_PARTIAL = {
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP": ("intra-dp-cp", "dp-cp"),
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP": ("intra-edp", "edp"),
}
_GLOO = {
    "_DATA_PARALLEL_GROUP_GLOO": "dp",
    "_DATA_PARALLEL_GROUP_WITH_CP_GLOO": "dp-cp",
    "_EXPERT_DATA_PARALLEL_GROUP_GLOO": "edp",
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_GLOO": "intra-dp-cp",
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_GLOO": "intra-edp",
}
# global holding a group's global ranks -> our kind
_RANKS = {
    "_EMBEDDING_GLOBAL_RANKS": "embedding",
    "_POSITION_EMBEDDING_GLOBAL_RANKS": "position-embedding",
    "_PIPELINE_GLOBAL_RANKS": "pp",
    "_DATA_PARALLEL_GLOBAL_RANKS": "dp",
    "_DATA_PARALLEL_GLOBAL_RANKS_WITH_CP": "dp-cp",
    "_TENSOR_MODEL_PARALLEL_GLOBAL_RANKS": "tp",
    "_EXPERT_MODEL_PARALLEL_RANKS": "ep",
    "_MODEL_PARALLEL_GLOBAL_RANKS": "tp-pp",
    "_CONTEXT_PARALLEL_GLOBAL_RANKS": "cp",
}
_OVERRIDDEN = {
    "_MPU_TENSOR_MODEL_PARALLEL_WORLD_SIZE": "tp_size",
    "_MPU_TENSOR_MODEL_PARALLEL_RANK": "tp_rank",
    "_MPU_PIPELINE_MODEL_PARALLEL_WORLD_SIZE": "pp_size",
    "_MPU_PIPELINE_MODEL_PARALLEL_RANK": "pp_rank",
    "_MPU_DATA_PARALLEL_WORLD_SIZE": "dp_size",
    "_MPU_DATA_PARALLEL_RANK": "dp_rank",
    "_MPU_EXPERT_MODEL_PARALLEL_WORLD_SIZE": "ep_size",
    "_MPU_EXPERT_MODEL_PARALLEL_RANK": "ep_rank",
    "_MPU_EXPERT_TENSOR_PARALLEL_WORLD_SIZE": "etp_size",
    "_MPU_EXPERT_TENSOR_PARALLEL_RANK": "etp_rank",
    "_VIRTUAL_PIPELINE_MODEL_PARALLEL_RANK": "vpp_rank",
}


def _partial(kinds: tuple[str, str]) -> View:
    def view(groups: ProcessGroups | None, overrides: Mapping[str, int | None]) -> Any:
        if groups is None:
            return None
        kind = kinds[0] if kinds[0] in groups.kinds else kinds[1]
        return group_view(kind)(groups, overrides)

    return view


def _gloo(kind: str) -> View:
    def view(groups: ProcessGroups | None, _: Mapping[str, int | None]) -> Any:
        if groups is None or not member(groups, kind):
            return None
        try:
            return groups.gloo_group(kind)
        except Exception:  # no gloo companion was made
            return None

    return view


def _overridden(name: str) -> View:
    return lambda _, overrides: overrides.get(name)


def _all_gather(groups: ProcessGroups | None, _: Mapping[str, int | None]) -> Any:
    if groups is None or not groups.has_independent("dp-cp"):
        return None
    return groups.independent_group("dp-cp")


def _hierarchical(groups: ProcessGroups | None, _: Mapping[str, int | None]) -> Any:
    levels = [k for k in groups.kinds if k.startswith("hcp-")] if groups else []
    return [groups.group(k) for k in levels] if groups and levels else None


def _intra_instance(groups: ProcessGroups | None, overrides: Mapping[str, int | None]) -> Any:
    if groups is None:
        return None
    if topology_of(groups).dist_opt_instances == 1:
        return dist.group.WORLD
    return group_view("intra-dist-opt")(groups, overrides)


def _vpp_size(groups: ProcessGroups | None, overrides: Mapping[str, int | None]) -> Any:
    value = overrides.get("vpp_size")
    return value if value is not None or groups is None else topology_of(groups).vpp


# 0.19's GTP globals: computed as install() fills them into Megatron's module
_GTP_GLOBALS = (
    "_GTP_WEIGHT_REMAT_GROUP",
    "_GTP_WEIGHT_REMAT_GLOBAL_RANKS",
    "_EXPERT_GTP_WEIGHT_REMAT_GROUP",
    "_EXPERT_GTP_WEIGHT_REMAT_GLOBAL_RANKS",
    "_DATA_PARALLEL_GROUP_WITH_GTP_REMAT",
    "_DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT",
    "_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP_WITH_GTP_REMAT",
    "_EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT",
    "_INTRA_PARTIAL_EXPERT_DATA_PARALLEL_GROUP_WITH_GTP_REMAT",
    "_EXPERT_TENSOR_MODEL_PIPELINE_PARALLEL_GROUP_WITH_EGTP",
)


def _hybrid_groups(groups: ProcessGroups | None, _: Mapping[str, int | None]) -> Any:
    """Megatron's dict of hybrid dp-cp groups by size ({} without hybrid context parallelism)."""
    made = _hybrid.current()
    return made if made is not None and groups is not None else {}


def _installed(name: str) -> View:
    return lambda groups, _: None if groups is None else published_value(name, groups)


GLOBALS: dict[str, View] = {
    **{name: group_view(kind) for name, kind in _GROUPS.items()},
    **{name: _partial(kinds) for name, kinds in _PARTIAL.items()},
    **{name: _gloo(kind) for name, kind in _GLOO.items()},
    **{name: ranks_view(kind) for name, kind in _RANKS.items()},
    **{name: _overridden(key) for name, key in _OVERRIDDEN.items()},
    "_DATA_PARALLEL_GROUP_WITH_CP_AG": _all_gather,
    "_HIERARCHICAL_CONTEXT_PARALLEL_GROUPS": _hierarchical,
    "_HYBRID_DP_CP_GROUPS": _hybrid_groups,
    "_DYNAMIC_DP_CP_GROUPS": _hybrid_groups,  # Megatron's dev-branch name
    "_INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP": _intra_instance,
    "_VIRTUAL_PIPELINE_MODEL_PARALLEL_WORLD_SIZE": _vpp_size,
    **{name: _installed(name) for name in _GTP_GLOBALS},
}
