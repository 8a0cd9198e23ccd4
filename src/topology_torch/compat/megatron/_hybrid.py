"""Megatron's hybrid (dynamic) context-parallel groups on our creation strategies (private).

``initialize_model_parallel(hybrid_context_parallel=True)`` (or the dynamic spelling) gives each
rank one group per block size of :func:`topology.hybrid_cp_groups`: the blocks of 2, 4, ...
consecutive members of its dp-cp group. Megatron 0.19.2 makes them with every rank entering
every group's ``new_group`` (about the world size in calls per rank); here one call per size and
rank: one ``split_group`` per size on an NCCL default group bound to a device, else a
members-only ``new_group`` per size (strategy ``all``, where neither works, enters every group
as Megatron does). By default (``hybrid_groups="lazy"``) the members-only groups are made on
their first get, so a size no micro-batch uses never costs a communicator; ``"eager"`` makes
every size in ``initialize_model_parallel``, as Megatron does. ``split`` and ``all`` are
collectives of the whole default group and always run there.

SPMD contract for lazy groups: every member of a block asks for its size (Megatron's
dynamic-CP schedule does: the members are the ranks that run that sequence together).

Megatron's dev branch (``dynamic_context_parallel=True``) also makes one-rank groups where
``min_dynamic_context_parallel_size`` is 1 (its default) and, after making the groups, warms
each communicator up with a barrier (dev ``parallel_state.py:937-948`` at d48bd6be0a, the base
of PR #6479; the PR, at 986bf45787, makes it optional as
``eager_initialize_dynamic_cp_communicators`` and skips size 1: ``parallel_state.py:944-953``).
:func:`warm_up` is that barrier for eagerly made groups on an NCCL default group, whose
communicators are otherwise made on first use; gloo connects a group when it is made, and a
lazily made group is used at once, so neither needs one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.distributed as dist

from topology import GroupList, TopologyError

from ..._creation import Registry, no_stray_entry
from ..._creation_plan import Channel, key_of
from ..._process_groups import release
from .._errors import FacadeKeyError

__all__ = [
    "HYBRID_GROUPS",
    "HybridGroups",
    "current",
    "group",
    "made_hooks",
    "make",
    "release_all",
    "warm_up",
]

HYBRID_GROUPS = ("lazy", "eager")
"""When the members-only hybrid groups are made: on first get, or in initialize_model_parallel."""

_made = 0  # how many HybridGroups this process made (names each one's communicators apart)
_current: HybridGroups | None = None

made_hooks: list[Callable[[Any], None]] = []
"""Called with each group made (``install()`` lists a lazily made one where Megatron's
``create_group`` lists its groups: ``_global_process_group_list``)."""


class HybridGroups(dict[int, Any]):
    """This rank's hybrid dp-cp groups by size (Megatron's ``_HYBRID_DP_CP_GROUPS``), each made
    on first lookup where the strategy allows; a size Megatron does not make is a ``KeyError``.

    A ``dict`` so that Megatron's own getter, reading ``_HYBRID_DP_CP_GROUPS[group_size]`` after
    ``install()``, makes the group as the façade's getter does.
    """

    def __init__(self, blocks: Mapping[int, GroupList], strategy: str, options: Any) -> None:
        global _made
        super().__init__()
        _made += 1
        self._blocks = dict(blocks)
        self._strategy = strategy
        self._options = options
        self._registry = Registry(dist.get_rank(), f"hybrid-dp-cp/{_made}")

    @property
    def sizes(self) -> tuple[int, ...]:
        """The block sizes, ascending (the whole dp-cp group is not one of them)."""
        return tuple(sorted(self._blocks))

    @property
    def calls(self) -> int:
        """How many ``new_group`` / ``split_group`` calls this rank made for these groups."""
        return self._registry.calls

    def __missing__(self, size: int) -> Any:
        if size not in self._blocks:
            raise FacadeKeyError(
                f"hybrid data-context-parallel groups of size {size!r} do not exist; the sizes "
                f"are {', '.join(map(str, self.sizes)) or 'none'} (and dp * cp, the dp-cp group)"
            )
        self._make(size)
        return self[size]

    def make_all(self) -> None:
        """Make every size now (collective strategies, or ``hybrid_groups="eager"``)."""
        for size in self.sizes:
            if size not in self:
                self._make(size)

    def _make(self, size: int) -> None:
        channel = Channel(f"hybrid-dp-cp-{size}", False, None, None, options=self._options)
        blocks = self._blocks[size]
        rank = self._registry.rank
        if self._strategy == "split":
            self._registry.split([list(b) for b in blocks], channel)
        elif self._strategy == "all":
            with no_stray_entry():
                for block in blocks:
                    self._registry.new_all(tuple(block), channel)
        mine = blocks.ranks_of(rank)
        if mine is None:  # pragma: no cover - the blocks cover every rank of the world
            raise TopologyError(f"rank {rank} is in no hybrid group of size {size}")
        if self._strategy not in ("split", "all"):
            self._registry.new_local(tuple(mine), channel)
        self[size] = self._registry.get(key_of(tuple(mine), channel))
        for hook in made_hooks:
            hook(self[size])

    def release(self) -> None:
        """Destroy the groups made; every later lookup is a ``KeyError``."""
        for made in reversed(self._registry.owned):
            release(made)
        self._registry.owned.clear()
        self._registry.groups.clear()
        self._blocks.clear()
        self.clear()


def make(
    blocks: Mapping[int, GroupList], strategy: str, options: Any, eager: bool, whole: Any
) -> None:
    """This rank's hybrid groups of ``blocks`` (:func:`topology.hybrid_cp_groups`), made now
    where ``strategy`` is a collective of every rank or ``eager``, else on first use; ``eager``
    also warms them and ``whole`` (the dp-cp group) up (:func:`warm_up`)."""
    global _current
    release_all()
    made = HybridGroups(blocks, strategy, options)
    if eager or strategy in ("split", "all"):
        try:
            made.make_all()
            if eager:
                warm_up([*(made[size] for size in made.sizes if size > 1), whole])
        except BaseException:
            made.release()
            raise
    _current = made


def warm_up(groups: list[Any]) -> None:
    """Megatron's eager warm-up: a barrier on each of ``groups`` (this rank's hybrid groups
    above size 1, ascending, then the dp-cp group) where the default group is NCCL, whose
    communicators torch makes on first use; nothing elsewhere (gloo's connect when made).

    Transcribed from Megatron's ``parallel_state.py:945-953`` in PR #6479 (986bf45787)::

        for group_size in group_sizes:   # the sizes made, then dp * cp
            if group_size == 1:
                continue
            group = get_dynamic_data_context_parallel_groups(group_size=group_size)
            torch.distributed.barrier(group=group, device_ids=[torch.cuda.current_device()])
            torch.cuda.synchronize()

    SPMD contract: every rank calls it with its own groups of the same sizes, in that order.
    """
    if "nccl" not in str(dist.get_backend()):
        return
    for made in groups:
        dist.barrier(group=made, device_ids=[torch.cuda.current_device()])
        torch.cuda.synchronize()


def current() -> HybridGroups | None:
    """The hybrid groups of the live ``initialize_model_parallel`` (None without them)."""
    return _current


def group(size: object) -> Any:
    """This rank's hybrid group of ``size`` (made now if lazy).

    Raises:
        FacadeKeyError: no such size, or hybrid context parallelism is off (Megatron's
            ``KeyError``).
    """
    if _current is None:
        raise FacadeKeyError(
            f"hybrid data-context-parallel groups of size {size!r} do not exist: pass "
            "hybrid_context_parallel=True to initialize_model_parallel to make them"
        )
    return _current[size]  # type: ignore[index]


def release_all() -> None:
    """Destroy the hybrid groups (``destroy_model_parallel``)."""
    global _current
    made, _current = _current, None
    if made is not None:
        made.release()
