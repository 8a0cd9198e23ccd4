"""Which communicators a topology needs, deduplicated, in one global order (private, no torch).

A *channel* is one ``(kind, gloo, copy)``: the main group of a kind, its gloo companion, or an
independent copy (``copy=1``, Megatron's separate all-gather communicator). A communicator is
keyed by ``(ranks, backend, timeout, copy, options)``: two channels whose groups have the same
ranks, backend, timeout, copy and ``pg_options`` object share one communicator, unless one of
them is ``separate`` (its kind then stands in for the copy: its communicators are its own, so
its collectives never queue behind another kind's on one NCCL communicator). Singleton groups
and groups equal to the whole default group (with its backend and timeout) need no collective and
are planned apart.

>>> from topology import Topology
>>> settings = Settings.build(Topology(8, tp=2, pp=2), world_size=8, default_backend="gloo")
>>> [(c.kind, action) for c, _, action in local_plan(settings, 0)][:5]
[('dp-cp', 'new'), ('dp-cp', 'same'), ('dp', 'same'), ('cp', 'single'), ('tp-pp', 'new')]
>>> len(list(global_plan(settings)))
16
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any, Literal, cast

import attrs

from topology import AxisGroups, Grid, Topology, TopologyError

__all__ = [
    "DEFAULT_GLOO",
    "Action",
    "Channel",
    "Key",
    "Settings",
    "global_plan",
    "key_of",
    "kind_plan",
    "local_plan",
    "shown",
]

Action = Literal["new", "same", "single", "world", "absent"]
DEFAULT_GLOO = ("dp-cp",)
"""``gloo``'s default: a Topology's ``dp-cp`` gets a gloo companion; an AxisGroups' kinds none."""
Key = tuple[tuple[int, ...], str | None, timedelta | None, int | str, int | None]


@attrs.frozen
class Channel:
    """One group a caller can ask for: the ``kind``'s main group, (``gloo``) its companion, or
    (``copy=1``) an independent communicator with the main group's ranks."""

    kind: str
    gloo: bool
    backend: str | None  # None: the default group's backend
    timeout: timedelta | None  # None: torch's default for the backend
    copy: int = 0
    # torch ``pg_options`` for new_group (e.g. ProcessGroupNCCL.Options); compared by identity
    options: Any = attrs.field(default=None, eq=False)
    # True: this kind's groups share a communicator with no other kind (``separate=``)
    alone: bool = False

    def same_settings(self, other: Channel) -> bool:
        """Whether groups of both channels with equal ranks may share one communicator."""
        return (
            (self.backend, self.timeout, self.copy)
            == (
                other.backend,
                other.timeout,
                other.copy,
            )
            and self.options is other.options
            and not (self.alone or other.alone)
        )


def _kind_names(topology: Topology | AxisGroups, names: object, argument: str) -> tuple[str, ...]:
    if isinstance(names, str):
        raise TopologyError(
            f"{argument} must be a sequence of kinds, got the string {names!r}; "
            f"write {argument}=({names!r},)"
        )
    if isinstance(names, Mapping) or not isinstance(names, Iterable):
        raise TopologyError(
            f"{argument} must be a sequence of kinds such as ('tp', 'pp'), got {shown(names)}"
        )
    chosen: list[str] = []
    for name in names:
        kind = _kind_name(topology, name)
        if kind is None:
            raise TopologyError(
                f"{argument} names unknown kind {shown(name)}; "
                f"valid kinds: {', '.join(topology.kinds)}"
            )
        if kind not in chosen:
            chosen.append(kind)
    return tuple(k for k in topology.kinds if k in chosen)


def _kind_name(topology: Topology | AxisGroups, name: object) -> str | None:
    """The canonical name of kind ``name`` of ``topology`` (Megatron names work), else None."""
    if not isinstance(name, str):
        return None
    try:
        return topology.kind(name).name
    except TopologyError:
        return None


def shown(value: object) -> str:
    """``repr(value)``, cut to a readable length (messages never dump a huge argument)."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__ must not hide the real problem
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= 80 else f"{text[:77]}..."


def _check_timeout(value: object) -> None:
    if value is None:
        return
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise TopologyError(
            f"timeout must be a positive datetime.timedelta (or a mapping of kinds to one), "
            f"got {shown(value)}; e.g. timeout=timedelta(minutes=10)"
        )


def _per_kind(
    topology: Topology | AxisGroups, value: object, argument: str
) -> tuple[object, dict[str, object]]:
    """Split ``value`` (one setting or a ``{kind: setting}`` mapping) into (default, overrides)."""
    if isinstance(value, Mapping):
        overrides = {}
        for name, setting in value.items():
            if not isinstance(name, str):
                raise TopologyError(
                    f"{argument} maps kinds to settings, but a key is {shown(name)}; "
                    f"use kind names such as {{'pp': ...}}"
                )
            (kind,) = _kind_names(topology, (name,), argument)
            overrides[kind] = setting
        return None, overrides
    return value, {}


@attrs.frozen
class Settings:
    """Everything that decides which communicators exist; equal on every rank (SPMD)."""

    topology: Topology | AxisGroups
    world_size: int  # of the default group
    default_backend: str
    channels: tuple[Channel, ...]
    default_timeout: timedelta | None = None  # of the default group (None: unknown)

    @classmethod
    def build(
        cls,
        topology: Topology | AxisGroups | Grid,
        *,
        world_size: int,
        default_backend: str,
        kinds: Iterable[str] | None = None,
        backend: str | None = None,
        backends: Mapping[str, str | None] | None = None,
        timeout: timedelta | Mapping[str, timedelta] | None = None,
        gloo: Iterable[str] | None = DEFAULT_GLOO,
        independent: Iterable[str] = (),
        separate: Iterable[str] = (),
        pg_options: Mapping[str, Any] | None = None,
        world_timeout: timedelta | None = None,
        unusable: Callable[[str], str | None] = lambda name: None,
    ) -> Settings:
        """Validate the arguments of ``ProcessGroups.create`` and list the channels in order.

        ``unusable(name)`` says why a backend cannot be used here (None when it can);
        ``world_timeout`` is the default group's (a group of every rank with that timeout and
        the default backend *is* the default group).
        """
        if isinstance(topology, Grid):
            topology = AxisGroups(topology)
        if not isinstance(topology, Topology | AxisGroups):
            raise TopologyError(
                f"topology must be a topology.Topology, Grid or AxisGroups, got "
                f"{type(topology).__name__}; build one with Topology(world_size, tp=..., pp=...) "
                "or Grid.from_sizes(pipe=..., data=...)"
            )
        if gloo is DEFAULT_GLOO and isinstance(topology, AxisGroups):
            gloo = ()
        last = topology.rank_offset + topology.world_size
        if last > world_size:
            raise TopologyError(
                f"topology ranks {topology.rank_offset}..{last - 1} do not fit the default group "
                f"of {world_size} ranks; use a topology of at most {world_size} ranks"
            )
        chosen = topology.kinds if kinds is None else _kind_names(topology, kinds, "kinds")
        companions = () if gloo is None else _kind_names(topology, gloo, "gloo")
        copies = _kind_names(topology, independent, "independent")
        alone = _kind_names(topology, separate, "separate")
        options: Mapping[str, object] = {}
        if pg_options is not None:
            if not isinstance(pg_options, Mapping):
                raise TopologyError(
                    f"pg_options must map kinds to torch pg_options, got {shown(pg_options)}; "
                    "e.g. pg_options={'dp-cp': ProcessGroupNCCL.Options()}"
                )
            options = _per_kind(topology, pg_options, "pg_options")[1]
        overrides: Mapping[str, object] = {}
        if backends is not None:
            if not isinstance(backends, Mapping):
                raise TopologyError(
                    f"backends must map kinds to backend names, got {shown(backends)}; "
                    "e.g. backends={'pp': 'gloo'}"
                )
            overrides = _per_kind(topology, backends, "backends")[1]
        default_timeout, timeouts = _per_kind(topology, timeout, "timeout")
        for value in (default_timeout, *timeouts.values()):
            _check_timeout(value)

        def normal(name: object, argument: str) -> str | None:
            if name is None:
                return None
            if not isinstance(name, str):
                raise TopologyError(
                    f"{argument} must be a backend name like 'gloo' or None, got {shown(name)}"
                )
            # under the fake backend (creation benchmarks) every group is a fake group
            if default_backend == "fake" or name.lower() == default_backend.lower():
                return None
            problem = unusable(name.lower())
            if problem is not None:
                raise TopologyError(f"{argument} {name!r} cannot be used here: {problem}")
            return name.lower()

        main = normal(backend, "backend")
        per_kind = {kind: normal(name, f"backends[{kind!r}]") for kind, name in overrides.items()}
        channels: list[Channel] = []
        for kind in chosen:
            wait = cast("timedelta | None", timeouts.get(kind, default_timeout))
            backend_of_kind = per_kind.get(kind, main)
            option = options.get(kind)
            channels.append(
                Channel(kind, False, backend_of_kind, wait, options=option, alone=kind in alone)
            )
            if kind in companions:
                channels.append(Channel(kind, True, normal("gloo", "gloo"), wait))
            if kind in copies:
                channels.append(Channel(kind, False, backend_of_kind, wait, 1, option))
        return cls(topology, world_size, default_backend, tuple(channels), world_timeout)

    def classify(self, ranks: tuple[int, ...], channel: Channel) -> Action | None:
        """``single`` / ``world`` when no new communicator can be needed, else None."""
        if len(ranks) == 1:
            return "single"
        if (
            channel.backend is None
            and channel.timeout in (None, self.default_timeout)
            and channel.copy == 0
            and channel.options is None
            and not channel.alone
            and len(ranks) == self.world_size
            and ranks[0] == 0
        ):
            return "world"
        return None


def key_of(ranks: tuple[int, ...], channel: Channel) -> Key:
    """The identity of a communicator: ranks, backend, timeout, copy and options (by identity)."""
    options = None if channel.options is None else id(channel.options)
    copy: int | str = channel.kind if channel.alone else channel.copy
    return (ranks, channel.backend, channel.timeout, copy, options)


def local_plan(
    settings: Settings, rank: int
) -> list[tuple[Channel, tuple[int, ...] | None, Action]]:
    """Per channel, the group holding ``rank`` and what to do: new, same (reuse), single, world.

    Cost: O(#channels * group size), independent of the world size.
    """
    topology = settings.topology
    inside = topology.rank_offset <= rank < topology.rank_offset + topology.world_size
    seen: set[Key] = set()
    plan: list[tuple[Channel, tuple[int, ...] | None, Action]] = []
    for channel in settings.channels:
        if not inside or not topology.has_group(rank, channel.kind):
            plan.append((channel, None, "absent"))
            continue
        ranks = topology.group_of(rank, channel.kind)
        action = settings.classify(ranks, channel)
        if action is None:
            key = key_of(ranks, channel)
            action = "same" if key in seen else "new"
            seen.add(key)
        plan.append((channel, ranks, action))
    return plan


def global_plan(settings: Settings) -> Iterator[tuple[Channel, tuple[int, ...]]]:
    """Every distinct communicator to create, in one global order (kinds order, then groups).

    A group is a duplicate when an earlier channel with the same backend and timeout holds the
    same ranks; that is checked with ``group_of`` on the earlier kinds (O(kinds * group size) per
    group), so nothing of size O(world) is stored.
    """
    topology = settings.topology
    done: list[Channel] = []
    for channel in settings.channels:
        earlier = [
            c
            for c in done
            if c.same_settings(channel) and topology.size(c.kind) == topology.size(channel.kind)
        ]
        for ranks in topology.groups(channel.kind):
            if settings.classify(ranks, channel) is not None:
                continue
            if any(_holds(topology, c.kind, ranks) for c in earlier):
                continue
            yield channel, ranks
        done.append(channel)


def _holds(topology: Topology | AxisGroups, kind: str, ranks: tuple[int, ...]) -> bool:
    """Whether ``ranks`` is a group of ``kind`` (in any position of its sequence)."""
    return topology.has_group(ranks[0], kind) and topology.group_of(ranks[0], kind) == ranks


def kind_plan(settings: Settings) -> list[tuple[Channel, Action | Channel]]:
    """Per channel, for one collective call per kind (``split``): its action or the earlier
    channel with the same groups (that channel's communicator is reused).

    Two kinds have the same groups when each group of one is a group of the other, whatever their
    order in the sequences: every rank then gets the same rank set from both, which is what
    ``Communicators.shared`` of the core's pre-launch check reports.
    """
    topology = settings.topology
    plan: list[tuple[Channel, Action | Channel]] = []
    for channel in settings.channels:
        groups = topology.groups(channel.kind)
        first = settings.classify(groups[0], channel)
        if first is not None:
            plan.append((channel, first))
            continue
        twin: Action | Channel = "new"
        for earlier, action in plan:
            if action != "new" or not earlier.same_settings(channel):
                continue
            if len(topology.groups(earlier.kind)) == len(groups) and all(
                _holds(topology, earlier.kind, ranks) for ranks in groups
            ):
                twin = earlier
                break
        plan.append((channel, twin))
    return plan
