"""``topology check``: pre-launch findings, placement per kind, communicator counts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._preflight.report import Report, check
from .common import (
    EXIT_FINDINGS,
    EXIT_OK,
    CliError,
    Once,
    add_cluster_arguments,
    add_layout_arguments,
    add_output_arguments,
    cluster_from_args,
    int_type,
    topology_from_args,
    use_color,
    write_json,
)

__all__ = ["register", "run"]

_MARK = {"error": "ERROR", "warning": "warn ", "info": "info "}
_STYLE = {"error": "\x1b[1;31m", "warning": "\x1b[33m", "info": "\x1b[2m"}


def register(subparsers: Any) -> None:
    """Add the ``check`` command."""
    parser = subparsers.add_parser(
        "check",
        help="check a layout against the cluster before launch (exit 1 on errors)",
        description="Check the layout against the cluster: world size vs allocation, groups "
        "that cross nodes although they would fit, stage placement, communicator counts. "
        "Exit code 0 when no finding is an error, 1 otherwise (2 for invalid input, 3 for an "
        "internal error).",
    )
    add_layout_arguments(parser)
    add_cluster_arguments(parser, required=True)
    add_output_arguments(parser)
    parser.add_argument(
        "--max-communicators",
        dest="max_communicators",
        type=int_type("max_communicators"),
        action=Once,
        default=32,
        metavar="N",
        help="warn when one rank joins more distinct communicators (default 32)",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 on warnings too (for CI gates)"
    )
    parser.set_defaults(func=run)


def _text(report: Report, color: bool) -> str:
    topo, cluster = report.topology, report.cluster
    nodes = f"{cluster.nodes} nodes" if cluster.nodes else "open node count"
    domain = f", NVLink domain {cluster.nvlink_domain}" if cluster.nvlink_domain else ""
    lines = [f"{topo} on {cluster.gpus_per_node} GPUs/node ({nodes}{domain})", ""]
    for finding in report.findings:
        mark = _MARK[finding.severity]
        if color:
            mark = f"{_STYLE[finding.severity]}{mark}\x1b[0m"
        lines.append(f"{mark} {finding.code}: {finding.message}")
        if finding.example and finding.severity != "info":
            shown = ", ".join(map(str, finding.example[:8]))
            more = ", …" if len(finding.example) > 8 else ""
            lines.append(f"      e.g. group [{shown}{more}]")
    lines += ["", f"{'kind':<20} {'size':>7} {'groups':>8} {'nodes':>6} {'best':>5} in-node"]
    for row in report.placements:
        lines.append(
            f"{row.kind:<20} {row.size:>7} {row.groups:>8} {row.nodes:>6} {row.best_nodes:>5} "
            f"{'yes' if row.intra_node else 'no'}{'' if row.exact else ' (sampled)'}"
        )
    verdict = "ok" if report.ok else f"FAILED ({len(report.errors)} error(s))"
    lines += ["", f"check {verdict}"]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Run the check; exit 1 if any finding is an error (or a warning with --strict)."""
    topo = topology_from_args(args)
    cluster = cluster_from_args(args)
    if cluster is None:  # add_cluster_arguments(required=True) makes this unreachable
        raise CliError("check needs the node size: pass --gpus-per-node G (e.g. 8)")
    report = check(topo, cluster, max_communicators=args.max_communicators)
    if args.json:
        write_json(report.to_dict())
    else:
        sys.stdout.write(_text(report, use_color(args)))
    failed = not report.ok or (args.strict and bool(report.warnings))
    return EXIT_FINDINGS if failed else EXIT_OK
