"""The one explicit default :class:`ProcessGroups` that library code (layers, ops) falls back to.

Layers take ``group=``; when it is ``None`` they ask ``current().group("tp")``. Nothing else in
``topology_torch`` is global.

>>> from topology_torch import _default
>>> _default.is_initialized()
False
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from topology import Topology, TopologyError

if TYPE_CHECKING:
    from ._process_groups import ProcessGroups

__all__ = ["current", "destroy", "initialize", "is_initialized"]

_current: ProcessGroups | None = None


def initialize(topology: Topology, **kwargs: Any) -> ProcessGroups:
    """Create the default :class:`ProcessGroups` for ``topology`` and return it.

    SPMD contract: call on every rank of the default group, with equal arguments, in the same order.
    ``kwargs`` are those of :meth:`ProcessGroups.create`.

    Raises:
        TopologyError: a default is already initialized (call :func:`destroy` first).
    """
    global _current
    if _current is not None:
        raise TopologyError(
            f"topology_torch is already initialized with {_current.topology}; "
            "call topology_torch.destroy() before initializing again"
        )
    from ._process_groups import ProcessGroups

    _current = ProcessGroups.create(topology, **kwargs)
    return _current


def current() -> ProcessGroups:
    """Return the default :class:`ProcessGroups`.

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
    """Whether :func:`initialize` has run (and :func:`destroy` has not since)."""
    return _current is not None


def destroy() -> None:
    """Release the default's process groups and forget it; a no-op when nothing is initialized.

    SPMD contract: call on every rank, in the same order.
    """
    global _current
    groups, _current = _current, None
    if groups is not None:
        groups.destroy()
