"""Megatron-core's ``process_groups_config.ProcessGroupCollection`` holding the façade's groups.

Every field of the installed megatron-core's collection (20 in 0.16/0.17, 22 in 0.18, 27 in
0.19) gets what Megatron's ``ProcessGroupCollection.use_mpu_process_groups()`` gives after its
own ``initialize_model_parallel`` with the same arguments: a group with the same ranks, or None
where Megatron's is None (a middle stage's embedding groups; ``inter_dist_opt`` with one
distributed-optimizer instance). Megatron's aliases at size 1 follow its getters: without GTP
(gtp 1) ``dp_cp_gtp_remat`` is ``dp_cp``, ``expt_dp_gtp_remat`` is ``expt_dp``,
``tp_ep_pp_with_egtp_remat`` is ``tp_ep_pp`` and ``gtp_remat`` / ``expt_gtp_remat`` are this rank
alone; with one instance ``intra_dp_cp`` is ``dp_cp``, ``intra_expt_dp`` is ``expt_dp`` and
``intra_dist_opt`` the whole world.

>>> from topology_torch.compat.megatron import process_group_collection  # doctest: +SKIP
>>> process_group_collection().tp  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from topology import Topology, TopologyError

from ..._process_groups import ProcessGroups
from .._errors import topology_of
from ._state import groups as _groups
from ._state import second_communicator, singleton

__all__ = ["process_group_collection"]


# Each field's kinds, the first one the layout has wins (a GTP kind exists only when its axis
# is larger than 1, a distributed-optimizer kind only with several instances: Megatron's getter
# then gives the plain group). The fields read below are not here.
_COLLECTION_FIELDS: dict[str, tuple[str, ...]] = {
    "tp": ("tp",),
    "pp": ("pp",),
    "mp": ("tp-pp",),
    "embd": ("embedding",),
    "pos_embd": ("position-embedding",),
    "cp": ("cp",),
    "tp_cp": ("tp-cp",),
    "ep": ("ep",),
    "expt_tp": ("etp",),
    "tp_ep": ("etp-ep",),
    "tp_ep_pp": ("etp-ep-pp",),
    "tp_ep_pp_with_egtp_remat": ("etp-ep-egtp-pp", "etp-ep-pp"),
    "tp_dp_cp": ("tp-dp-cp",),
    "dp": ("dp",),
    "dp_cp": ("dp-cp",),
    "dp_cp_gtp_remat": ("gtp-dp-cp", "dp-cp"),
    "expt_dp": ("edp",),
    "expt_dp_gtp_remat": ("egtp-edp", "edp"),
    "intra_dp_cp": ("intra-dp-cp", "dp-cp"),
    "intra_expt_dp": ("intra-edp", "edp"),
    "inter_dist_opt": ("inter-edp",),
    "intra_dist_opt": ("intra-dist-opt",),
    "gtp_remat": ("gtp",),
    "expt_gtp_remat": ("egtp",),
}

# The second communicators for all-gather / reduce-scatter overlap (0.18+) and their kinds.
_ALL_GATHER_FIELDS = {"dp_cp_ag": "dp-cp", "expt_dp_ag": "edp"}
_ALL_GATHER = set(_ALL_GATHER_FIELDS)


def process_group_collection(
    groups: ProcessGroups | None = None, *, all_gather: bool = False
) -> Any:
    """Megatron-core's ``ProcessGroupCollection`` holding our groups (needs megatron-core).

    Every field of the installed megatron-core's class is set, as its
    ``use_mpu_process_groups()`` sets them (see the module docstring); a field the class lacks
    is not. ``dp_cp_ag`` and ``expt_dp_ag`` (0.18+) are second communicators with the ranks of
    ``dp_cp`` and ``expt_dp``: the ones ``groups`` hold (``ProcessGroups.create(...,
    independent=("dp-cp", "edp"))``, the façade's ``create_all_gather_group=True`` or
    ``create_all_gather_groups()``), else None as in Megatron. ``all_gather=True`` asks for them
    as Megatron's training does (``create_all_gather_groups(for_expert_parallelism=ep > 1)``):
    the façade makes the missing ones now (they live until ``destroy_model_parallel``); groups
    of your own must hold them. No other group is made but this rank's own (Megatron's GTP groups
    at size 1, the façade's only). SPMD contract (with ``all_gather=True``): call on every rank,
    with equal arguments, in the same order.

    Args:
        groups: the groups to hold; default the façade's (``initialize_model_parallel``).
        all_gather: fill ``dp_cp_ag`` and, with ep > 1, ``expt_dp_ag``.

    Raises:
        TopologyError: megatron-core is not installed, nothing is initialized, ``groups`` were
            made from a Grid, or ``all_gather=True`` with groups of your own that lack the
            second communicators.
    """
    collection = _collection_class()
    if type(all_gather) is not bool:
        raise TopologyError(
            f"all_gather must be True or False, got {all_gather!r}; pass all_gather=True to "
            "fill dp_cp_ag and expt_dp_ag"
        )
    held = groups if groups is not None else _groups()
    topology = topology_of(held)
    known = {f.name for f in dataclasses.fields(collection)}
    if all_gather:  # made only where the class has the fields (0.18+)
        _make_all_gather(held, topology, facade=groups is None, make=bool(known & _ALL_GATHER))
    fields: dict[str, Any] = {}
    for field in sorted(known):
        fields[field] = _field(field, held, topology, facade=groups is None)
    return collection(**fields)


def _collection_class() -> Any:
    """The installed megatron-core's ``ProcessGroupCollection``."""
    try:
        from megatron.core.process_groups_config import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            ProcessGroupCollection,
        )
    except ImportError as error:
        raise TopologyError(
            "process_group_collection needs megatron-core; install it with "
            "pip install --no-deps megatron-core"
        ) from error
    return ProcessGroupCollection


def _all_gather_kinds(topology: Topology) -> tuple[str, ...]:
    """The kinds Megatron's training gives second communicators (``edp`` only with ep > 1)."""
    return ("dp-cp", "edp") if topology.ep > 1 else ("dp-cp",)


def _make_all_gather(held: ProcessGroups, topology: Topology, *, facade: bool, make: bool) -> None:
    """Make sure ``held`` (or the façade) has the second communicators ``all_gather`` asks for."""
    missing = [k for k in _all_gather_kinds(topology) if second_communicator(held, k) is None]
    if not missing or (facade and not make):
        return
    if not facade:
        raise TopologyError(
            f"all_gather=True needs second communicators of {', '.join(missing)} in these "
            f"groups of {topology}; pass independent={tuple(_all_gather_kinds(topology))!r} to "
            "ProcessGroups.create"
        )
    from .parallel_state import create_all_gather_groups  # the façade's, kept until destroy

    create_all_gather_groups(for_expert_parallelism=topology.ep > 1)


def _field(field: str, held: ProcessGroups, topology: Topology, *, facade: bool) -> Any:
    """What Megatron's ``use_mpu_process_groups`` puts in ``field``, from our groups."""
    special = _SPECIAL.get(field)
    if special is not None:
        return special(held, topology, facade)
    kinds = _COLLECTION_FIELDS.get(field)
    if kinds is None:  # a field of a newer megatron-core than this façade knows
        return None
    for kind in kinds:
        if kind in topology.kinds:  # the first kind this layout has; None if not created here
            return held.group(kind) if kind in held.kinds and held.has_group(kind) else None
    return _FALLBACK.get(field, _none)(held, topology, facade)


def _none(held: ProcessGroups, topology: Topology, facade: bool) -> Any:
    return None


def _hcp(held: ProcessGroups, topology: Topology, facade: bool) -> Any:
    """The hierarchical context-parallel levels, innermost first (None without them)."""
    return [held.group(k) for k in held.kinds if k.startswith("hcp-")] or None


def _alone(held: ProcessGroups, topology: Topology, facade: bool) -> Any:
    """Megatron's GTP group at size 1: this rank alone (the façade makes it)."""
    return singleton() if facade else None


def _world(held: ProcessGroups, topology: Topology, facade: bool) -> Any:
    """Megatron's one distributed-optimizer instance: every rank (when these groups span all)."""
    return dist.group.WORLD if topology.world_size == dist.get_world_size() else None


def _all_gather(kind: str) -> Callable[[ProcessGroups, Topology, bool], Any]:
    def second(held: ProcessGroups, topology: Topology, facade: bool) -> Any:
        return second_communicator(held, kind) if kind in held.kinds else None

    return second


_SPECIAL: dict[str, Callable[[ProcessGroups, Topology, bool], Any]] = {
    "hcp": _hcp,
    **{field: _all_gather(kind) for field, kind in _ALL_GATHER_FIELDS.items()},
}

# What a field gets when none of its kinds exist (Megatron's value at size 1).
_FALLBACK: dict[str, Callable[[ProcessGroups, Topology, bool], Any]] = {
    "gtp_remat": _alone,
    "expt_gtp_remat": _alone,
    "intra_dist_opt": _world,
}
