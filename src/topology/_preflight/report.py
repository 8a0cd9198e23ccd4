"""Report: everything the pre-launch check found, as data and as text (private).

>>> from topology import Cluster, Topology, check
>>> report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
>>> report.ok, [f.code for f in report.errors]
(False, ['tp-larger-than-node'])
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

import attrs

from .._fields import instance, tuple_of
from .._machine.cluster import Cluster
from .._machine.hostlist import host_list
from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from .communicators import Communicators
from .crossings import Crossings
from .findings import Finding
from .placement import Placement

__all__ = ["Report", "finding_lines", "wrapped"]

_MARK = {"error": "ERROR", "warning": "warn ", "info": "info "}
"""The five-character mark that starts a finding's line in the text report."""

_STYLE = {"error": "\x1b[1;31m", "warning": "\x1b[33m", "info": "\x1b[2m"}
"""ANSI styles of the marks when the text is coloured (bold red, yellow, dim)."""

_TIER_COLUMN = 12
"""The narrowest tier column of the crossing table (a longer tier name widens its column)."""

_EXAMPLE_RANKS = 8
"""The text report shows at most this many ranks of a finding's example group."""


@attrs.frozen(repr=False)
class Report:
    """Everything :func:`check` found: findings, a placement row per kind, communicator counts.

    >>> from topology import Cluster, Topology, check
    >>> report = check(Topology(64, tp=8, pp=2), Cluster(gpus_per_node=8, nodes=8))
    >>> report.ok, report.placement("tp").intra_node, report.placement("dp").nodes
    (True, True, 4)
    """

    topology: Topology = attrs.field(validator=instance(Topology))
    cluster: Cluster = attrs.field(validator=instance(Cluster))
    findings: tuple[Finding, ...] = attrs.field(validator=tuple_of(Finding))
    placements: tuple[Placement, ...] = attrs.field(validator=tuple_of(Placement))
    communicators: Communicators = attrs.field(validator=instance(Communicators))
    rank_map: RankMap | None = attrs.field(default=None, validator=instance(RankMap, type(None)))
    crossings: Crossings | None = attrs.field(
        default=None, validator=instance(Crossings, type(None))
    )

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
        name = self.topology.kind(kind).name
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
            "findings": [self._finding_dict(f) for f in self.findings],
            "placement": [p.to_dict() for p in self.placements],
            "communicators": self.communicators.to_dict(),
            **self._allocation_dict(),
        }

    def example_hosts(self, finding: Finding) -> tuple[str, ...]:
        """The hosts the first 64 ranks of ``finding``'s example run on (first seen first), on
        an allocation; ``()`` without one. Ranks past the allocation run on no host (a layout
        larger than its allocation, or a node that holds fewer ranks than it has GPUs) and
        name none.

        >>> from topology import Allocation, Host, Topology, check
        >>> alloc = Allocation([Host(f"node{i}", 6) for i in (1, 2, 3)])
        >>> report = check(Topology(16, tp=8), alloc.rank_map(16))
        >>> [(f.code, report.example_hosts(f)) for f in report.findings if f.example]
        [('tp-larger-than-node', ('node1', 'node2')), ('partial-node', ('node3',))]
        """
        if self.rank_map is None:
            return ()
        hosts, world = self.rank_map.hosts, self.rank_map.world_size
        return tuple(
            dict.fromkeys(
                hosts[self.rank_map.node_of(r)].name for r in finding.example[:64] if r < world
            )
        )

    def _finding_dict(self, finding: Finding) -> dict[str, Any]:
        """A finding's JSON, with ``example_hosts`` on an allocation."""
        data = finding.to_dict()
        if self.rank_map is not None:
            data["example_hosts"] = list(self.example_hosts(finding))
        return data

    def _allocation_dict(self) -> dict[str, Any]:
        """``allocation`` (hosts in launcher order, tiers) and ``crossings`` on a real map."""
        found: dict[str, Any] = {}
        if self.rank_map is not None:
            found["allocation"] = {
                "hosts": list(self.rank_map.host_order),
                "tiers": [t.name for t in self.rank_map.tiers],
            }
        if self.crossings is not None:
            found["crossings"] = self.crossings.to_dict()
        return found

    def render(self, *, color: bool = False, width: int | None = None) -> str:
        """The text report ``topology check`` prints, ending in a newline.

        A header (layout and cluster), one line per finding in report order (most severe
        first) with an example group of up to 8 ranks under each error and warning, the
        placement table (per kind: group size, groups, most nodes one group spans, fewest any
        layout could use, whether every group stays in a node) and the verdict: ``check ok``
        or ``check FAILED (N error(s))``.

        Args:
            color: wrap each finding's mark in ANSI colours (for a terminal).
            width: wrap the header and each finding between words into lines of at most
                this many columns, continuing under the finding's code, and split the tier
                crossing table into tables that fit (``None``: one line per finding, as
                before). Colour codes do not count towards the width.

        >>> from topology import Cluster, Topology, check
        >>> lines = check(Topology(16, tp=16), Cluster(gpus_per_node=8)).render().splitlines()
        >>> lines[0]
        'tp16·cp1·ep1·dp1·pp1 (tp fastest) on 8 GPUs/node (open node count)'
        >>> lines[2].split(":")[0], lines[3]
        ('ERROR tp-larger-than-node', '      e.g. group [0, 1, 2, 3, 4, 5, 6, 7, …]')
        >>> lines[-1]
        'check FAILED (1 error(s))'
        >>> report = check(Topology(16, tp=16), Cluster(gpus_per_node=8))
        >>> max(len(line) for line in report.render(width=60).splitlines())
        60
        """
        lines = [*wrapped(self._header(), width, ""), ""]
        for finding in self.findings:
            lines += finding_lines(finding, color, width, self.example_hosts(finding))
        lines += ["", *self._table(), *self._crossing_table(width), "", self._verdict()]
        return "\n".join(lines) + "\n"

    def _header(self) -> str:
        cluster = self.cluster
        nodes = f"{cluster.nodes} nodes" if cluster.nodes else "open node count"
        domain = f", NVLink domain {cluster.nvlink_domain}" if cluster.nvlink_domain else ""
        return f"{self.topology} on {cluster.gpus_per_node} GPUs/node ({nodes}{domain})"

    def _table(self) -> list[str]:
        lines = [f"{'kind':<20} {'size':>7} {'groups':>8} {'nodes':>6} {'best':>5} in-node"]
        for row in self.placements:
            lines.append(
                f"{row.kind:<20} {row.size:>7} {row.groups:>8} {row.nodes:>6} "
                f"{row.best_nodes:>5} {'yes' if row.intra_node else 'no'}"
                f"{'' if row.exact else ' (sampled)'}"
            )
        return lines

    def _crossing_table(self, width: int | None) -> list[str]:
        """Per kind, groups and how many cross each tier (only on a real rank map); tier names
        in full, the tiers split over several tables where one would be wider than ``width``."""
        found = self.crossings
        if found is None:
            return []
        columns = [max(_TIER_COLUMN, len(tier)) for tier in found.tiers]
        lines: list[str] = []
        for chunk in _chunks(columns, None if width is None else width - len(f"{'':<20} {'':>8}")):
            head = "".join(f" {found.tiers[t]:>{columns[t]}}" for t in chunk)
            lines += ["", f"{'groups crossing':<20} {'groups':>8}{head}"]
            for kind, row, total in zip(found.kinds, found.crossing, found.totals, strict=True):
                cells = "".join(f" {row[t]:>{columns[t]}}" for t in chunk)
                lines.append(f"{kind:<20} {total:>8}{cells}")
        return lines

    def _verdict(self) -> str:
        return "check " + ("ok" if self.ok else f"FAILED ({len(self.errors)} error(s))")


def _chunks(columns: list[int], room: int | None) -> list[list[int]]:
    """The indices of ``columns`` in runs whose cells (a space and the column each) fit
    ``room``; one run when ``room`` is None, and at least one column in every run."""
    runs: list[list[int]] = [[]]
    used = 0
    for i, column in enumerate(columns):
        if runs[-1] and room is not None and used + 1 + column > room:
            runs.append([])
            used = 0
        runs[-1].append(i)
        used += 1 + column
    return runs


def wrapped(text: str, width: int | None, hang: str) -> list[str]:
    """``text`` as one line (``width`` None) or wrapped between words, continuing with ``hang``."""
    if width is None or len(text) <= width:
        return [text]
    return textwrap.wrap(
        text, width, subsequent_indent=hang, break_long_words=False, break_on_hyphens=False
    )


def finding_lines(
    finding: Finding, color: bool, width: int | None = None, hosts: Sequence[str] = ()
) -> list[str]:
    """A finding's line(s), then its example group unless it is empty or the finding is info,
    with the ``hosts`` its ranks run on when given (a host list)."""
    mark = _MARK[finding.severity]
    lines = wrapped(f"{mark} {finding.code}: {finding.message}", width, " " * (len(mark) + 1))
    if color:
        styled = f"{_STYLE[finding.severity]}{mark}\x1b[0m"
        lines[0] = styled + lines[0][len(mark) :]
    example = finding.example
    if example and finding.severity != "info":
        shown = ", ".join(map(str, example[:_EXAMPLE_RANKS]))
        more = ", …" if len(example) > _EXAMPLE_RANKS else ""
        where = f" on {host_list(hosts)}" if hosts else ""
        lines += wrapped(f"      e.g. group [{shown}{more}]{where}", width, " " * 10)
    return lines
