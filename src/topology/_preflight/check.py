"""check(): the pre-launch check of a layout against a cluster (private).

It builds the placement rows and communicator counts, runs the rules over them and returns a
:class:`Report` whose findings are sorted most severe first (rules keep their order within a
severity).

>>> from topology import Cluster, Topology
>>> report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
>>> report.ok, [f.code for f in report.errors]
(False, ['tp-larger-than-node'])
"""

from __future__ import annotations

from .._args import show
from .._errors import TopologyError
from .._megatron.topology import Topology
from .cluster import Cluster
from .communicators import communicators
from .findings import SEVERITIES
from .placement import placements
from .report import Report
from .rules import run_rules

__all__ = ["check"]


def check(topology: Topology, cluster: Cluster, *, max_communicators: int = 32) -> Report:
    """Check ``topology`` against ``cluster`` before launch.

    Args:
        topology: the layout.
        cluster: the machine (GPUs per node, optionally nodes and NVLink domain size).
        max_communicators: warn when one rank would join more distinct communicators than this
            (each NCCL communicator holds its own buffers in GPU memory).

    Returns:
        A :class:`Report`; ``report.ok`` is False when any finding is at error level.

    Raises:
        TopologyError: if the arguments are not a Topology and a Cluster.

    >>> from topology import Cluster, Topology
    >>> bad = check(Topology(32, tp=8, order="dp-tp"), Cluster(8, nodes=4))
    >>> [f.code for f in bad.findings if f.severity == "error"]
    ['tp-crosses-nodes']
    """
    if not isinstance(topology, Topology):
        raise TopologyError(f"topology must be a Topology, got {type(topology).__name__}")
    if not isinstance(cluster, Cluster):
        raise TopologyError(
            f"cluster must be a Cluster, got {type(cluster).__name__}; "
            "use e.g. Cluster(gpus_per_node=8)"
        )
    if type(max_communicators) is not int or max_communicators < 1:
        raise TopologyError(
            f"max_communicators must be a positive int, got {show(max_communicators)}"
        )
    rows = placements(topology, cluster)
    counts = communicators(topology)
    findings = run_rules(topology, cluster, rows, counts, max_communicators)
    order = {severity: i for i, severity in enumerate(SEVERITIES)}
    findings = sorted(findings, key=lambda f: order[f.severity])
    return Report(topology, cluster, tuple(findings), rows, counts)
