"""``topology check``: pre-launch findings, placement per kind, communicator counts."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._machine.cluster import Cluster
from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from .._preflight.budget import NVLS_LIMIT
from .._preflight.check import check
from .allocation_args import (
    add_allocation_arguments,
    allocation_from_args,
    no_cluster_with_allocation,
    rank_map_from_args,
)
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
from .completion import kind_names, with_completer
from .modules import FORMAT_HELP, add_modules_argument, run_check
from .text import terminal_width

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``check`` command."""
    parser = subparsers.add_parser(
        "check",
        help="check a layout against the cluster before launch (exit 1 on errors)",
        description="Check the layout against the cluster: world size vs allocation, groups "
        "that cross nodes although they would fit, stage placement, communicator counts. "
        "With an allocation (--allocation, --slurm-topology, --topograph, --hostfile or "
        "--hosts) the ranks run on those hosts in the launcher's order, and the report counts "
        "the groups that cross each tier. "
        "Exit code 0 when no finding is an error, 1 otherwise (2 for invalid input, 3 for an "
        "internal error). " + FORMAT_HELP,
    )
    add_layout_arguments(parser)
    add_modules_argument(parser)
    add_cluster_arguments(parser, required=True, unless="an allocation is given")
    add_allocation_arguments(parser)
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
        "--nvls-limit",
        dest="nvls_limit",
        type=int_type("nvls_limit"),
        action=Once,
        default=NVLS_LIMIT,
        metavar="N",
        help=f"NVLS multicast groups one NVLink domain holds (default {NVLS_LIMIT})",
    )
    for flag, meaning in (
        ("--separate", "never shares a communicator with an equal rank set (for overlap)"),
        ("--independent", "gets a second communicator of its own (a separate all-gather group)"),
    ):
        action = parser.add_argument(
            flag,
            action="append",
            default=[],
            metavar="KIND",
            help=f"a kind that {meaning}, as ProcessGroups.create(... {flag[2:]}=) makes it; "
            "counted in the communicator budget (repeatable)",
        )
        with_completer(action, kind_names)
    action = parser.add_argument(
        "--pg-options",
        dest="pg_options",
        action="append",
        default=[],
        metavar="KIND[,KIND]",
        help="kinds that share one pg_options object of their own, as ProcessGroups.create(... "
        "pg_options=) gets it: they share no communicator with other kinds; counted in the "
        "communicator budget (repeatable, one object per flag)",
    )
    with_completer(action, kind_names)
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 on warnings too (for CI gates)"
    )
    parser.set_defaults(func=run)


def pg_options_from_args(flags: list[str], topo: Topology) -> dict[str, object]:
    """``--pg-options`` flags as ``check``'s ``pg_options``: one stand-in options object per
    flag, shared by the kinds it lists (``check`` compares options objects by identity).

    Raises:
        CliError: an empty kind in a list, or a kind named twice.
        TopologyError: a kind the layout does not have.
    """
    options: dict[str, object] = {}
    for flag in flags:
        shared = object()
        for name in flag.split(","):
            if not name.strip():
                raise CliError(
                    f"--pg-options {flag!r} has an empty kind; list kinds with commas, e.g. "
                    "--pg-options dp-cp,edp"
                )
            kind = topo.kind(name.strip()).name
            if kind in options:
                raise CliError(
                    f"--pg-options names {kind} twice; give each kind once (one flag per "
                    "options object)"
                )
            options[kind] = shared
    return options


def run(args: argparse.Namespace) -> int:
    """Run the check; exit 1 if any finding is an error (or a warning with --strict)."""
    if args.modules is not None:
        return run_check(args)
    alloc = allocation_from_args(args)
    where: Cluster | RankMap | None
    if alloc is not None:
        no_cluster_with_allocation(args)
        topo = topology_from_args(args, default_world_size=alloc.gpus)
        where = rank_map_from_args(args, topo.rank_offset + topo.world_size)
    else:
        topo = topology_from_args(args)
        where = cluster_from_args(args)
    if where is None:  # add_cluster_arguments(required=True) makes this unreachable
        raise CliError("check needs the node size: pass --gpus-per-node G (e.g. 8)")
    report = check(
        topo,
        where,
        max_communicators=args.max_communicators,
        nvls_limit=args.nvls_limit,
        separate=args.separate,
        independent=args.independent,
        pg_options=pg_options_from_args(args.pg_options, topo),
    )
    if args.json:
        write_json("check", report.to_dict())
    else:
        sys.stdout.write(report.render(color=use_color(args), width=terminal_width()))
    failed = not report.ok or (args.strict and bool(report.warnings))
    return EXIT_FINDINGS if failed else EXIT_OK
