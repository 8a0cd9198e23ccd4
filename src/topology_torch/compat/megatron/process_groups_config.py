"""Megatron-core's ``process_groups_config.ProcessGroupCollection`` holding the façade's groups.

>>> from topology_torch.compat.megatron import process_group_collection  # doctest: +SKIP
>>> process_group_collection().tp  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from typing import Any

from topology import TopologyError

from ..._process_groups import ProcessGroups
from ._state import groups as _groups
from ._state import singleton

__all__ = ["process_group_collection"]


_COLLECTION_FIELDS = {
    "tp": "tp",
    "pp": "pp",
    "mp": "tp-pp",
    "embd": "embedding",
    "pos_embd": "position-embedding",
    "cp": "cp",
    "tp_cp": "tp-cp",
    "ep": "ep",
    "expt_tp": "etp",
    "tp_ep": "etp-ep",
    "tp_ep_pp": "etp-ep-pp",
    "tp_dp_cp": "tp-dp-cp",
    "dp": "dp",
    "dp_cp": "dp-cp",
    "expt_dp": "edp",
    "intra_dp_cp": "intra-dp-cp",
    "intra_expt_dp": "intra-edp",
    "inter_dist_opt": "inter-edp",
    "intra_dist_opt": "intra-dist-opt",
}


# 0.19's fields over the GTP axes: the widened kind where gtp/egtp > 1, else the plain one
_GTP_FIELDS = {
    "dp_cp_gtp_remat": ("gtp-dp-cp", "dp-cp"),
    "expt_dp_gtp_remat": ("egtp-edp", "edp"),
    "tp_ep_pp_with_egtp_remat": ("etp-ep-egtp-pp", "etp-ep-pp"),
}


def process_group_collection(groups: ProcessGroups | None = None) -> Any:
    """Megatron-core's ``ProcessGroupCollection`` holding our groups (needs megatron-core).

    Every field of the installed megatron-core's collection whose kind was created and holds
    this rank is set (``hcp`` as a list of levels; 0.19's ``gtp_remat`` and ``expt_gtp_remat``
    at size 1 as this rank alone); no new group is made but that one. ``groups`` defaults to
    the initialized default.

    Raises:
        TopologyError: megatron-core is not installed, or nothing is initialized.
    """
    try:
        from megatron.core.process_groups_config import (  # type: ignore[import-untyped,import-not-found,unused-ignore]
            ProcessGroupCollection,
        )
    except ImportError as error:
        raise TopologyError(
            "process_group_collection needs megatron-core; install it with "
            "pip install --no-deps megatron-core"
        ) from error
    held = groups if groups is not None else _groups()
    known = {f.name for f in dataclasses.fields(ProcessGroupCollection)}
    kinds = dict(_COLLECTION_FIELDS)
    for field, (wide, plain) in _GTP_FIELDS.items():
        kinds[field] = wide if wide in held.kinds else plain
    fields: dict[str, Any] = {}
    for field, kind in kinds.items():
        if field in known and kind in held.kinds and held.has_group(kind):
            fields[field] = held.group(kind)
    for field, kind in (("gtp_remat", "gtp"), ("expt_gtp_remat", "egtp")):
        if field in known and kind in held.kinds:
            fields[field] = held.group(kind)
        elif field in known and groups is None:  # initialize_model_parallel made the singleton
            fields[field] = singleton()
    levels = [k for k in held.kinds if k.startswith("hcp-")]
    if levels:
        fields["hcp"] = [held.group(k) for k in levels]
    return ProcessGroupCollection(**fields)
