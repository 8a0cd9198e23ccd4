"""Report and Finding: the result of a pre-launch check (private).

>>> from topology import Cluster, Topology, check
>>> report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
>>> report.ok, [f.code for f in report.errors]
(False, ['tp-larger-than-node'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from .._args import show
from .._errors import TopologyError
from .._fields import instance, text, tuple_of
from .._layout.groups import Ranks
from .._megatron.topology import Topology
from .cluster import Cluster
from .communicators import Communicators, communicators
from .placement import Placement, placements

__all__ = ["SEVERITIES", "Finding", "Report", "check"]

SEVERITIES = ("error", "warning", "info")
"""Finding severities, most severe first; an ``error`` makes ``Report.ok`` False."""


def _severity(_: object, __: object, value: str) -> None:
    if value not in SEVERITIES:
        raise TopologyError(f"severity must be one of {', '.join(SEVERITIES)}, got {show(value)}")


_REPR_MESSAGE = 600
"""A Finding's repr shows at most this many characters of its message."""


def _ranks(value: Any) -> Sequence[int]:
    if isinstance(value, (Ranks, range)):
        return Ranks.of(value)
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        raise TopologyError(f"Finding.example must be a sequence of ranks, got {show(value)}")
    if any(type(r) is not int for r in value):
        raise TopologyError(f"Finding.example must hold int ranks, got {show(value)}")
    return tuple(value)


@attrs.frozen(repr=False)
class Finding:
    """One thing a launch would regret: a severity, a stable code, a message and an example.

    ``code`` never changes between releases (scripts may match on it); ``example`` is one
    group that shows the problem (empty when the finding is about the whole layout): a tuple,
    or a lazy :class:`Ranks` (equal to the tuple of its ranks) for groups found by ``check``.

    >>> Finding("warning", "partial-node", "world_size 12 is not a multiple of 8", (8, 9)).ok
    True
    """

    severity: str = attrs.field(validator=_severity)
    code: str = attrs.field(validator=text)
    message: str = attrs.field(validator=text)
    example: Sequence[int] = attrs.field(default=(), converter=_ranks)

    @property
    def ok(self) -> bool:
        """True unless the severity is ``error``."""
        return self.severity != "error"

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: ``severity``, ``code``, ``message``, ``example`` (first 64 ranks) and
        ``example_size``."""
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "example": list(self.example[:64]),
            "example_size": len(self.example),
        }

    def __repr__(self) -> str:
        message = self.message
        if len(message) > _REPR_MESSAGE:
            message = message[: _REPR_MESSAGE - 1] + "…"
        example = self.example
        if isinstance(example, Ranks) or len(example) <= 16:
            shown = repr(example)
        else:
            shown = f"<{len(example)} ranks: {', '.join(map(str, example[:4]))}, …, {example[-1]}>"
        return f"Finding({self.severity!r}, {self.code[:80]!r}, {message!r}, {shown})"


@attrs.frozen(repr=False)
class Report:
    """Everything :func:`check` found: findings, a placement row per kind, communicator counts.

    >>> from topology import Cluster, Topology
    >>> report = check(Topology(64, tp=8, pp=2), Cluster(gpus_per_node=8, nodes=8))
    >>> report.ok, report.placement("tp").intra_node, report.placement("dp").nodes
    (True, True, 4)
    """

    topology: Topology = attrs.field(validator=instance(Topology))
    cluster: Cluster = attrs.field(validator=instance(Cluster))
    findings: tuple[Finding, ...] = attrs.field(validator=tuple_of(Finding))
    placements: tuple[Placement, ...] = attrs.field(validator=tuple_of(Placement))
    communicators: Communicators = attrs.field(validator=instance(Communicators))

    @property
    def ok(self) -> bool:
        """True when no finding is at error level."""
        return all(f.ok for f in self.findings)

    @property
    def errors(self) -> tuple[Finding, ...]:
        """The error-level findings."""
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def warnings(self) -> tuple[Finding, ...]:
        """The warning-level findings."""
        return tuple(f for f in self.findings if f.severity == "warning")

    def placement(self, kind: str) -> Placement:
        """The placement row of ``kind`` (Megatron names accepted)."""
        name = self.topology._kind(kind)
        return next(p for p in self.placements if p.kind == name)

    def codes(self) -> tuple[str, ...]:
        """The codes of all findings, in order."""
        return tuple(f.code for f in self.findings)

    def __repr__(self) -> str:
        codes = ", ".join(code[:40] for code in self.codes()[:12])
        more = f", … {len(self.findings) - 12} more" if len(self.findings) > 12 else ""
        return (
            f"Report(ok={self.ok}, topology={self.topology!r}, cluster={self.cluster!r}, "
            f"findings=[{codes}{more}], placements=<{len(self.placements)} kinds>)"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe report; the schema is documented in ``docs/cli.md``."""
        cluster = self.cluster
        return {
            "ok": self.ok,
            "topology": self.topology.to_dict(),
            "cluster": {
                "gpus_per_node": cluster.gpus_per_node,
                "nodes": cluster.nodes,
                "nvlink_domain": cluster.nvlink_domain,
            },
            "findings": [f.to_dict() for f in self.findings],
            "placement": [p.to_dict() for p in self.placements],
            "communicators": self.communicators.to_dict(),
        }


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
    from .rules import run_rules

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
