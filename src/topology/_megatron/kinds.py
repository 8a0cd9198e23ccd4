"""The names of group kinds, their axes, and the Megatron names they replace (private)."""

from __future__ import annotations

from types import MappingProxyType

import attrs

from .._layout.grid import Grid

__all__ = ["DENSE_KINDS", "EXPERT_KINDS", "MEGATRON_NAMES", "Kind", "canonical_kind"]


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

DENSE_KINDS = MappingProxyType(
    {
        "dp-cp": ("dp", "cp"),
        "dp": ("dp",),
        "cp": ("cp",),
        "tp-pp": ("tp", "pp"),
        "tp": ("tp",),
        "pp": ("pp",),
        "tp-dp-cp": ("tp", "dp", "cp"),
        "tp-dp": ("tp", "dp"),
        "tp-cp": ("tp", "cp"),
    }
)
"""Kinds of the dense grid (tp, cp, dp, pp) and the axes each one varies along."""

EXPERT_KINDS = MappingProxyType(
    {
        "ep": ("ep",),
        "etp": ("etp",),
        "etp-ep": ("etp", "ep"),
        "etp-ep-pp": ("etp", "ep", "pp"),
        "edp": ("edp",),
    }
)
"""Kinds of the expert grid (etp, ep, edp, pp) and the axes each one varies along."""

MEGATRON_NAMES = MappingProxyType(
    {
        "dp_cp": "dp-cp",
        "mp": "tp-pp",
        "tp_dp_cp": "tp-dp-cp",
        "tp_dp": "tp-dp",
        "tensor_and_data": "tp-dp",
        "tp_cp": "tp-cp",
        "expt_tp": "etp",
        "expt_dp": "edp",
        "tp_ep": "etp-ep",
        "tp_ep_pp": "etp-ep-pp",
        "embd": "embedding",
        "pos_embd": "position-embedding",
        "intra_dp_cp": "intra-dp-cp",
        "intra_expt_dp": "intra-edp",
        "inter_dist_opt": "inter-edp",
        "intra_dist_opt": "intra-dist-opt",
    }
)
"""Megatron's short names of process groups, mapped to our kinds."""

_TOKEN_RANK = {"etp": 0, "tp": 0, "ep": 1, "dp": 2, "edp": 2, "cp": 3, "pp": 4}


def canonical_kind(kind: str) -> str:
    """Our name for ``kind``: Megatron names are mapped, axis tokens put in canonical order.

    >>> canonical_kind("cp-dp"), canonical_kind("mp"), canonical_kind("pp-ep-etp")
    ('dp-cp', 'tp-pp', 'etp-ep-pp')
    """
    kind = MEGATRON_NAMES.get(kind, kind)
    tokens = kind.split("-")
    if len(tokens) > 1 and all(t in _TOKEN_RANK for t in tokens):
        ordered = "-".join(sorted(tokens, key=_TOKEN_RANK.__getitem__))
        if ordered in DENSE_KINDS or ordered in EXPERT_KINDS:
            return ordered
    return kind
