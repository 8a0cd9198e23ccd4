"""ProcessGroups: a Topology's (or any Grid's) groups as torch.distributed process groups."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.distributed_c10d import default_pg_timeout

from topology import AxisGroups, Grid, Topology, TopologyError

from . import _mesh, _world_mesh
from ._agreement import DEFAULT_ARRIVAL, Proposal, agree, arrival_deadline, barrier, fingerprint
from ._creation import (
    STRATEGIES,
    Registry,
    backend_problem,
    create_all,
    create_local,
    create_split,
    resolve_strategy,
)
from ._creation_plan import DEFAULT_GLOO, Channel, Settings, key_of, local_plan, shown

__all__ = [
    "SINGLE",
    "ProcessGroups",
    "describe",
    "hand_over",
    "join",
    "refuse",
    "release",
    "require_initialized",
    "restart_counts",
    "retire",
]

_generation = 0  # how many times this process ran ProcessGroups.create (keys the store)
_generation_world: object = None  # the default group those calls were made in
_verifications = 0  # how many times this process ran ProcessGroups.verify
SINGLE = object()  # a singleton group, made on first use without any collective
_CREATE = "ProcessGroups.create"
_DONE = "the end of ProcessGroups.create (every rank made its groups)"


def _any_backend(name: str) -> str | None:
    """No backend is refused here (``check_backends=False``: torch decides)."""
    return None


def _next_generation() -> int:
    """This call's number among the ``create`` calls in the current default group (0 first):
    a new default group (a job that grew back, say) starts again, as every member's does."""
    global _generation, _generation_world
    world = dist.group.WORLD
    if world is not _generation_world:
        _generation, _generation_world = 0, world
    _generation += 1
    return _generation - 1


def require_initialized(what: str) -> None:
    """Raise ``TopologyError`` unless torch.distributed's default group exists."""
    if not dist.is_available() or not dist.is_initialized():
        raise TopologyError(
            "torch.distributed is not initialized; call "
            f"torch.distributed.init_process_group(...) on every rank before {what}"
        )


def describe(settings: Settings, strategy: str) -> dict[str, str]:
    """What must be equal on every rank, as short strings (compared and quoted in messages)."""
    facts = {
        "topology": repr(settings.topology),
        "strategy": repr(strategy),
        "kinds": repr(tuple(c.kind for c in settings.channels if not c.gloo and not c.copy)),
        "gloo companions": repr(tuple(c.kind for c in settings.channels if c.gloo)),
    }
    copies = tuple(c.kind for c in settings.channels if c.copy)
    if copies:
        facts["independent copies"] = repr(copies)
    alone = tuple(c.kind for c in settings.channels if c.alone)
    if alone:
        facts["separate kinds"] = repr(alone)
    for channel in settings.channels:
        if channel.gloo or channel.copy:
            continue
        if channel.options is not None:
            facts[f"pg_options for {channel.kind}"] = type(channel.options).__name__
        if channel.backend is not None:
            facts[f"backend for {channel.kind}"] = repr(channel.backend)
        if channel.timeout is not None:
            facts[f"timeout for {channel.kind}"] = str(channel.timeout)
    return facts


def join(
    space: str,
    settings: Settings | None,
    strategy: str,
    problem: TopologyError | None,
    deadline: timedelta = DEFAULT_ARRIVAL,
    what: str = _CREATE,
) -> Settings:
    """Meet every rank (see :mod:`._agreement`) and return ``settings`` once all agree.

    ``problem`` is this rank's validation error (then ``settings`` is None): every rank raises.
    """
    if problem is not None or settings is None:
        mine = Proposal(0, {}, str(problem))
    else:
        facts = describe(settings, strategy)
        mine = Proposal(fingerprint(facts), facts)
    try:
        agree(space, mine, deadline, what, same_group_count=strategy == "all")
    except TopologyError as error:
        if problem is not None:
            raise error from problem
        raise
    if settings is None:  # pragma: no cover - agree raised for this rank's problem
        raise TopologyError(f"{what} found no settings to create")
    return settings


def refuse(problem: TopologyError) -> NoReturn:
    """Make every rank raise one ``TopologyError`` that names this rank and quotes ``problem``.

    For callers (the façades) that find an argument invalid before ``create``: this rank still
    takes part in the agreement of the ``create`` call the other ranks are making, so nobody
    waits for it. In a world of one rank (or under ``fake``) ``problem``'s message is raised as is.
    SPMD contract: call where the other ranks call ``ProcessGroups.create``.
    """
    require_initialized(_CREATE)
    generation = _next_generation()
    try:
        deadline = arrival_deadline(None)
    except TopologyError:
        deadline = DEFAULT_ARRIVAL
    join(f"create/{generation}", None, "", problem, deadline)
    raise problem  # pragma: no cover - join raises for a problem


def restart_counts() -> None:
    """Count ``create`` and ``verify`` calls from 0 again: they key the default store, and a new
    default group (a grown world, :func:`topology_torch.recovery.grow`) has a fresh one in which
    its joining processes, which never called them, count from 0 too."""
    global _generation, _verifications
    _generation = _verifications = 0


def _default_timeout() -> timedelta | None:
    """The default group's timeout, when torch tells it (gloo and NCCL do)."""
    try:
        default = dist.distributed_c10d._get_default_group()
        device = torch.device("cuda" if "nccl" in str(dist.get_backend()) else "cpu")
        wait = default._get_backend(device).options._timeout
    except Exception:  # another backend, or a torch without these internals
        return None
    return wait if isinstance(wait, timedelta) else None


def _unagreed_strategy(strategy: object) -> str:
    """The strategy of ``create(agree=False)``: ``all`` (``auto`` means it), asking torch nothing.

    ``local`` and ``split`` depend on the default group (its backend, a bound device), which a
    creation without agreement does not consult.
    """
    if not isinstance(strategy, str) or strategy not in STRATEGIES:
        raise TopologyError(
            f"strategy {shown(strategy)} is not known; "
            f"use one of {', '.join(map(repr, STRATEGIES))}"
        )
    if strategy not in ("auto", "all"):
        raise TopologyError(
            f"strategy {strategy!r} needs the agreement round; with agree=False use "
            "strategy='all' or 'auto' (every rank calls new_group for every group)"
        )
    return "all"


def release(group: Any) -> None:
    """Destroy ``group`` unless torch no longer knows it (the whole world was destroyed first,
    say, or the group never came from torch): there is nothing left to free then."""
    if group in dist.distributed_c10d._world.pg_map:
        dist.destroy_process_group(group)


def _creation_deadline(settings: Settings, deadline: timedelta) -> timedelta:
    """How long to wait for the slowest rank to finish creating: its groups' own timeouts."""
    waits = [c.timeout for c in settings.channels if c.timeout is not None]
    return max([deadline, *waits]) if waits else max(deadline, default_pg_timeout)


def _new_world_groups(plan: list[Any], registry: Registry) -> None:
    """Without agreement, a group of every rank gets its own communicator (is it the default
    group? that needs the default group's backend and timeout, which nobody asked): one
    ``new_group`` per distinct one, in channel order, on every rank (each is a member)."""
    for channel, ranks, action in plan:
        if action == "world" and key_of(ranks, channel) not in registry.groups:
            registry.new_all(ranks, channel)


class ProcessGroups:
    """The torch process groups of one :class:`~topology.Topology` (or any
    :class:`~topology.Grid`, through :class:`~topology.AxisGroups`), as seen by this rank.

    Build it with :meth:`create`. Identical rank sets share one communicator (with cp=1 the
    ``dp-cp`` group *is* the ``dp`` group), a group equal to the whole default group (with its
    backend and timeout, and no ``pg_options``) is the default group, and a singleton group
    costs no collective: it is made on first use, by this rank alone
    (``new_group([rank], use_local_synchronization=True)``), and then serves every kind whose
    group is just this rank.

    >>> import torch.distributed as dist  # doctest: +SKIP
    >>> groups = ProcessGroups.create(Topology(dist.get_world_size(), tp=2))  # doctest: +SKIP
    >>> dist.all_reduce(x, group=groups.group("tp"))  # doctest: +SKIP

    DeepSpeed's way, any axis names: a Grid's kinds are its axes and the sets of them asked for.

    >>> grid = Grid.from_sizes(pipe=2, data=2, model=2)  # doctest: +SKIP
    >>> layout = AxisGroups(grid, kinds=("data", "pipe", "model-pipe"))  # doctest: +SKIP
    >>> groups = ProcessGroups.create(layout)  # doctest: +SKIP
    >>> groups.group("pipe-model"), groups.device_mesh("pipe", "data")  # doctest: +SKIP
    """

    def __init__(
        self,
        settings: Settings,
        strategy: str,
        rank: int,
        slots: dict[Channel, Any],
        registry: Registry,
    ) -> None:
        self._settings = settings
        self._strategy = strategy
        self._rank = rank
        self._slots = slots
        self._registry = registry
        self._channels = {(c.kind, c.gloo, c.copy): c for c in settings.channels}
        self._names: dict[str, str] = {}  # kind name as asked -> canonical name (a cache)
        self._destroyed = False

    # -- creation ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        topology: Topology | AxisGroups | Grid,
        *,
        kinds: Iterable[str] | None = None,
        backend: str | None = None,
        backends: Mapping[str, str | None] | None = None,
        timeout: timedelta | Mapping[str, timedelta] | None = None,
        gloo: Iterable[str] = DEFAULT_GLOO,
        strategy: str = "auto",
        arrival_timeout: timedelta | None = None,
        independent: Iterable[str] = (),
        separate: Iterable[str] = (),
        pg_options: Mapping[str, Any] | None = None,
        agree: bool = True,
        check_backends: bool = True,
    ) -> ProcessGroups:
        """Create the torch groups of ``topology`` that this rank belongs to.

        SPMD contract: call on every rank of the (initialised) default group, with equal
        arguments, in the same order as every other creation of process groups.

        Lifecycle (see :mod:`topology_torch._agreement`): every rank first validates its
        arguments locally, then all ranks meet in the default store and exchange a fingerprint
        of their arguments (or their validation error) before any group is made. An invalid
        argument on any rank, or ranks whose arguments differ, make *every* rank raise the same
        ``TopologyError`` naming the ranks and what differs. A rank that has not called
        ``create`` within ``arrival_timeout`` is named in a ``TopologyError`` on the others
        (instead of torch's 30-minute timeout). ``create`` returns only once every rank has
        made all of its groups, so ``destroy()`` right after it never races a slower member.
        ``agree=False`` skips all of this (see below).

        Args:
            topology: the layout; its ranks are global ranks of the default group. A
                :class:`~topology.Topology` offers Megatron's kinds; a :class:`~topology.Grid`
                offers each of its axes, and :class:`~topology.AxisGroups` any sets of axes
                (``"pipe-model"``), under your own axis names.
            kinds: the kinds to create (default: all of ``topology.kinds``; Megatron names work).
            backend: backend of every group (default: the default group's).
            backends: per-kind backends, e.g. ``{"pp": "gloo"}``.
            timeout: one ``timedelta`` or a ``{kind: timedelta}`` mapping.
            gloo: kinds that also get a gloo companion group (Megatron's distributed optimizer
                wants one for ``dp-cp``); a gloo group is its own companion. The default is
                ``("dp-cp",)`` for a Topology and none for a Grid or AxisGroups.
            strategy: ``"local"``: each rank calls ``new_group(use_local_synchronization=True)``
                once per distinct group it belongs to (calls do not grow with the world);
                ``"all"``: every rank calls ``new_group`` for every distinct group in one global
                order (Megatron's way, O(world) calls); ``"split"``: one ``split_group`` per
                kind (NCCL with a bound device); ``"auto"``: split where possible, else local.
            arrival_timeout: how long a rank waits for the others to call ``create``: a positive
                ``timedelta``; default ``$TOPOLOGY_TORCH_ARRIVAL_TIMEOUT`` seconds, else 60 s.
            independent: kinds that also get a second, independent communicator with the same
                ranks (Megatron's separate all-gather group for ``dp-cp``); see
                :meth:`independent_group`.
            separate: kinds whose groups get communicators of their own even where another
                kind has the same ranks (the default shares one communicator per rank set, and
                NCCL runs one communicator's collectives in order: FSDP2 gives all-gather,
                reduce-scatter and all-reduce their own groups so that they overlap).
                ``topology.check(..., separate=...)`` counts the extra communicators.
            pg_options: per-kind torch ``pg_options`` for ``new_group`` (e.g.
                ``{"dp-cp": ProcessGroupNCCL.Options()}``); a kind with options gets its own
                communicator (never shared with another kind, never the default group).
            agree: ``False`` skips the arrival/agreement round and the final barrier: every rank
                must pass identical arguments (nothing checks it); for façades of libraries that
                never checked (ezpz). Every rank then calls ``torch.distributed.new_group`` for
                every group (strategy ``all``; ``auto`` means it) and asks torch only
                ``is_initialized``, ``get_world_size`` and ``get_rank``: a group of every rank is
                a communicator of its own, not the default group, and an invalid argument raises
                on each rank by itself. ``arrival_timeout`` is then only validated.
            check_backends: ``False`` hands ``backend``/``backends`` to torch unchecked (torch
                raises where it cannot make such a group, e.g. NCCL on a CPU-only torch), as
                Megatron's ``HyperCommGrid`` does; the default refuses, before any group is
                made, a backend this process cannot use.

        Raises:
            TopologyError: a bad argument on any rank, a strategy this default group cannot run,
                ranks that called ``create`` differently, or ranks that never arrived.
        """
        require_initialized("ProcessGroups.create")
        generation = _next_generation()  # on every rank, whatever happens next
        problem: TopologyError | None = None
        agreed = agree is not False  # an invalid ``agree`` is reported through the agreement
        if not isinstance(agree, bool):
            problem = TopologyError(f"agree must be True or False, got {shown(agree)}")
        if not isinstance(check_backends, bool):
            problem = problem or TopologyError(
                f"check_backends must be True or False, got {shown(check_backends)}"
            )
        try:
            deadline = arrival_deadline(arrival_timeout)
        except TopologyError as error:
            deadline, problem = DEFAULT_ARRIVAL, problem or error
        settings: Settings | None = None
        chosen = ""
        if problem is None:
            try:
                settings = Settings.build(
                    topology,
                    world_size=dist.get_world_size(),
                    # without agreement the default group is not asked (its backend is unknown)
                    default_backend=str(dist.get_backend()) if agreed else "",
                    kinds=kinds,
                    backend=backend,
                    backends=backends,
                    timeout=timeout,
                    gloo=gloo,
                    independent=independent,
                    separate=separate,
                    pg_options=pg_options,
                    world_timeout=_default_timeout() if agreed else None,
                    unusable=backend_problem if check_backends is not False else _any_backend,
                )
                chosen = resolve_strategy(strategy) if agreed else _unagreed_strategy(strategy)
            except TopologyError as error:
                problem = error
            except Exception as error:  # an argument that breaks while being read
                problem = TopologyError(
                    f"the arguments of ProcessGroups.create could not be read: "
                    f"{type(error).__name__}: {error}"
                )
                problem.__cause__ = error
        if agreed:
            settings = join(f"create/{generation}", settings, chosen, problem, deadline)
        elif problem is not None or settings is None:  # every rank finds the same problem
            raise problem or TopologyError(f"{_CREATE} found no settings to create")
        digest = fingerprint(describe(settings, chosen))
        rank = dist.get_rank()
        registry = Registry(rank, f"{generation}/{digest}")
        plan = local_plan(settings, rank)
        try:
            if chosen == "all":
                create_all(settings, registry)
            elif chosen == "split":
                create_split(settings, registry)
            else:
                create_local(settings, registry, plan)
            if agreed:
                # return only when every member of every new group has it: nobody can destroy a
                # group while a slower member is still connecting to it
                barrier(f"create/{generation}/done", _creation_deadline(settings, deadline), _DONE)
            else:
                _new_world_groups(plan, registry)
        except BaseException:
            for group in reversed(registry.owned):  # leave torch's registry as it was
                release(group)
            raise
        slots: dict[Channel, Any] = {}
        for channel, ranks, action in plan:
            if action == "absent" or ranks is None:
                continue
            if action == "world" and agreed:
                slots[channel] = dist.group.WORLD
            elif action == "single":
                slots[channel] = registry.groups.get(key_of(ranks, channel), SINGLE)
            else:
                slots[channel] = registry.get(key_of(ranks, channel))
        return cls(settings, chosen, rank, slots, registry)

    # -- accessors ----------------------------------------------------------------------------

    @property
    def topology(self) -> Topology | AxisGroups:
        """The layout these groups realise."""
        return self._settings.topology

    @property
    def strategy(self) -> str:
        """The creation strategy used (``auto`` resolved)."""
        return self._strategy

    @property
    def global_rank(self) -> int:
        """This process's rank in the default group (in the new layout after
        :func:`topology_torch.recovery.apply`)."""
        return self._rank

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds created (a subset of ``topology.kinds``, in its order)."""
        return tuple(c.kind for c in self._settings.channels if not c.gloo and not c.copy)

    @property
    def calls(self) -> int:
        """How many ``new_group`` / ``split_group`` calls this rank made (lazy singletons too)."""
        return self._registry.calls

    @property
    def communicators(self) -> int:
        """How many distinct torch groups this rank made and holds."""
        return len({id(g) for g in self._registry.owned})

    def has_group(self, kind: str) -> bool:
        """Whether this rank belongs to a group of ``kind``: only embedding kinds, and ranks
        outside a layout that does not cover the whole default group, can say no."""
        self._channel(kind, gloo=False)
        layout = self.topology
        if not layout.rank_offset <= self._rank < layout.rank_offset + layout.world_size:
            return False
        return layout.has_group(self._rank, kind)

    def group(self, kind: str) -> Any:
        """This rank's torch group of ``kind`` (a Megatron name such as ``"mp"`` works too).

        Raises:
            TopologyError: an unknown or not created kind, or a rank without such a group.
        """
        return self._group(self._channel(kind, gloo=False))

    def gloo_group(self, kind: str) -> Any:
        """This rank's gloo companion group of ``kind`` (the group itself when it is gloo)."""
        channel = self._channel(kind, gloo=True)
        return self._group(channel)

    def independent_group(self, kind: str) -> Any:
        """This rank's second communicator of ``kind``: the same ranks as :meth:`group`, its own
        progress (made when ``kind`` was passed in ``independent=`` to :meth:`create`)."""
        return self._group(self._channel(kind, gloo=False, copy=1))

    def has_independent(self, kind: str) -> bool:
        """Whether ``kind`` got an independent second communicator."""
        name = self._canonical(kind) if isinstance(kind, str) else None
        return (name, False, 1) in self._channels

    def ranks(self, kind: str) -> tuple[int, ...]:
        """The global ranks of this rank's group of ``kind``, in group-rank order."""
        self._channel(kind, gloo=False)
        return self.topology.group_of(self._rank, kind)

    def rank(self, kind: str) -> int:
        """This rank's position in its group of ``kind`` (its coordinate along those axes)."""
        self._channel(kind, gloo=False)
        return self.topology.local_rank(self._rank, kind)

    def size(self, kind: str) -> int:
        """How many ranks one group of ``kind`` holds."""
        self._channel(kind, gloo=False)
        return self.topology.size(kind)

    def verify(self, *, arrival_timeout: timedelta | None = None) -> None:
        """Check that every rank holds these same groups; ``TopologyError`` names the odd ones.

        SPMD contract: call on every rank, in the same order. A rank that does not call it
        within ``arrival_timeout`` (as in :meth:`create`) is named instead of hanging.
        """
        global _verifications
        self._alive()
        count = _verifications
        _verifications += 1
        facts = describe(self._settings, self._strategy)
        agree(
            f"verify/{count}",
            Proposal(fingerprint(facts), facts),
            arrival_deadline(arrival_timeout),
            "ProcessGroups.verify",
            mismatch="hold groups different from those of",
        )

    def device_mesh(self, *axes: str, device_type: str | None = None) -> DeviceMesh:
        """A torch ``DeviceMesh`` over ``axes`` (outermost first) whose groups are ours.

        See :func:`topology_torch._mesh.device_mesh`.
        """
        return _mesh.device_mesh(self, axes, device_type)

    def world_mesh(
        self,
        *dims: str,
        names: Sequence[str] | None = None,
        flatten: Mapping[str, str] | None = None,
        device_type: str | None = None,
    ) -> DeviceMesh:
        """One n-D ``DeviceMesh`` over ``dims`` (outermost first) from which every mesh is a
        slice or a flatten backed by one of our communicators (torch makes no new group).

        ``names`` renames the dimensions (torchtitan's ``"dp_shard"`` for ``"dp-shard"``);
        ``flatten`` registers more flattened meshes by name, ``{"fsdp": "intra-dp-cp"}``.
        See :func:`topology_torch._world_mesh.world_mesh`.
        """
        return _world_mesh.world_mesh(
            self, dims, names=names, flatten=flatten, device_type=device_type
        )

    def destroy(self) -> None:
        """Destroy every group this object made; it cannot be used afterwards.

        SPMD contract: call on every rank, in the same order. The default group is never
        destroyed.
        """
        if self._destroyed:
            return
        self._destroyed = True
        made = {id(g): g for g in self._registry.owned}
        tags = dist.distributed_c10d._world.tags_to_pg
        for group in reversed(list(made.values())):
            tag = dist.distributed_c10d._world.pg_to_tag.get(group)
            release(group)
            # torch leaves an empty list behind under the group's own tag; drop it
            if tag is not None and tag in tags and not tags[tag]:
                del tags[tag]
        self._registry.owned.clear()
        self._registry.groups.clear()
        self._slots.clear()

    def __enter__(self) -> ProcessGroups:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.destroy()

    def __repr__(self) -> str:
        state = "destroyed" if self._destroyed else f"{self.communicators} communicators"
        return f"ProcessGroups({self.topology}, rank {self._rank}, {self._strategy}, {state})"

    # -- internals ----------------------------------------------------------------------------

    def _alive(self) -> None:
        if self._destroyed:
            raise TopologyError(
                f"these process groups of {self.topology} were destroyed; "
                "create new ones with ProcessGroups.create"
            )

    def _channel(self, kind: str, *, gloo: bool, copy: int = 0) -> Channel:
        self._alive()
        if not isinstance(kind, str):
            raise TopologyError(f"kind must be a string like 'tp', got {kind!r}")
        name = self._canonical(kind)
        if name is None:
            raise TopologyError(
                f"unknown kind {kind!r}; valid kinds: {', '.join(self.topology.kinds)}"
            )
        channel = self._channels.get((name, gloo, copy))
        if channel is not None:
            return channel
        if copy:
            raise TopologyError(
                f"kind {kind!r} has no independent communicator; pass "
                f"independent=({name!r},) to create"
            )
        if gloo:
            raise TopologyError(
                f"kind {kind!r} has no gloo companion; pass gloo=({name!r}, ...) to create"
            )
        raise TopologyError(
            f"kind {kind!r} was not created; pass kinds=(..., {name!r}) to create or leave "
            "kinds=None for all"
        )

    def _canonical(self, kind: str) -> str | None:
        """The topology's name for ``kind`` (Megatron names work), None for no kind of it."""
        name = self._names.get(kind)
        if name is None:
            try:
                name = self._names[kind] = self.topology.kind(kind).name
            except TopologyError:
                return None
        return name

    def _group(self, channel: Channel) -> Any:
        slot = self._slots.get(channel)
        if slot is None:
            # the core says why (a middle pipeline stage has no embedding group, ...)
            self.topology.group_of(self._rank, channel.kind)
            raise TopologyError(
                f"rank {self._rank} is outside {self.topology}; it holds no {channel.kind} group"
            )
        if slot is SINGLE:
            slot = self._registry.new_local((self._rank,), channel)
            self._slots[channel] = slot
        return slot


def hand_over(groups: ProcessGroups) -> tuple[Settings, dict[Channel, Any], Registry]:
    """The settings, slots (a copy) and registry of live ``groups``, for a successor (a
    recovery, :func:`topology_torch.recovery.apply`)."""
    groups._alive()
    return groups._settings, dict(groups._slots), groups._registry


def retire(groups: ProcessGroups) -> None:
    """Make ``groups`` unusable without destroying anything: a successor now owns its groups."""
    groups._destroyed = True
    groups._slots.clear()
