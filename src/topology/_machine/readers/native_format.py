"""Our allocation file (TOML or JSON) as an :class:`~.allocation.Allocation` (private).

The format (documented in ``docs/allocation.md`` too); TOML shown, JSON has the same keys::

    gpus_per_host = 4              # optional: GPUs of hosts that do not say

    [[tiers]]                      # innermost first; optional (no tiers: hosts only)
    name = "rack"
    nvlink = true                  # optional, default false: the tier is an NVLink domain
    bandwidth = 900e9              # optional: bytes/s per GPU and direction
    latency = 2e-6                 # optional: seconds

    [[tiers]]
    name = "leaf"
    bandwidth = 50e9
    latency = 10e-6

    [[hosts]]                      # in the order the launcher lists them
    names = "node[1-18]"           # a Slurm host list, or name = "node1" for one host
    gpus = 4                       # optional when gpus_per_host is given
    domains = { rack = "nvl1", leaf = "leaf1" }   # per tier name; a tier left out is unknown

Top-level keys: ``version`` (1, optional), ``gpus_per_host``, ``tiers``, ``hosts``. Unknown
keys are errors, so a misspelt ``domain`` never silently means "unknown".

>>> alloc = allocation_from_dict({"tiers": [{"name": "rack", "nvlink": True}],
...     "hosts": [{"names": "n[1-2]", "gpus": 4, "domains": {"rack": "r1"}}]})
>>> [(h.name, h.gpus, h.domains) for h in alloc.hosts]
[('n1', 4, ('r1',)), ('n2', 4, ('r1',))]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..._args import as_float, show
from ..._datafile import read_data
from ..._errors import TopologyError
from ..allocation import Allocation, Host, Tier
from ..hostlist import HostCount
from ..hosts import check_gpus

__all__ = ["allocation_from_dict", "read_allocation"]

_TOP = ("gpus_per_host", "hosts", "tiers", "version")
_TIER = ("bandwidth", "latency", "name", "nvlink")
_HOST = ("domains", "gpus", "name", "names")


def _table(value: object, where: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TopologyError(f"{where} must be a table (object), got {show(value)}")
    extra = sorted(str(k) for k in value if k not in allowed)
    if extra:
        raise TopologyError(
            f"{where} has unknown key {show(extra[0])}; valid: {', '.join(allowed)}"
        )
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise TopologyError(f"{where} must be a list (array of tables), got {show(value)}")
    return value


def _amount(value: object, where: str) -> float | None:
    if value is None:
        return None
    if type(value) not in (int, float):
        raise TopologyError(f"{where} must be a number, got {show(value)}")
    return as_float(value)  # type: ignore[no-any-return]  # Tier refuses an int past a float


def _tier(index: int, item: object, where: str) -> Tier:
    table = _table(item, f"{where} tiers[{index}]", _TIER)
    if "name" not in table:
        raise TopologyError(f'{where} tiers[{index}] needs a name, e.g. name = "rack"')
    nvlink = table.get("nvlink", False)
    if type(nvlink) is not bool:
        raise TopologyError(
            f"{where} tiers[{index}].nvlink must be true or false, got {show(nvlink)}"
        )
    bandwidth = _amount(table.get("bandwidth"), f"{where} tiers[{index}].bandwidth")
    latency = _amount(table.get("latency"), f"{where} tiers[{index}].latency")
    try:
        return Tier(table["name"], bandwidth=bandwidth, latency=latency, nvlink=nvlink)
    except TopologyError as error:
        raise TopologyError(f"{where} tiers[{index}]: {error}") from None


def _hosts(
    index: int, item: object, where: str, tiers: list[Tier], default: int | None, count: HostCount
) -> list[Host]:
    here = f"{where} hosts[{index}]"
    table = _table(item, here, _HOST)
    if ("name" in table) == ("names" in table):
        raise TopologyError(f"{here} needs exactly one of name (one host) or names (a host list)")
    if "name" in table:
        if not isinstance(table["name"], str):
            raise TopologyError(f"{here}.name must be a string, got {show(table['name'])}")
        names: tuple[str, ...] = (table["name"],)
    else:
        if not isinstance(table["names"], str):
            raise TopologyError(f'{here}.names must be a host list string such as "n[1-4]"')
        names = count.expand(table["names"])
    gpus = table.get("gpus", default)
    if gpus is None:
        raise TopologyError(f"{here} has no gpus and the file no gpus_per_host; give either")
    check_gpus(f"{here}.gpus", gpus)
    tier_names = [t.name for t in tiers]
    domains = _table(table.get("domains", {}), f"{here}.domains", tuple(tier_names))
    for tier, domain in domains.items():
        if not isinstance(domain, str) or not domain.strip():
            raise TopologyError(
                f"{here}.domains.{tier} must be a non-empty string, got {show(domain)}"
            )
    per_tier = tuple(domains.get(name) for name in tier_names)
    try:
        return [Host(name, gpus, per_tier) for name in names]
    except TopologyError as error:
        raise TopologyError(f"{here}: {error}") from None


def allocation_from_dict(data: object, label: str = "allocation") -> Allocation:
    """The :class:`Allocation` a parsed allocation file describes (see the module docstring).

    Raises:
        TopologyError: an unknown key, a value of the wrong type, a host without a GPU count,
            a domain for a tier the file does not define, a host listed twice.
    """
    top = _table(data, label, _TOP)
    if top.get("version", 1) != 1 or type(top.get("version", 1)) is not int:
        raise TopologyError(f"{label} has version {show(top['version'])}; this reader knows 1")
    default = top.get("gpus_per_host")
    if default is not None:
        check_gpus(f"{label} gpus_per_host", default)
    tiers = [
        _tier(i, t, label) for i, t in enumerate(_list(top.get("tiers", []), f"{label} tiers"))
    ]
    if "hosts" not in top:
        raise TopologyError(f"{label} has no hosts; add [[hosts]] tables")
    hosts: list[Host] = []
    count = HostCount(label)
    for index, item in enumerate(_list(top["hosts"], f"{label} hosts")):
        hosts.extend(_hosts(index, item, label, tiers, default, count))
    if not hosts:
        raise TopologyError(f"{label} has no hosts; add [[hosts]] tables")
    try:
        return Allocation(tuple(hosts), tuple(tiers))
    except TopologyError as error:
        raise TopologyError(f"{label}: {error}") from None


def read_allocation(path: str) -> Allocation:
    """The allocation in our file at ``path``: TOML if it ends in ``.toml``, else JSON."""
    label = f"allocation file {show(path)}"
    toml = str(path).lower().endswith(".toml")
    return allocation_from_dict(read_data(path, label, toml=toml), label)
