"""The façade's state: the default groups it owns and Megatron's ``set_*`` overrides (private).

Every module of :mod:`topology_torch.compat.megatron` reads its groups through :func:`groups` and
:func:`group`, so "not initialized" is reported one way everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch.distributed as dist

from topology import Grid

from ... import _default
from ..._process_groups import ProcessGroups
from .._errors import FacadeAssertionError, NotInitializedError, owned_groups, topology_of

OWNER = _default.Owner("compat.megatron", "initialize_model_parallel()", "destroy_model_parallel()")
# Megatron's settable values (``set_tensor_model_parallel_world_size`` ...): None means "ask the
# group". The one piece of façade state besides the default groups; destroy_model_parallel
# clears it, as Megatron does.
OVERRIDES = (
    "tp_size",
    "tp_rank",
    "pp_size",
    "pp_rank",
    "vpp_size",
    "vpp_rank",
    "dp_size",
    "dp_rank",
    "ep_size",
    "ep_rank",
    "etp_size",
    "etp_rank",
)
overrides: dict[str, int | None] = dict.fromkeys(OVERRIDES)


def model_parallel_is_initialized() -> bool:
    """Whether this façade's groups exist."""
    return _default.held_by(OWNER) is not None


def is_initialized() -> bool:
    """Whether this façade's groups exist (Megatron: the data-parallel group exists)."""
    return _default.held_by(OWNER) is not None


def groups() -> ProcessGroups:
    """The groups this façade made; the peer's ``AssertionError`` when it made none."""
    return owned_groups(OWNER)


def group(kind: str, check_initialized: bool = True) -> Any:
    """This rank's group of ``kind``: None (``check_initialized=False``) or Megatron's
    ``AssertionError`` where Megatron's global would be None."""
    if not check_initialized and not is_initialized():
        return None
    held = groups()
    if kind not in held.kinds:  # a kind Megatron leaves None for this layout
        if check_initialized:
            raise NotInitializedError(
                f"the {kind} group is not initialized: {held.topology} has no such kind"
            )
        return None
    if not held.has_group(kind):
        if check_initialized:
            raise NotInitializedError(
                f"rank {held.global_rank} holds no {kind} group of {held.topology}"
            )
        return None
    return held.group(kind)


def dp_kind(with_context_parallel: bool, partial_data_parallel: bool, with_gtp: bool) -> str:
    """The kind of Megatron's data-parallel group with these switches.

    ``with_gtp`` (0.19's ``with_gtp_remat``, its default) widens it by the GTP axis where there is
    one (``gtp-dp``, ``gtp-dp-cp``; kinds that exist only with gtp > 1); GTP admits one
    distributed-optimizer instance, so its partial group is its ``gtp-dp-cp`` group.
    """
    if partial_data_parallel and not with_context_parallel:
        raise FacadeAssertionError(
            "partial_data_parallel=True needs with_context_parallel=True, as in Megatron "
            "(partial DP for the optimizer includes CP)"
        )
    held = groups()
    kind = "dp-cp" if with_context_parallel else "dp"
    if with_gtp and f"gtp-{kind}" in held.kinds:
        return f"gtp-{kind}"
    if partial_data_parallel and topology_of(held).dist_opt_instances > 1:
        return "intra-dp-cp"
    return kind


def edp_kind(partial: bool, with_gtp: bool) -> str:
    """The kind of Megatron's expert data-parallel group (``egtp-edp`` where egtp > 1)."""
    held = groups()
    if with_gtp and "egtp-edp" in held.kinds:
        return "egtp-edp"
    return "intra-edp" if partial and topology_of(held).dist_opt_instances > 1 else "edp"


def dist_ready() -> bool:
    """Whether torch.distributed is initialized (Megatron's size getters answer 0 otherwise)."""
    return dist.is_available() and dist.is_initialized()


def override(name: str) -> int | None:
    """The value a ``set_*`` call gave ``name`` (None: ask the group)."""
    return overrides[name]


def size(kind: str) -> int:
    """Megatron's ``group.size()`` for the size getters that answer 0 without torch.distributed."""
    return groups().size(kind) if dist_ready() else 0


def rank(kind: str) -> int:
    """This rank's position in its ``kind`` group; 0 without torch.distributed."""
    return groups().rank(kind) if dist_ready() else 0


# Called after destroy_model_parallel released the groups (install() empties Megatron's globals).
destroy_hooks: list[Callable[[], None]] = []

# Groups made beside the default ones: this rank's singleton (Megatron's GTP groups at gtp 1)
# and create_all_gather_groups' communicators; destroy_model_parallel destroys them.
_extras: list[ProcessGroups] = []


def make_singleton() -> None:
    """Prepare the group of each rank alone (Megatron 0.19 makes one per rank for its GTP axes
    of size 1). No collective and no ``new_group`` here: :func:`singleton` makes this rank's on
    first use, entered by this rank only."""
    grid = Grid.from_sizes(world=dist.get_world_size(), alone=1)
    _extras.append(ProcessGroups.create(grid, kinds=("alone",), gloo=(), agree=False))


def singleton() -> Any:
    """The group of this rank alone (made by :func:`make_singleton`)."""
    for held in _extras:
        if "alone" in held.kinds:
            return held.group("alone")
    raise NotInitializedError(
        "the group of this rank alone is not initialized; call initialize_model_parallel first"
    )


def extra_groups(made: ProcessGroups) -> ProcessGroups:
    """Keep ``made`` until :func:`release_extras` (``destroy_model_parallel``)."""
    _extras.append(made)
    return made


def release_extras() -> None:
    """Destroy every group kept by :func:`make_singleton` and :func:`extra_groups`."""
    while _extras:
        _extras.pop().destroy()


def second_communicator(held: ProcessGroups, kind: str) -> Any:
    """The independent second communicator of ``kind`` (Megatron's all-gather groups): ``held``'s
    own, else one :func:`extra_groups` keeps (``create_all_gather_groups``); None without."""
    for made in (held, *(_extras if held is _default.held_by(OWNER) else ())):
        if kind in made.kinds and made.has_independent(kind):
            return made.independent_group(kind)
    return None
