"""check_modules(): the pre-launch check of several modules on one cluster or rank map.

Each module that is a :class:`~topology.Topology` is checked as :func:`~topology.check` checks
it, at its own ``rank_offset`` (its findings say its module); then the communicators of all
modules together (a rank set two modules or kinds share is one communicator) give the whole
job's findings: communicators per rank, NCCL memory on the busiest rank and NVLink SHARP groups
per NVLink domain, summed over the modules.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from ..._args import show
from ..._errors import TopologyError
from ..._machine.cluster import Cluster
from ..._machine.rankmap import RankMap
from ..._megatron.topology import Topology
from ..._modules.modules import Modules
from ..budget import NCCL_MEMORY, NVLS_LIMIT
from ..check import check
from ..findings import SEVERITIES, Finding
from ..report import Report
from .budget import ModulesBudget, modules_budget
from .report import ModulesReport

__all__ = ["check_modules"]


def check_modules(
    modules: Modules,
    cluster: Cluster | RankMap,
    *,
    max_communicators: int = 32,
    nccl_memory: float = NCCL_MEMORY,
    nvls_limit: int = NVLS_LIMIT,
) -> ModulesReport:
    """Check every module of ``modules``, then their communicators together, before launch.

    Args:
        modules: the modules (colocated or tiling the world).
        cluster: the machine, or a :class:`RankMap` of at least ``modules.world_size`` ranks.
        max_communicators, nccl_memory, nvls_limit: as for :func:`~topology.check`, applied to
            each module alone and to all of them together.

    Returns:
        A :class:`ModulesReport`: each Topology module's :class:`~topology.Report` and the
        findings of all, each with its module (``None`` for the whole job), most severe first.
        An :class:`~topology.AxisGroups` module has no Megatron rules to run: it gets an info
        finding and counts in the whole job's communicators.

    Raises:
        TopologyError: for arguments of the wrong type, or a rank map smaller than the job.

    >>> from topology import Cluster, Module, Modules, Topology
    >>> mods = Modules([Module("vision", Topology(8)),
    ...                 Module("language", Topology(8, tp=2, pp=2), rank_offset=8)])
    >>> report = check_modules(mods, Cluster(gpus_per_node=8, nodes=2))
    >>> report.ok, report.budget.per_rank_max, report.budget.calls
    (True, 5, 5)
    """
    if not isinstance(modules, Modules):
        raise TopologyError(
            f"modules must be a topology.Modules, got {show(modules)} ({type(modules).__name__}); "
            "build one with Modules([Module('vision', Topology(8)), ...])"
        )
    if not isinstance(cluster, (Cluster, RankMap)):
        raise TopologyError(
            f"cluster must be a Cluster or a RankMap, got {type(cluster).__name__}; "
            "use e.g. Cluster(gpus_per_node=8) or Allocation.rank_map(world_size)"
        )
    if isinstance(cluster, RankMap) and cluster.world_size < modules.world_size:
        raise TopologyError(
            f"the rank map runs {cluster.world_size} ranks but the modules need "
            f"{modules.world_size}; add hosts or shrink the modules"
        )
    reports: list[Report | None] = []
    found: list[tuple[str | None, Finding]] = []
    # Each module is checked on the cluster's machine with an open node count: the nodes hold
    # the whole job, whose size is checked once below.
    machine = attrs.evolve(cluster, nodes=None) if isinstance(cluster, Cluster) else cluster
    for module in modules.modules:
        if isinstance(module.layout, Topology):
            report = check(
                module.layout,
                machine,
                max_communicators=max_communicators,
                nccl_memory=nccl_memory,
                nvls_limit=nvls_limit,
            )
            reports.append(report)
            found += [(module.name, f) for f in report.findings if not _whole_job(f, cluster)]
        else:
            reports.append(None)
            found.append((module.name, _unchecked(module.name, str(module.layout))))
    budget = modules_budget(modules.schedule(), modules.world_size, _domain_of(cluster))
    found += [(None, f) for f in _world_size(modules, cluster)]
    found += [(None, f) for f in _job_findings(budget, max_communicators, nccl_memory, nvls_limit)]
    order = {severity: i for i, severity in enumerate(SEVERITIES)}
    found.sort(key=lambda pair: order[pair[1].severity])
    return ModulesReport(modules, cluster, tuple(reports), tuple(found), budget)


def _whole_job(finding: Finding, cluster: Cluster | RankMap) -> bool:
    """A module's world-size finding on a rank map, which holds the whole job (checked above)."""
    return isinstance(cluster, RankMap) and finding.code == "world-size-mismatch"


def _unchecked(name: str, layout: str) -> Finding:
    return Finding(
        "info",
        "module-not-checked",
        f"module {name!r} is a grid ({layout}) with no Megatron kinds, so only its "
        "communicators are checked; give it a Topology to run the layout rules",
    )


def _domain_of(cluster: Cluster | RankMap) -> Callable[[int], int]:
    """The NVLink domain (else node) label of a rank, as ``check`` measures it."""
    if isinstance(cluster, Cluster):
        return cluster.domain_of
    nvlink = next((i for i, t in enumerate(cluster.tiers) if t.nvlink), None)
    return (cluster.nodes if nvlink is None else cluster.domain_ids(nvlink)).__getitem__


def _world_size(modules: Modules, cluster: Cluster | RankMap) -> list[Finding]:
    """An error when the cluster's node count holds a different number of ranks than the job."""
    if not isinstance(cluster, Cluster) or cluster.world_size in (None, modules.world_size):
        return []
    have, need = cluster.world_size, modules.world_size
    return [
        Finding(
            "error",
            "world-size-mismatch",
            f"the modules need {need} ranks but nodes({cluster.nodes}) * "
            f"gpus_per_node({cluster.gpus_per_node}) = {have} GPUs; use "
            f"--nodes {-(-need // cluster.gpus_per_node)} or resize the modules",
        )
    ]


def _job_findings(
    budget: ModulesBudget, max_communicators: int, nccl_memory: float, nvls_limit: int
) -> list[Finding]:
    """The whole job's communicator findings (every module together)."""
    findings = [
        Finding(
            "info",
            "modules-communicators",
            f"over all modules each rank joins {budget.per_rank_min} to {budget.per_rank_max} "
            f"distinct communicators ({budget.communicators} in all, made in {budget.calls} "
            f"creation calls); about {budget.per_rank_max * nccl_memory / 1e9:.3g} GB of GPU "
            f"memory for NCCL on the busiest rank at {nccl_memory / 1e6:.4g} MB per communicator; "
            f"at most {budget.nvls_most} communicators have two or more ranks in one NVLink "
            f"domain, of {nvls_limit} NVLS multicast groups",
        )
    ]
    if budget.per_rank_max > max_communicators:
        findings.append(
            Finding(
                "warning",
                "too-many-communicators",
                f"over all modules one rank joins {budget.per_rank_max} distinct communicators, "
                f"more than max_communicators({max_communicators}); each NCCL communicator "
                "holds its own GPU buffers, so create only the kinds each module uses",
            )
        )
    if budget.nvls_most > nvls_limit:
        findings.append(
            Finding(
                "warning",
                "too-many-nvls-groups",
                f"NVLink domain {budget.nvls_domain} holds {budget.nvls_most} communicators of "
                f"all modules with two or more of its ranks, more than the {nvls_limit} NVLink "
                "SHARP multicast groups of an NVSwitch domain; create only the kinds you use "
                "or set NCCL_NVLS_ENABLE=0",
            )
        )
    return findings
