"""check(): the pre-launch check of a layout against a cluster or a real rank map (private).

It builds the placement rows and communicator counts, runs the rules over them and returns a
:class:`Report` whose findings are sorted most severe first (rules keep their order within a
severity). On a :class:`RankMap` (an allocation in launcher order) it also counts, per tier, the
groups that cross (:func:`~.crossings.crossings`) and reports the tp/etp/cp/ep crossings a
better host order would avoid; a map that places rank ``r`` on node ``r // G`` with regular
NVLink domains is checked exactly as the :class:`Cluster` it equals.

>>> from topology import Cluster, Topology
>>> report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
>>> report.ok, [f.code for f in report.errors]
(False, ['tp-larger-than-node'])
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from .._args import check_size, show
from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.cluster import Cluster
from .._machine.hosts import gpu_counts
from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from .budget import (
    DOMAIN_SAMPLE,
    NCCL_MEMORY,
    NVLS_LIMIT,
    nvls_groups,
    nvls_groups_in,
    nvls_groups_sampled,
)
from .communicators import communicators
from .crossings import Crossings, crossings
from .findings import SEVERITIES, Finding
from .placement import placements
from .report import Report
from .rules import run_rules
from .tier_rules import budget_findings, tier_findings

__all__ = ["check"]

_WALK_LIMIT = 1 << 14
"""Up to this many ranks NVLS groups are counted in every domain, else in sample domains."""


def check(
    topology: Topology,
    cluster: Cluster | RankMap,
    *,
    max_communicators: int = 32,
    nccl_memory: float = NCCL_MEMORY,
    nvls_limit: int = NVLS_LIMIT,
    separate: Iterable[str] = (),
    independent: Iterable[str] = (),
    pg_options: Mapping[str, object] | None = None,
) -> Report:
    """Check ``topology`` against ``cluster`` (or a real :class:`RankMap`) before launch.

    Args:
        topology: the layout.
        cluster: the machine (GPUs per node, optionally nodes and NVLink domain size), or a
            :class:`RankMap` (``Allocation.rank_map``: hosts in launcher order and their tiers).
        max_communicators: warn when one rank would join more distinct communicators than this
            (each NCCL communicator holds its own buffers in GPU memory).
        nccl_memory: bytes of GPU memory one communicator holds, for the memory estimate.
        nvls_limit: NVLS multicast groups one NVLink domain holds; warn above it.
        separate, independent: the kinds ``ProcessGroups.create`` will give communicators of
            their own, or a second one (for overlap); the communicator counts include them.
        pg_options: the ``pg_options`` mapping ``ProcessGroups.create`` will get (kinds to
            options objects, compared by identity): kinds with equal groups but different
            objects make communicators of their own, and every count includes them.

    Returns:
        A :class:`Report`; ``report.ok`` is False when any finding is at error level.

    Raises:
        TopologyError: if the arguments have the wrong types, or the map's hosts have
            different GPU counts.

    >>> from topology import Allocation, Cluster, Host, Tier, Topology
    >>> bad = check(Topology(32, tp=8, order="dp-tp"), Cluster(8, nodes=4))
    >>> [f.code for f in bad.findings if f.severity == "error"]
    ['tp-crosses-nodes']
    >>> racks = Allocation([Host(f"n{i}", 4, (f"r{i % 2}",)) for i in range(4)],
    ...                    [Tier("rack", nvlink=True)])
    >>> found = check(Topology(16, tp=8), racks.rank_map(16))
    >>> found.crossings.count("tp", "rack"), [f.code for f in found.errors]
    (2, ['tp-crosses-tier'])
    """
    if not isinstance(topology, Topology):
        raise TopologyError(f"topology must be a Topology, got {type(topology).__name__}")
    rank_map = cluster if isinstance(cluster, RankMap) else None
    if rank_map is not None:
        cluster = _cluster_of(rank_map)
    if not isinstance(cluster, Cluster):
        raise TopologyError(
            f"cluster must be a Cluster or a RankMap, got {type(cluster).__name__}; "
            "use e.g. Cluster(gpus_per_node=8) or Allocation.rank_map(world_size)"
        )
    check_size("max_communicators", max_communicators, at_most=None)
    if type(nccl_memory) not in (int, float) or not 0 <= nccl_memory < float("inf"):
        raise TopologyError(
            f"nccl_memory must be a finite number of bytes >= 0, got {show(nccl_memory)}"
        )
    check_size("nvls_limit", nvls_limit, at_most=None)
    rows = placements(topology, cluster)
    plan: dict[str, Any] = {
        "separate": separate,
        "independent": independent,
        "pg_options": pg_options,
    }
    counts = communicators(topology, **plan)
    findings = run_rules(topology, cluster, rows, counts, max_communicators)
    found: Crossings | None = None
    if rank_map is not None and _holds(rank_map, topology, findings):
        found = crossings(topology, rank_map)
        findings += _map_findings(topology, rank_map, found, findings)
    nvls = _nvls(topology, cluster, rank_map if found is not None else None, plan)
    domain_name = "NVLink domain" if _has_domains(cluster, rank_map) else "node"
    findings = budget_findings(findings, counts, float(nccl_memory), nvls, nvls_limit, domain_name)
    order = {severity: i for i, severity in enumerate(SEVERITIES)}
    findings = sorted(findings, key=lambda f: order[f.severity])
    return Report(topology, cluster, tuple(findings), rows, counts, rank_map, found)


def _cluster_of(rank_map: RankMap) -> Cluster:
    """The :class:`Cluster` the layout rules run on: the map itself when it is uniform, else
    its host size and its largest NVLink domain (the tier rules measure the real domains)."""
    uniform = rank_map.as_cluster()
    if uniform is not None:
        return uniform
    gpus = sorted({host.gpus for host in rank_map.hosts})
    if len(gpus) > 1:
        raise TopologyError(
            f"check on a rank map needs hosts with equal GPU counts (its layout rules measure "
            f"nodes of one size), got {gpu_counts(rank_map.hosts)}; check the hosts of each "
            "GPU count apart"
        )
    nvlink = next((i for i, t in enumerate(rank_map.tiers) if t.nvlink), None)
    if nvlink is None:
        return Cluster(gpus[0])
    hosts = Counter(rank_map.host_domain_ids(nvlink))
    largest = max(hosts.values()) * gpus[0]
    return Cluster(gpus[0], nvlink_domain=largest if largest > gpus[0] else None)


def _holds(rank_map: RankMap, topology: Topology, findings: list[Finding]) -> bool:
    """True if the map holds every rank of the layout, else add a world-size finding."""
    end = topology.rank_offset + topology.world_size
    if rank_map.world_size >= end:
        return True
    findings.append(
        Finding(
            "error",
            "world-size-mismatch",
            f"the allocation runs {rank_map.world_size} ranks on {len(rank_map.hosts)} hosts "
            f"but the layout needs rank_offset + world_size = {end}; add hosts or shrink the "
            "layout",
        )
    )
    return False


def _map_findings(
    topology: Topology, rank_map: RankMap, found: Crossings, layout: list[Finding]
) -> list[Finding]:
    if topology.rank_offset or len({h.gpus for h in rank_map.hosts}) > 1:
        return []
    # Imported here: place imports check's neighbours, and check is imported by place's users.
    from .place.place import place

    allocation = Allocation(rank_map.hosts, rank_map.tiers)
    codes = {f.code for f in layout}
    reported = frozenset(
        kind
        for kind in topology.kinds
        if codes & {f"{kind}-larger-than-node", f"{kind}-crosses-nodes", f"{kind}-straddles-nodes"}
    )
    return tier_findings(
        topology, rank_map, found, lambda: place(topology, allocation).after, reported
    )


def _has_domains(cluster: Cluster, rank_map: RankMap | None) -> bool:
    if rank_map is not None:
        return any(t.nvlink for t in rank_map.tiers)
    return cluster.nvlink_domain is not None


def _nvls(
    topology: Topology, cluster: Cluster, rank_map: RankMap | None, plan: dict[str, Any]
) -> tuple[int, int, bool]:
    """The busiest NVLink domain's count of communicators with two or more of its ranks.

    A map the :class:`Cluster` describes is counted as that cluster (sample domains of a large
    world); any other map on its real domains, every one when the ranks are few, else the first,
    middle and last of its largest ones and its first and last (each on its first ranks), so
    the time is bounded by the hosts and the kinds, never the world size.
    """
    if rank_map is not None and rank_map.as_cluster() is None:
        nvlink = next((i for i, t in enumerate(rank_map.tiers) if t.nvlink), None)
        if topology.rank_offset + topology.world_size <= _WALK_LIMIT:
            labels = rank_map.nodes if nvlink is None else rank_map.domain_ids(nvlink)
            return nvls_groups(topology, labels, **plan)
        return nvls_groups_in(topology, _sample_domains(topology, rank_map, nvlink), **plan)
    size = cluster.domain_size
    end = topology.rank_offset + topology.world_size
    if end <= _WALK_LIMIT:
        return nvls_groups(topology, [r // size for r in range(end)], **plan)
    first, last = topology.rank_offset // size, (end - 1) // size
    return nvls_groups_sampled(topology, size, sorted({first, (first + last) // 2, last}), **plan)


def _sample_domains(
    topology: Topology, rank_map: RankMap, tier: int | None
) -> list[tuple[int, list[int]]]:
    """The NVLink domains of ``tier`` (hosts when None) a large map is measured on: its first
    and last, and the first, middle and last of its largest (by the layout's ranks in them),
    each as its label and its first :data:`~.budget.DOMAIN_SAMPLE` ranks, host by host.

    Time and memory O(hosts) plus the sample.
    """
    labels = range(len(rank_map.hosts)) if tier is None else rank_map.host_domain_ids(tier)
    start, end = topology.rank_offset, topology.rank_offset + topology.world_size
    spans: list[tuple[int, int, int]] = []  # label, first rank, end of each host's layout ranks
    first = 0
    for label, host in zip(labels, rank_map.hosts, strict=True):
        lo, hi = max(first, start), min(first + host.gpus, end)
        if lo < hi:
            spans.append((label, lo, hi))
        first += host.gpus
    held: dict[int, int] = {}
    for label, lo, hi in spans:
        held[label] = held.get(label, 0) + hi - lo
    order = list(held)
    largest = max(held.values())
    big = [label for label in order if held[label] == largest]
    picked = {order[0], order[-1], big[0], big[len(big) // 2], big[-1]}
    ranks: dict[int, list[int]] = {label: [] for label in order if label in picked}
    for label, lo, hi in spans:
        if label in ranks and len(ranks[label]) < DOMAIN_SAMPLE:
            ranks[label].extend(range(lo, min(hi, lo + DOMAIN_SAMPLE - len(ranks[label]))))
    return list(ranks.items())
