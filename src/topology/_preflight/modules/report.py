"""ModulesReport: what check_modules found, per module and for the whole job, as data and text."""

from __future__ import annotations

from typing import Any

import attrs

from ..._machine.cluster import Cluster
from ..._machine.rankmap import RankMap
from ..._modules.module import span_text
from ..._modules.modules import Modules
from ..findings import Finding
from ..report import Report, finding_lines, wrapped
from .budget import ModulesBudget

__all__ = ["ModulesReport"]

_MARK = {"error": "ERROR", "warning": "warn ", "info": "info "}


@attrs.frozen(repr=False)
class ModulesReport:
    """Everything :func:`~topology.check_modules` found.

    ``reports[i]`` is the :class:`~topology.Report` of ``modules.modules[i]`` (None for a grid
    module); ``findings`` pairs every finding with its module's name (None for the whole job),
    most severe first; ``budget`` counts the communicators of all modules together.
    """

    modules: Modules
    cluster: Cluster | RankMap
    reports: tuple[Report | None, ...]
    findings: tuple[tuple[str | None, Finding], ...]
    budget: ModulesBudget

    @property
    def ok(self) -> bool:
        """True when no finding, of any module or of the job, is at error level."""
        return all(f.ok for _, f in self.findings)

    @property
    def errors(self) -> tuple[tuple[str | None, Finding], ...]:
        """The error-level findings with their modules."""
        return tuple((m, f) for m, f in self.findings if f.severity == "error")

    def report(self, module: str) -> Report | None:
        """The report of module ``module`` (None for a grid module)."""
        return self.reports[self.modules.names.index(self.modules.module(module).name)]

    def codes(self) -> tuple[tuple[str | None, str], ...]:
        """``(module, code)`` of every finding, in order."""
        return tuple((m, f.code) for m, f in self.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe report (``topology check --modules --json``; schema in docs/schema)."""
        return {
            "ok": self.ok,
            "world_size": self.modules.world_size,
            "colocated": self.modules.colocated,
            "modules": [
                {
                    "name": module.name,
                    "rank_offset": module.rank_offset,
                    "world_size": module.world_size,
                    "layout": str(module.layout),
                    "report": None if report is None else report.to_dict(),
                }
                for module, report in zip(self.modules.modules, self.reports, strict=True)
            ],
            "findings": [{"module": m, **f.to_dict()} for m, f in self.findings],
            "communicators": self.budget.to_dict(),
        }

    def render(self, *, color: bool = False, width: int | None = None) -> str:
        """The text ``topology check --modules`` prints: each module's report, then the job's.

        A header, then per module a ``== module NAME [start, stop)`` section holding its own
        report (as ``topology check`` prints it, without its verdict), then the whole job's
        findings and one verdict over all modules. ``color`` and ``width`` are
        :meth:`Report.render`'s: the header and every finding wrap into lines of at most
        ``width`` columns.

        >>> from topology import Cluster, Module, Modules, Topology, check_modules
        >>> job = Modules([Module("vision", Topology(8)), Module("language", Topology(8, tp=2),
        ...                rank_offset=8)])
        >>> text = check_modules(job, Cluster(gpus_per_node=8)).render(width=60)
        >>> max(len(line) for line in text.splitlines()) <= 60, text.splitlines()[-1]
        (True, 'check ok')
        """
        lines = [*wrapped(str(self.modules), width, "    "), ""]
        for module, report in zip(self.modules.modules, self.reports, strict=True):
            lines += wrapped(f"== module {module.name} {span_text(module.span)}", width, "   ")
            if report is None:
                lines += [*wrapped(f"{module.layout} (a grid: no layout rules)", width, ""), ""]
            else:
                lines += [*report.render(color=color, width=width).splitlines()[:-1]]
        lines.append("== all modules")
        for owner, finding in self.findings:
            if owner is None:
                lines += finding_lines(finding, color, width)
        errors = len(self.errors)
        lines += ["", "check " + ("ok" if self.ok else f"FAILED ({errors} error(s))")]
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return (
            f"ModulesReport(ok={self.ok}, modules={self.modules.names}, "
            f"findings=<{len(self.findings)}>)"
        )
