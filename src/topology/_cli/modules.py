"""``topology check --modules FILE`` and ``topology place --modules FILE``: several modules.

The file format is in :mod:`.modules_file`. ``check`` checks every module on the cluster (or the
allocation) and then their communicators together; ``place`` chooses one host order for all.
"""

from __future__ import annotations

import argparse
import sys

from .._machine.cluster import Cluster
from .._machine.hostlist import host_list
from .._machine.rankmap import RankMap
from .._modules.modules import Modules
from .._preflight.modules.check import check_modules
from .._preflight.modules.place import ModulesArrangement, place_modules
from .allocation_args import (
    allocation_from_args,
    no_cluster_with_allocation,
    order_name,
    placement_allocation,
    rank_map_from_args,
)
from .common import (
    EXIT_FINDINGS,
    EXIT_OK,
    LAYOUT_FLAGS,
    CliError,
    Once,
    cluster_from_args,
    use_color,
    write_json,
)
from .hostfiles import hostfile_text
from .modules_file import read_modules
from .output import check_output, write_output
from .text import terminal_width, wrap

__all__ = ["FORMAT_HELP", "add_modules_argument", "run_check", "run_place"]

FORMAT_HELP = (
    "--modules FILE: several named layouts, each on its own ranks, in TOML ([[module]] tables) "
    'or JSON ({"module": [...]}); each module holds a name and the --config fields of one '
    'layout, rank_offset being its first rank, e.g. [[module]] name = "vision" world_size = 8 '
    '/ [[module]] name = "language" world_size = 8 tp = 2 pp = 2 rank_offset = 8. The spans '
    "are all equal (colocated) or disjoint and tile [0, world_size)."
)


def add_modules_argument(parser: argparse.ArgumentParser) -> None:
    """Add ``--modules FILE`` (the layout flags then must not be given)."""
    parser.add_argument(
        "--modules",
        dest="modules",
        action=Once,
        default=None,
        metavar="FILE",
        help="several modules from a TOML or JSON file instead of one layout (the format: "
        "[[module]] tables of a name and the --config fields; see the description)",
    )


def _modules(args: argparse.Namespace) -> Modules:
    given = [flags[0] for dest, flags, _ in LAYOUT_FLAGS if getattr(args, dest, None) is not None]
    for dest, flag in (("config", "--config"), ("order", "--order"), ("hcp_sizes", "--hcp")):
        if getattr(args, dest, None) is not None:
            given.append(flag)
    if given:
        raise CliError(
            f"--modules gives every layout, so {', '.join(given)} cannot go with it; put the "
            "fields in the modules file"
        )
    path: str = args.modules
    return read_modules(path)


def run_check(args: argparse.Namespace) -> int:
    """``check --modules``: exit 1 if any finding is an error (or a warning with --strict)."""
    modules = _modules(args)
    alloc = allocation_from_args(args)
    where: Cluster | RankMap | None
    if alloc is not None:
        no_cluster_with_allocation(args)
        where = rank_map_from_args(args, modules.world_size)
    else:
        where = cluster_from_args(args)
    if where is None:
        raise CliError("check needs the node size: pass --gpus-per-node G (e.g. 8)")
    report = check_modules(
        modules, where, max_communicators=args.max_communicators, nvls_limit=args.nvls_limit
    )
    if args.json:
        write_json("check-modules", report.to_dict())
    else:
        sys.stdout.write(report.render(color=use_color(args), width=terminal_width()))
    warned = any(f.severity == "warning" for _, f in report.findings)
    failed = not report.ok or (args.strict and warned)
    return EXIT_FINDINGS if failed else EXIT_OK


def run_place(args: argparse.Namespace) -> int:
    """``place --modules``: one host order for every module; text or JSON (``--write-hostfile``'s
    path is checked before placing, the file written before anything is printed)."""
    if args.write_hostfile is not None:
        check_output(args.write_hostfile, "--write-hostfile")
    modules = _modules(args)
    alloc = allocation_from_args(args)
    if alloc is None:
        raise CliError(
            "place needs the job's hosts: pass --allocation, --slurm-topology (with --hosts), "
            "--topograph, --hostfile or --hosts (with --gpus-per-host)"
        )
    if getattr(args, "model", None) is not None:
        raise CliError("--model prices one layout; drop it with --modules")
    order = order_name(args)
    baseline = "listed" if order == "host-order" else order
    found = place_modules(
        modules, placement_allocation(args, alloc, modules.world_size), order=baseline
    )
    if args.write_hostfile is not None:
        rows = zip(found.hosts, found.slots(), strict=False)
        text = hostfile_text(rows, args.hostfile_format)
        write_output(args.write_hostfile, "--write-hostfile", text)
    if args.json:
        write_json("place-modules", {"host_list": host_list(found.hosts), **found.to_dict()})
    else:
        sys.stdout.write(_render(found, terminal_width()))
    return 0


def _render(found: ModulesArrangement, columns: int) -> str:
    """The text of ``place --modules``: the order, then per module its crossings."""
    lines = [*wrap(str(found.modules), columns)]
    verdict = "better than" if found.improved else "no better than"
    lines += ["", f"host order ({verdict} the {found.baseline} order):"]
    lines += wrap(f"  {host_list(found.hosts)}", columns, hang="    ")
    for module, before, after in zip(found.modules.modules, found.before, found.after, strict=True):
        lines += [
            "",
            f"== module {module.name} (ranks {module.rank_offset} to "
            f"{module.rank_offset + module.world_size - 1})",
        ]
        if before is None or after is None:
            lines.append("  a grid: not placed by kind")
            continue
        lines.append("  kind      groups  " + "  ".join(before.tiers))
        for k, kind in enumerate(before.kinds):
            cells = "  ".join(
                f"{before.crossing[k][t]} -> {after.crossing[k][t]}"
                for t in range(len(before.tiers))
            )
            lines.append(f"  {kind:<9} {before.totals[k]:>6}  {cells}")
    return "\n".join(lines) + "\n"
