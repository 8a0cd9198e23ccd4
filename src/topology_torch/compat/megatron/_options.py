"""Megatron's NCCL tuning for the façade: communicator configs as ``pg_options``, and SHARP.

Megatron-core reads a YAML file that maps its group names (``dp_cp``, ``tp``, ``ep_dp``, ...) to
``cga_cluster_size``, ``max_ctas``, ``min_ctas``, ``net_name`` and ``is_high_priority_stream``,
and builds a ``ProcessGroupNCCL.Options`` for each group it creates. We read it the same way and
hand the options of each kind to ``ProcessGroups.create(pg_options=...)`` where that kind's
backend is NCCL; gloo has no such settings, so there they are checked and left out.

>>> with_high_priority({}, ["dp_cp"])
{'dp_cp': {'is_high_priority_stream': True}}
>>> KINDS["ep_dp"], KINDS["mp"]
('edp', 'tp-pp')
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from topology import Topology, TopologyError

from ..._process_groups import ProcessGroups
from .._errors import FacadeRuntimeError

__all__ = [
    "KINDS",
    "checked_configs",
    "enable_sharp",
    "nccl_options",
    "pg_options",
    "read_config",
    "with_high_priority",
]

# Megatron's group names in its NCCL configs -> our kinds ("hcp": every hierarchical level)
KINDS = {
    "dp_cp": "dp-cp",
    "intra_dp_cp": "intra-dp-cp",
    "dp": "dp",
    "cp": "cp",
    "hcp": "hcp",
    "mp": "tp-pp",
    "tp": "tp",
    "pp": "pp",
    "embd": "embedding",
    "pos_embd": "position-embedding",
    "tp_dp_cp": "tp-dp-cp",
    "tp_dp": "tp-dp",
    "tp_cp": "tp-cp",
    "ep": "ep",
    "ep_tp": "etp",
    "tp_ep_mp": "etp-ep",
    "tp_ep_pp": "etp-ep-pp",
    "ep_dp": "edp",
    "intra_ep_dp": "intra-edp",
    "inter_ep_dp": "inter-edp",
    "intra_dist_opt_instance": "intra-dist-opt",
}
_FIELDS = ("cga_cluster_size", "max_ctas", "min_ctas", "net_name", "is_high_priority_stream")


def read_config(path: str | None) -> dict[str, dict[str, Any]]:
    """The per-group settings of Megatron's ``nccl_communicator_config_path`` (YAML).

    Raises:
        TopologyError: the file cannot be read or parsed, or is not a mapping of group names to
            mappings of the settings above.
    """
    if path is None:
        return {}
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]
    except ImportError as error:
        raise FacadeRuntimeError(
            "nccl_communicator_config_path needs the yaml package; pip install pyyaml"
        ) from error
    try:
        with open(path) as stream:
            loaded = yaml.safe_load(stream)
    except (OSError, yaml.YAMLError) as error:
        raise TopologyError(
            f"nccl_communicator_config_path {path!r} could not be read: {error}"
        ) from error
    return checked_configs(loaded or {}, path)


def checked_configs(loaded: object, path: str) -> dict[str, dict[str, Any]]:
    """``loaded`` checked to be Megatron's NCCL configs: group names of :data:`KINDS` mapped to
    settings (``path`` names where they came from in the messages)."""
    if not isinstance(loaded, Mapping):
        raise TopologyError(
            f"nccl_communicator_config_path {path!r} must map group names to settings, "
            f"got {type(loaded).__name__}; e.g. 'dp_cp: {{max_ctas: 32}}'"
        )
    configs: dict[str, dict[str, Any]] = {}
    for name, settings in loaded.items():
        if name not in KINDS:
            raise TopologyError(
                f"nccl_communicator_config_path {path!r} names unknown group {name!r}; "
                f"Megatron's groups: {', '.join(KINDS)}"
            )
        if not isinstance(settings, Mapping) or any(k not in _FIELDS for k in settings):
            raise TopologyError(
                f"settings of group {name!r} in {path!r} must be a mapping of "
                f"{', '.join(_FIELDS)}; got {settings!r}"
            )
        net = settings.get("net_name")
        if net is not None and str(net).lower() not in ("ib", "socket"):
            raise FacadeRuntimeError(
                f"net_name ({net}) of group {name!r} is not supported; accepted values: "
                "'IB' or 'socket'"
            )
        configs[str(name)] = dict(settings)
    return configs


def with_high_priority(
    configs: dict[str, dict[str, Any]], groups: Sequence[str] | None
) -> dict[str, dict[str, Any]]:
    """``configs`` with ``is_high_priority_stream`` set for Megatron's group names ``groups``."""
    for name in groups or ():
        if name not in KINDS:
            raise TopologyError(
                f"high_priority_stream_groups names unknown group {name!r}; "
                f"Megatron's groups: {', '.join(KINDS)}"
            )
        configs.setdefault(name, {})["is_high_priority_stream"] = True
    return configs


def nccl_options(settings: Mapping[str, Any]) -> Any:
    """A ``ProcessGroupNCCL.Options`` from one group's settings (Megatron's get_nccl_options).

    Raises:
        TopologyError: this torch has no NCCL.
    """
    nccl = getattr(dist, "ProcessGroupNCCL", None)
    if nccl is None:
        raise TopologyError("NCCL communicator settings need a torch built with NCCL")
    options = nccl.Options(is_high_priority_stream=settings.get("is_high_priority_stream", False))
    for field in ("cga_cluster_size", "max_ctas", "min_ctas", "net_name"):
        if field in settings:
            setattr(options.config, field, settings[field])
    return options


def pg_options(
    configs: Mapping[str, Mapping[str, Any]],
    topology: Topology,
    default_backend: str,
    pp_backend: str | None,
) -> dict[str, Any]:
    """Per kind of ``topology``, the ``pg_options`` of its NCCL settings (NCCL kinds only)."""
    options: dict[str, Any] = {}
    for name, settings in configs.items():
        kinds = [k for k in topology.kinds if k.startswith("hcp-")] if name == "hcp" else []
        if name != "hcp" and KINDS[name] in topology.kinds:
            kinds = [KINDS[name]]
        for kind in kinds:
            backend = pp_backend if kind == "pp" and pp_backend else default_backend
            if "nccl" in backend.lower():
                options[kind] = nccl_options(settings)
    return options


def enable_sharp(groups: ProcessGroups, kind: str) -> None:
    """Megatron's SHARP set-up: make ``kind``'s NCCL communicator with ``NCCL_COLLNET_ENABLE=1``.

    NCCL creates a communicator at its first collective, so a barrier on the group while the
    variable is set makes that communicator the SHARP one (then the variable is cleared, as
    Megatron does). On other backends SHARP does not exist and nothing is done.
    """
    if "nccl" not in str(dist.get_backend()).lower() or not groups.has_group(kind):
        return
    os.environ["NCCL_COLLNET_ENABLE"] = "1"
    try:
        dist.barrier(group=groups.group(kind), device_ids=[torch.cuda.current_device()])
        torch.cuda.synchronize()
    finally:
        os.environ.pop("NCCL_COLLNET_ENABLE", None)
