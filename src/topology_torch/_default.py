"""The one explicit default :class:`ProcessGroups` that library code (layers, ops) falls back to.

Layers take ``group=``; when it is ``None`` they ask ``current().group("tp")``. Nothing else in
``topology_torch`` is global.

>>> from topology_torch import _default
>>> _default.is_initialized()
False
"""

from __future__ import annotations

from typing import Any

import attrs

from topology import Topology, TopologyError

from ._process_groups import ProcessGroups, refuse

__all__ = [
    "Owner",
    "claim",
    "current",
    "destroy",
    "held_by",
    "initialize",
    "is_initialized",
    "owned",
    "release",
]


@attrs.frozen
class Owner:
    """Who made the default groups, and how its user releases them (for messages)."""

    name: str  # "compat.megatron"
    make: str  # "initialize_model_parallel()"
    release: str  # "destroy_model_parallel()"

    def __str__(self) -> str:
        return f"{self.name}.{self.make}"


_GENERIC = Owner("topology_torch", "initialize(topology)", "destroy()")
_current: ProcessGroups | None = None
_owner: Owner | None = None


def initialize(topology: Topology, **kwargs: Any) -> ProcessGroups:
    """Create the default :class:`ProcessGroups` for ``topology`` and return it.

    SPMD contract: call on every rank of the default group, with equal arguments, in the same order.
    ``kwargs`` are those of :meth:`ProcessGroups.create`.

    Raises:
        TopologyError: a default is already initialized (call :func:`destroy` first).
    """
    return claim(_GENERIC, topology, **kwargs)


def claim(owner: Owner, topology: Topology, **kwargs: Any) -> ProcessGroups:
    """Create the default for ``owner`` (a façade), refusing while anyone else holds it.

    SPMD contract: as :func:`initialize`. A refusal still joins the other ranks' agreement, so
    they raise too instead of waiting.
    """
    global _current, _owner
    if _current is not None and _owner is not None:  # every rank refuses, every rank hears it
        if _owner == owner:
            problem = f"{owner.name} is already initialized with {_current.topology}"
        else:
            problem = f"the default process groups were made by {_owner} with {_current.topology}"
        refuse(TopologyError(f"{problem}; call {_owner.name}.{_owner.release} first"))
    _current = ProcessGroups.create(topology, **kwargs)
    _owner = owner
    return _current


def held_by(owner: Owner) -> ProcessGroups | None:
    """The default if ``owner`` made it, else None."""
    return _current if _owner == owner else None


def owned(owner: Owner) -> ProcessGroups:
    """The default that ``owner`` made.

    Raises:
        TopologyError: ``owner`` has not made it (nobody has, or another façade did).
    """
    if _current is not None and _owner == owner:
        return _current
    held = "" if _current is None else f" (the default process groups were made by {_owner})"
    raise TopologyError(
        f"{owner.name} is not initialized{held}; call {owner.name}.{owner.make} on every rank first"
    )


def current() -> ProcessGroups:
    """Return the default :class:`ProcessGroups` (whoever made it).

    Raises:
        TopologyError: nothing is initialized yet.
    """
    if _current is None:
        raise TopologyError(
            "topology_torch is not initialized; call topology_torch.initialize(topology) "
            "on every rank first, or pass group= explicitly"
        )
    return _current


def is_initialized() -> bool:
    """Whether :func:`initialize` (or a façade) has run (and :func:`destroy` has not since)."""
    return _current is not None


def destroy() -> None:
    """Release the default's process groups, whoever made them; a no-op when none exist.

    SPMD contract: call on every rank, in the same order.
    """
    global _current, _owner
    groups, _current, _owner = _current, None, None
    if groups is not None:
        groups.destroy()


def release(owner: Owner) -> None:
    """Release the default if ``owner`` made it; a no-op when none exist.

    Raises:
        TopologyError: another owner made the default (its groups are left alone).
    """
    if _current is not None and _owner != owner and _owner is not None:
        raise TopologyError(
            f"{owner.name}.{owner.release} found the default process groups made by {_owner}, "
            f"not by {owner.name}; they were left alone: call {_owner.name}.{_owner.release}"
        )
    destroy()
