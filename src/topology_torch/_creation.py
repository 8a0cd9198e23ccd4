"""How communicators are created: strategies ``all``, ``local`` and ``split`` (private).

Which ones to create is decided in :mod:`._creation_plan` (no torch). Each strategy fills a
:class:`Registry` (communicator key -> torch group) with the groups this rank belongs to. SPMD
contract for every function here: call on every rank of the default group, with equal settings,
in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from topology import TopologyError

from . import _naming
from ._creation_plan import Channel, Key, Settings, global_plan, key_of, kind_plan, shown

__all__ = [
    "STRATEGIES",
    "Registry",
    "backend_problem",
    "create_all",
    "create_local",
    "create_split",
    "no_stray_entry",
    "resolve_strategy",
]

STRATEGIES = ("auto", "all", "local", "split")


def _bound_nccl() -> bool:
    default = dist.distributed_c10d._get_default_group()
    return (
        "nccl" in str(dist.get_backend()) and getattr(default, "bound_device_id", None) is not None
    )


def resolve_strategy(strategy: object) -> str:
    """The strategy to use here: ``auto`` picks split, else local, else all.

    ``split`` needs an NCCL default group bound to a device (torch's ``split_group``); ``local``
    cannot work then (torch splits every new communicator from the default one, which needs all
    ranks), nor with MPI.
    """
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise TopologyError(
            f"strategy {shown(strategy)} is not known; "
            f"use one of {', '.join(map(repr, STRATEGIES))}"
        )
    bound = _bound_nccl()
    backend = str(dist.get_backend())
    local_ok = not bound and backend != "mpi" and _naming.supported()
    if strategy == "auto":
        return "split" if bound else "local" if local_ok else "all"
    if strategy == "split" and not bound:
        raise TopologyError(
            f"strategy 'split' needs an NCCL default group bound to a device, but this one uses "
            f"{backend!r} without a bound device; pass device_id=torch.device('cuda', local_rank) "
            "to init_process_group, or use strategy='local' or 'auto'"
        )
    if strategy == "local" and not local_ok:
        raise TopologyError(
            f"strategy 'local' cannot create groups on this {backend!r} default group"
            f"{' bound to a device' if bound else ''} (non-members must join every creation); "
            "use strategy='auto'"
        )
    return str(strategy)


def backend_problem(name: str) -> str | None:
    """Why backend ``name`` cannot make groups in this process, or None when it can."""
    known = [b for b in dist.Backend.backend_list if b != "undefined"]
    if name not in known:
        return f"torch.distributed knows no such backend; use one of {', '.join(known)}"
    checks = {
        "gloo": (dist.is_gloo_available, "this torch was built without gloo"),
        "mpi": (dist.is_mpi_available, "this torch was built without MPI"),
        "ucc": (dist.is_ucc_available, "this torch was built without UCC"),
        "nccl": (
            lambda: dist.is_nccl_available() and torch.cuda.is_available(),
            "it needs CUDA devices and a torch built with NCCL; use 'gloo' on CPUs",
        ),
        "fake": (
            lambda: False,
            "a fake group needs a fake default group (init_process_group('fake', ...))",
        ),
        "xccl": (
            lambda: bool(getattr(dist, "is_xccl_available", lambda: False)()),
            "it needs XPU devices and a torch built with XCCL",
        ),
    }
    available, reason = checks.get(name, (lambda: True, ""))
    return None if available() else reason


class Registry:
    """The torch groups one rank holds, keyed by (ranks, backend, timeout), and what it made."""

    def __init__(self, rank: int, generation: str) -> None:
        self.rank = rank
        self.generation = generation
        self.groups: dict[Key, Any] = {}
        self.owned: list[Any] = []
        self.calls = 0

    def keep(self, key: Key, group: Any) -> None:
        """Remember a group this rank made (and must destroy)."""
        if group is None or group is dist.GroupMember.NON_GROUP_MEMBER:
            return
        self.owned.append(group)
        self.groups.setdefault(key, group)

    def new_all(self, ranks: tuple[int, ...], channel: Channel) -> None:
        """``new_group`` entered by every rank (torch's sequential names)."""
        self.calls += 1
        group = dist.new_group(
            list(ranks),
            timeout=channel.timeout,
            backend=channel.backend,
            pg_options=channel.options,
            group_desc=_describe(channel),
        )
        if self.rank in ranks:
            self.keep(key_of(ranks, channel), group)

    def new_local(self, ranks: tuple[int, ...], channel: Channel) -> Any:
        """``new_group`` entered by the members only, under a name every member agrees on."""
        key = key_of(ranks, channel)
        if key in self.groups:
            return self.groups[key]
        self.calls += 1
        # a copy, or a group with its own options, is another communicator of the same ranks
        variant = f"/copy{channel.copy}" if channel.copy else ""
        if channel.options is not None:
            variant += f"/options-{channel.kind}"
        name = _naming.group_name(
            self.generation + variant, ranks, channel.backend, channel.timeout
        )
        with _naming.named(name):
            group = dist.new_group(
                list(ranks),
                timeout=channel.timeout,
                backend=channel.backend,
                pg_options=channel.options,
                use_local_synchronization=True,
                group_desc=_describe(channel),
            )
        self.keep(key, group)
        return group

    def split(self, groups: list[list[int]], channel: Channel) -> None:
        """One ``split_group`` of the default group into ``groups`` (NCCL with a bound device)."""
        self.calls += 1
        group = dist.split_group(
            split_ranks=groups,
            timeout=channel.timeout,
            pg_options=channel.options,
            group_desc=_describe(channel),
        )
        mine = next((tuple(g) for g in groups if self.rank in g), None)
        if mine is not None:
            self.keep(key_of(mine, channel), group)

    def get(self, key: Key) -> Any:
        """The group made for ``key``."""
        return self.groups[key]


def _describe(channel: Channel) -> str:
    copy = f":copy{channel.copy}" if channel.copy else ""
    return f"topology:{channel.kind}{':gloo' if channel.gloo else ''}{copy}"


@contextmanager
def no_stray_entry() -> Iterator[None]:
    """torch's ``new_group`` files a non-member's result under ``pg_group_ranks[-100]``
    (``NON_GROUP_MEMBER``); drop that entry again unless it was there before."""
    ranks: dict[Any, Any] = dist.distributed_c10d._world.pg_group_ranks
    stray: Any = dist.GroupMember.NON_GROUP_MEMBER
    present = stray in ranks
    try:
        yield
    finally:
        if not present:
            ranks.pop(stray, None)


def create_all(settings: Settings, registry: Registry) -> None:
    """Every rank calls ``new_group`` for every distinct non-singleton group, in one order."""
    with no_stray_entry():
        for channel, ranks in global_plan(settings):
            registry.new_all(ranks, channel)


def create_local(settings: Settings, registry: Registry, plan: list[Any]) -> None:
    """Each rank calls ``new_group`` once per distinct group it belongs to, members only."""
    for channel, ranks, action in plan:
        if action == "new":
            registry.new_local(ranks, channel)


def create_split(settings: Settings, registry: Registry) -> None:
    """One ``split_group`` per kind (and one for all singletons); others fall back to ``all``."""
    topology = settings.topology
    singles: set[tuple[str | None, timedelta | None]] = set()
    for channel, action in kind_plan(settings):
        if action == "single" and (channel.backend, channel.timeout) not in singles:
            singles.add((channel.backend, channel.timeout))
            if channel.backend is None:
                registry.split([[r] for r in range(settings.world_size)], channel)
        if action != "new":
            continue
        groups = [list(g) for g in topology.groups(channel.kind)]
        if channel.backend is None:
            registry.split(groups, channel)
        else:
            with no_stray_entry():
                for ranks in groups:
                    registry.new_all(tuple(ranks), channel)
