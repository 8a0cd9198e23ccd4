"""Module globals of a peer as read-only views of a façade's groups (private to ``compat``).

A peer that keeps its groups in module globals (Megatron's ``parallel_state``, ezpz's ``tp``)
is answered by a module ``__getattr__`` that maps each global's name to a :data:`View`: a
function of the default :class:`ProcessGroups` (None before initialization) and the façade's
``set_*`` overrides.

>>> group_view("tp")(None, {})
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .._process_groups import ProcessGroups

__all__ = ["View", "group_view", "member", "ranks_view"]

View = Callable[[ProcessGroups | None, Mapping[str, int | None]], Any]


def member(groups: ProcessGroups | None, kind: str) -> bool:
    """Whether ``groups`` exist, have ``kind`` and hold this rank in one of its groups."""
    return groups is not None and kind in groups.kinds and groups.has_group(kind)


def group_view(kind: str) -> View:
    """The global holding this rank's group of ``kind``: None before initialization."""
    return lambda groups, _: groups.group(kind) if groups and member(groups, kind) else None


def ranks_view(kind: str) -> View:
    """The global holding the global ranks of this rank's ``kind`` group (a list), or None."""
    return lambda groups, _: list(groups.ranks(kind)) if groups and member(groups, kind) else None
