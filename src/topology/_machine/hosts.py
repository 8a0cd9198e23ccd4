"""Hosts, tiers and launcher orders: the parts an :class:`~.allocation.Allocation` is made of
(private; see :mod:`topology._machine.allocation` for the model and the orders' sources).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Literal

import attrs

from .._args import as_float, check_size, format_choices, show
from .._errors import TopologyError
from .._fields import flag, text
from .hostlist import natural_key, slurm_key
from .textfile import check_host_name

__all__ = [
    "LAUNCHER_ORDERS",
    "MAX_GPUS_PER_HOST",
    "NODE_TIER",
    "Host",
    "LauncherOrder",
    "Tier",
    "as_tuple",
    "check_gpus",
    "gpu_counts",
    "launcher_order",
    "tier_index",
]

LauncherOrder = Literal["listed", "lexicographic", "natural", "slurm"]
LAUNCHER_ORDERS: tuple[LauncherOrder, ...] = ("listed", "lexicographic", "natural", "slurm")

NODE_TIER = "node"
"""The built-in tier every rank map has first (a group crosses it when it spans two hosts); no
:class:`Tier` may take its name, or a crossing table would hold two columns of one name."""

MAX_GPUS_PER_HOST = 1 << 16
"""More GPUs than any host has; keeps a typo (``gpus = 80000``) an error."""

_KEYS: dict[str, Callable[[str], Any]] = {
    "lexicographic": lambda name: name,
    "natural": natural_key,
    "slurm": slurm_key,
}


def as_tuple(value: Any) -> Any:
    """A list or tuple as a tuple; anything else unchanged, for the validator to name."""
    return tuple(value) if isinstance(value, list | tuple) else value


def _name(owner: object, attribute: Any, value: Any) -> None:
    text(owner, attribute, value)
    if not value.strip() or value != value.strip():
        raise TopologyError(
            f"{type(owner).__name__}.{attribute.name} must be a non-empty name without "
            f"surrounding blanks, got {show(value)}"
        )


def _host_name(owner: object, attribute: Any, value: Any) -> None:
    """A host's name follows the one rule every reader and writer applies (a hostfile word)."""
    _name(owner, attribute, value)
    check_host_name(value, "Host.name")


def _tier_name(owner: object, attribute: Any, value: Any) -> None:
    _name(owner, attribute, value)
    if value == NODE_TIER:
        raise TopologyError(
            f"Tier.name {show(value)} is the built-in tier of hosts (a group crosses it when it "
            f"spans two hosts), so a tier cannot take it; rename the tier, e.g. 'node-group'"
        )


def _optional_amount(owner: object, attribute: Any, value: Any) -> None:
    if value is None:
        return
    number = as_float(value)  # an int past a float stays an int, which is refused here
    if type(number) is not float or not math.isfinite(number) or number < 0:
        raise TopologyError(
            f"{type(owner).__name__}.{attribute.name} must be a finite number >= 0 or None, "
            f"got {show(value)}"
        )
    if attribute.name == "bandwidth" and value == 0:
        raise TopologyError(f"Tier.bandwidth must be positive, got {show(value)}")


def _gpus(owner: object, attribute: Any, value: Any) -> None:
    check_gpus("Host.gpus", value)


def _domains(owner: object, attribute: Any, value: Any) -> None:
    if not isinstance(value, tuple) or not all(
        d is None or (isinstance(d, str) and d.strip()) for d in value
    ):
        raise TopologyError(
            f"Host.domains must be a tuple of domain names (non-empty strings) or None, "
            f"got {show(value)}"
        )


@attrs.frozen
class Tier:
    """One level of the hierarchy above the hosts: its name, speed, and whether it is NVLink.

    ``nvlink`` marks a tier whose domains share one NVLink fabric (an NVL72 rack); without one,
    the host is the NVLink domain. The name ``node`` is taken by the built-in tier of hosts
    (:data:`NODE_TIER`) and refused, so every reader refuses a file that names a tier so.

    >>> Tier("leaf", bandwidth=50e9, latency=10e-6)
    Tier(name='leaf', bandwidth=50000000000.0, latency=1e-05, nvlink=False)
    """

    name: str = attrs.field(validator=_tier_name)
    bandwidth: float | None = attrs.field(default=None, validator=_optional_amount)
    latency: float | None = attrs.field(default=None, validator=_optional_amount)
    nvlink: bool = attrs.field(default=False, validator=flag)


@attrs.frozen
class Host:
    """A host: its name, how many GPUs the launcher runs ranks on, and its domain per tier.

    ``domains[t]`` names the domain of tier ``t`` (innermost first), ``None`` when unknown. The
    name follows the rule the readers apply (``check_host_name``): a word of printable characters
    without blanks, ``#``, ``,``, ``[``, ``]`` or ``=``, as hostfiles and launchers read it.
    """

    name: str = attrs.field(validator=_host_name)
    gpus: int = attrs.field(validator=_gpus)
    domains: tuple[str | None, ...] = attrs.field(
        default=(), converter=as_tuple, validator=_domains
    )


def launcher_order(hosts: tuple[Host, ...], order: str) -> tuple[Host, ...]:
    """``hosts`` in the order launcher ``order`` numbers them (one of :data:`LAUNCHER_ORDERS`).

    >>> names = [Host(n, 1) for n in ("node66", "node7", "node70", "node8")]
    >>> [h.name for h in launcher_order(tuple(names), "lexicographic")]
    ['node66', 'node7', 'node70', 'node8']
    >>> [h.name for h in launcher_order(tuple(names), "natural")]
    ['node7', 'node8', 'node66', 'node70']
    """
    if order == "listed":
        return hosts
    key = _KEYS.get(order) if isinstance(order, str) else None
    if key is None:
        raise TopologyError(
            f"launcher order must be one of {format_choices(LAUNCHER_ORDERS)}, got {show(order)}"
        )
    return tuple(sorted(hosts, key=lambda host: key(host.name)))


def tier_index(tiers: tuple[Tier, ...], tier: str | int) -> int:
    """The position of ``tier`` (a name, or an index from either end) in ``tiers``."""
    names = [t.name for t in tiers]
    if type(tier) is int and -len(names) <= tier < len(names):
        return tier % len(names)
    if isinstance(tier, str) and tier in names:
        return names.index(tier)
    raise TopologyError(
        f"tier {show(tier)} is not in this allocation; valid: "
        f"{format_choices(names) or 'none (the allocation has no tiers)'}"
    )


def check_gpus(name: str, value: object) -> int:
    """Return ``value`` if it is a GPU count (an int from 1 to :data:`MAX_GPUS_PER_HOST`)."""
    return check_size(name, value, at_most=MAX_GPUS_PER_HOST, why="more GPUs than any host has")


def gpu_counts(hosts: tuple[Host, ...]) -> str:
    """The GPU counts of ``hosts``, each with the hosts that have it (at most 4 named), for a
    message that says which hosts differ.

    >>> gpu_counts((Host("a", 8), Host("b", 4), Host("c", 8), Host("d", 4), Host("e", 4)))
    '4 GPUs on 3 hosts (b, d, e), 8 GPUs on 2 hosts (a, c)'
    """
    by_count: dict[int, list[str]] = {}
    for host in hosts:
        by_count.setdefault(host.gpus, []).append(host.name)
    parts = []
    for count, names in sorted(by_count.items()):
        shown = ", ".join(show(n)[1:-1] for n in names[:4]) + (", …" if len(names) > 4 else "")
        plural = "host" if len(names) == 1 else "hosts"
        parts.append(f"{count} GPUs on {len(names)} {plural} ({shown})")
    return ", ".join(parts)
