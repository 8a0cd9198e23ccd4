"""Megatron MIMO's spelling of a module's layout (``ModuleGridSpec``), read as a Topology.

MIMO (``megatron/core/models/mimo``) names a module's sizes ``num_ranks``, ``tp``, ``cp``,
``pp``, ``ep``, ``gtp_remat``, ``expt_tp``, ``expt_gtp_remat`` and ``rank_offset``; this
project's layouts say ``world_size``, ``gtp``, ``etp`` and ``egtp``. One table translates, and
MIMO's expert default goes with it: ``expt_tp`` is 1 unless given, where
``initialize_model_parallel`` (and a :class:`~topology.Topology`) take ``etp = tp``. So a modules
file written in either spelling, and the adapter's ``ModuleGridSpec``, describe the groups MIMO
builds.

>>> mimo_layout({"num_ranks": 16, "tp": 2, "ep": 4})
Topology(16, tp=2, ep=4, etp=1)
>>> mimo_layout({"num_ranks": 8, "etp": 2})
Traceback (most recent call last):
topology._errors.TopologyError: MIMO's ModuleGridSpec has no field 'etp' (this project's name \
for 'expt_tp'); valid: cp, ep, expt_gtp_remat, expt_tp, gtp_remat, num_ranks, pp, rank_offset, tp
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from .._args import show
from .._errors import TopologyError
from .._megatron.topology import Topology

__all__ = ["MIMO_DEFAULTS", "MIMO_FIELDS", "mimo_layout"]

MIMO_FIELDS = MappingProxyType(
    {
        "num_ranks": "world_size",
        "tp": "tp",
        "cp": "cp",
        "pp": "pp",
        "ep": "ep",
        "gtp_remat": "gtp",
        "expt_tp": "etp",
        "expt_gtp_remat": "egtp",
        "rank_offset": "rank_offset",
    }
)
"""Each ``ModuleGridSpec`` field (but ``name``) and the Topology field it is."""

MIMO_DEFAULTS = MappingProxyType({"expt_tp": 1})
"""MIMO's defaults where they differ from a Topology's (``etp`` defaults to ``tp`` there)."""

_OURS = MappingProxyType({ours: theirs for theirs, ours in MIMO_FIELDS.items()})


def mimo_layout(fields: Mapping[str, object]) -> Topology:
    """The Topology a ``ModuleGridSpec``'s fields describe (MIMO's defaults for the rest).

    Raises:
        TopologyError: a field MIMO does not have (naming ours, if it is this project's
            spelling), or sizes the Topology refuses; ``num_ranks`` missing.
    """
    if not isinstance(fields, Mapping):
        raise TopologyError(
            f"MIMO fields must be a mapping of ModuleGridSpec fields, got {type(fields).__name__}"
        )
    for key in fields:
        if key not in MIMO_FIELDS:
            ours = f" (this project's name for {show(_OURS[key])})" if key in _OURS else ""
            raise TopologyError(
                f"MIMO's ModuleGridSpec has no field {show(key)}{ours}; valid: "
                f"{', '.join(sorted(MIMO_FIELDS))}"
            )
    if "num_ranks" not in fields:
        raise TopologyError("a MIMO module needs num_ranks (its number of ranks)")
    given = {**MIMO_DEFAULTS, **fields}
    return Topology.from_dict({MIMO_FIELDS[key]: value for key, value in given.items()})
