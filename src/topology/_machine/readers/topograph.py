"""NVIDIA Topograph's graph JSON as an :class:`~.allocation.Allocation` (private).

Source: Topograph's ``graph`` engine (NVIDIA/topograph ``docs/engines/graph.md`` and
``pkg/topology/instances.go``, commit e2b6250, 2026): an object ``{"instances": [...]}`` where
each instance has ``id`` (the provider's instance ID), ``network_layers`` (switch names or IDs,
closest first: entry 0 is the switch the node plugs into; the depth varies by provider) and
``labels`` (strings; ``accelerator.topograph.run/domain`` names its NVLink domain)::

    {"instances": [
      {"id": "node1", "network_layers": ["leaf-a", "spine-a"],
       "labels": {"accelerator.topograph.run/domain": "nvl-1"}}
    ]}

Tiers: ``nvlink`` (when any instance has the domain label; NVLink) and then ``leaf``, ``spine``,
``core``, ``level3``... for layers 0, 1, 2, 3...; an instance with fewer layers, or without the
label, has unknown domains there. Other keys and labels are ignored. Hosts are the instances in
file order (the engine writes them sorted by ID), or ``hosts`` (a Slurm host list or names) in
the order given; an ID the file lacks has unknown domains.

>>> data = {"instances": [{"id": "a", "network_layers": ["l1", "s1"],
...                        "labels": {"accelerator.topograph.run/domain": "nvl-1"}}]}
>>> alloc = parse_topograph(data, gpus_per_host=4)
>>> [t.name for t in alloc.tiers], alloc.hosts[0].domains
(['nvlink', 'leaf', 'spine'], ('nvl-1', 'l1', 's1'))
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._args import show
from ..._datafile import read_data
from ..._errors import TopologyError
from ..allocation import Allocation, Host, Tier
from ..hosts import check_gpus
from ..textfile import selected_hosts

__all__ = ["NVLINK_LABEL", "parse_topograph", "read_topograph"]

NVLINK_LABEL = "accelerator.topograph.run/domain"
"""The instance label that names an instance's NVLink (accelerator) domain."""

_TIER_NAMES = ("leaf", "spine", "core")


def _instance(index: int, item: object, label: str) -> tuple[str, list[str | None], str | None]:
    where = f"{label} instances[{index}]"
    if not isinstance(item, dict):
        raise TopologyError(f"{where} must be an object with id and network_layers")
    name = item.get("id")
    if not isinstance(name, str) or not name.strip():
        raise TopologyError(f"{where} has id {show(name)}; an id is a non-empty string")
    layers = item.get("network_layers")
    if layers is None:
        layers = []
    if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
        raise TopologyError(
            f"{where} ({name}) has network_layers {show(layers)}; give a list of switch names"
        )
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        raise TopologyError(f"{where} ({name}) has labels {show(labels)}; give an object")
    domain = labels.get(NVLINK_LABEL)
    if domain is not None and not isinstance(domain, str):
        raise TopologyError(f"{where} ({name}) has {NVLINK_LABEL} {show(domain)}; give a string")
    return name, [x or None for x in layers], domain or None


def parse_topograph(
    data: object,
    *,
    gpus_per_host: int,
    hosts: str | Sequence[str] | None = None,
    label: str = "Topograph JSON",
) -> Allocation:
    """The allocation a Topograph graph document describes (see the module docstring).

    Raises:
        TopologyError: no ``instances`` list, an instance without a string ``id``, an id
            twice, or ``network_layers``/``labels`` of the wrong type.
    """
    check_gpus("gpus_per_host", gpus_per_host)
    instances = data.get("instances") if isinstance(data, dict) else None
    if not isinstance(instances, list) or not instances:
        raise TopologyError(f"{label} must be an object with a non-empty list 'instances'")
    found: dict[str, tuple[list[str | None], str | None]] = {}
    for index, item in enumerate(instances):
        name, layers, domain = _instance(index, item, label)
        if name in found:
            raise TopologyError(f"{label} lists instance {show(name)} twice")
        found[name] = (layers, domain)
    nvlink = any(domain is not None for _, domain in found.values())
    depth = max(len(layers) for layers, _ in found.values())
    tiers = [Tier("nvlink", nvlink=True)] if nvlink else []
    tiers += [Tier(_TIER_NAMES[i] if i < len(_TIER_NAMES) else f"level{i}") for i in range(depth)]
    names = selected_hosts(hosts, label) or tuple(found)
    built = []
    for name in names:
        layers, domain = found.get(name, ([], None))
        domains = ([domain] if nvlink else []) + layers + [None] * (depth - len(layers))
        built.append(Host(name, gpus_per_host, domains))
    return Allocation(tuple(built), tuple(tiers))


def read_topograph(
    path: str, *, gpus_per_host: int, hosts: str | Sequence[str] | None = None
) -> Allocation:
    """:func:`parse_topograph` on the JSON file at ``path`` (read safely, at most 1 MiB)."""
    label = f"Topograph JSON {show(path)}"
    return parse_topograph(
        read_data(path, label), gpus_per_host=gpus_per_host, hosts=hosts, label=label
    )
