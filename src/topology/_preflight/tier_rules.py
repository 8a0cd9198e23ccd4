"""The rules :func:`~.check.check` adds on a real rank map: groups that leave a domain of some
tier although another host order keeps them in, and the communicator budget (private).

A tp or etp group that crosses a tier :func:`~.place.place` can keep it inside is an error, a cp
or ep group a warning: the host order is at fault and ``topology place`` fixes it. A crossing of
an NVLink tier that no host order avoids (ragged racks too short for the groups) has the same
severity, as the layout rules give a group larger than a uniform domain; other tiers' crossings
no order avoids are left to the layout rules (and shown in the report's crossing table).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import attrs

from .._machine.rankmap import RankMap
from .._megatron.kinds import CROSSING_SEVERITY
from .._megatron.topology import Topology
from .budget import NVLS_LIMIT
from .communicators import Communicators
from .crossings import Crossings, distinct_kinds
from .findings import Finding

__all__ = ["budget_findings", "tier_findings"]


def _example(topo: Topology, rank_map: RankMap, kind: str, tier: str) -> tuple[int, ...]:
    """The first group of ``kind`` that crosses ``tier`` (no per-rank label list is built)."""
    labels = rank_map.host_domain_ids(tier)
    for group in topo.groups(kind):
        if len({labels[rank_map.node_of(r)] for r in group}) > 1:
            return group
    return ()


def tier_findings(
    topo: Topology,
    rank_map: RankMap,
    found: Crossings,
    best: Callable[[], Crossings],
    reported: frozenset[str] = frozenset(),
) -> list[Finding]:
    """Findings for groups of tp/etp/cp/ep that cross a tier: one :func:`place` keeps them in,
    or an NVLink tier no host order keeps them in (unless the layout rules already reported
    that kind, ``reported``).

    ``best`` computes the crossings of the best host order (called only when some cross).
    """
    first = distinct_kinds(topo, [k for k in CROSSING_SEVERITY if k in found.kinds])
    findings = []
    placed: Crossings | None = None
    nvlink = {t.name for t in rank_map.tiers if t.nvlink}
    for tier in found.tiers[1:]:
        for kind, representative in first.items():
            if representative != kind:
                continue
            count = found.count(kind, tier)
            if not count:
                continue
            placed = placed or best()
            better = placed.count(kind, tier)
            if better < count:
                message = (
                    f"{count} of {found.groups(kind)} {kind} groups span two or more {tier} "
                    f"domains in this host order although {better} would with another; "
                    f"run `topology place` (or topology.place) and give the launcher its "
                    f"host order"
                )
            elif tier in nvlink and kind not in reported:
                message = _unavoidable(topo, rank_map, found, kind, tier)
            else:
                continue
            example = _example(topo, rank_map, kind, tier)
            findings.append(
                Finding(CROSSING_SEVERITY[kind], f"{kind}-crosses-tier", message, example)
            )
    return findings


def _unavoidable(topo: Topology, rank_map: RankMap, found: Crossings, kind: str, tier: str) -> str:
    """The message for ``kind`` groups that cross NVLink ``tier`` in every host order."""
    sizes: Counter[int] = Counter()
    for label, host in zip(rank_map.host_domain_ids(tier), rank_map.hosts, strict=True):
        sizes[label] += host.gpus
    shown = ", ".join(str(n) for n in sorted(set(sizes.values()), reverse=True))
    size = topo.size(kind)
    return (
        f"{found.count(kind, tier)} of {found.groups(kind)} {kind} groups span two or more "
        f"{tier} domains (NVLink) and no host order keeps them in: {kind}({size}) groups do not "
        f"fit the {tier} domains of {shown} GPUs; use a {kind} that divides every {tier} "
        f"domain's GPUs, or leave the short domains out of the allocation"
    )


def budget_findings(
    findings: list[Finding],
    counts: Communicators,
    nccl_memory: float,
    nvls: tuple[int, int, bool],
    nvls_limit: int,
    domain_name: str,
) -> list[Finding]:
    """``findings`` with the memory and NVLS estimate added to the ``communicators`` line, and a
    ``too-many-nvls-groups`` warning when one domain exceeds ``nvls_limit``."""
    most = counts.per_rank_max
    groups, domain, exact = nvls
    sampled = "" if exact else " (measured on sample domains)"
    estimate = (
        f"; about {most * nccl_memory / 1e9:.3g} GB of GPU memory for NCCL on the busiest "
        f"rank at {nccl_memory / 1e6:.4g} MB per communicator (NVIDIA/nccl#964; give your "
        f"measured figure as nccl_memory); at most {groups} communicators have two or more "
        f"ranks in one {domain_name}{sampled}, of {nvls_limit} NVLS multicast groups"
    )
    result = [
        attrs.evolve(f, message=f.message + estimate) if f.code == "communicators" else f
        for f in findings
    ]
    if groups > nvls_limit:
        result.append(
            Finding(
                "warning",
                "too-many-nvls-groups",
                f"{domain_name} {domain} holds {groups} communicators with two or more of its "
                f"ranks{sampled}, more than the {nvls_limit} NVLink SHARP multicast groups of "
                f"an NVSwitch domain ({_limit_source(nvls_limit)}); NCCL falls back or fails, "
                f"so create only the kinds you use or set NCCL_NVLS_ENABLE=0",
            )
        )
    return result


def _limit_source(nvls_limit: int) -> str:
    """Where the NVLS limit in force came from: the default (NVLS_LIMIT) or the caller."""
    if nvls_limit == NVLS_LIMIT:
        return "NVLS_LIMIT, the default, NVIDIA/nccl#2077"
    return "nvls_limit as given"
