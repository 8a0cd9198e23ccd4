"""Kind: the name and axes of one group kind, as a layout reports it (Topology or AxisGroups)."""

from __future__ import annotations

import attrs

from .grid import Grid

__all__ = ["Kind"]


@attrs.frozen
class Kind:
    """One group kind of one topology: its name, its Megatron names, the grid axes it spans.

    >>> from topology import Topology
    >>> kind = Topology(8, tp=2).kind("tensor_and_data")
    >>> kind.name, kind.megatron_names, kind.axes
    ('tp-dp', ('tp_dp', 'tensor_and_data'), ('tp', 'dp'))
    """

    name: str
    """Our canonical name, e.g. ``"tp-dp"``."""
    megatron_names: tuple[str, ...]
    """Megatron's short names for this kind (``"tp_dp"``), if it has any beyond ``name``."""
    grid: Grid | None
    """The grid whose axes the groups vary along; None for kinds that are no set of axes."""
    axes: tuple[str, ...]
    """The axes of ``grid`` one group varies along (empty when ``grid`` is None)."""
