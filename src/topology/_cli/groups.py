"""``topology groups KIND``: every group of one kind, in Megatron's order."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import (
    CliError,
    abbreviate,
    add_layout_arguments,
    add_output_arguments,
    topology_from_args,
    write_json,
)

__all__ = ["register", "run"]

_TEXT_LIMIT = 64


def register(subparsers: Any) -> None:
    """Add the ``groups`` command."""
    parser = subparsers.add_parser(
        "groups",
        help="list the groups of one kind (tp, dp, pp, ep, embedding, mp, ...)",
        description="List every group of KIND in Megatron's order (Megatron names such as mp, "
        "dp_cp or expt_dp are accepted).",
    )
    parser.add_argument("kind", help="group kind, e.g. tp, dp, dp-cp, pp, ep, edp, embedding")
    parser.add_argument(
        "--limit",
        type=int,
        metavar="N",
        help=f"show at most N groups (text default {_TEXT_LIMIT}, JSON default all)",
    )
    parser.add_argument(
        "--full", action="store_true", help="print every rank of long groups in text output"
    )
    add_layout_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the groups of ``args.kind``."""
    topo = topology_from_args(args)
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be a non-negative int, got {args.limit}; e.g. --limit 10")
    kind = topo._kind(args.kind)
    groups = topo.groups(kind)
    count = len(groups)
    limit = args.limit if args.limit is not None else (None if args.json else _TEXT_LIMIT)
    shown = count if limit is None else min(limit, count)
    if args.json:
        write_json(
            {
                "kind": kind,
                "size": topo.size(kind),
                "count": count,
                "groups": [list(groups[i]) for i in range(shown)],
                "truncated": shown < count,
            }
        )
        return 0
    out = sys.stdout
    out.write(f"{kind}: {count} groups of {topo.size(kind)} ranks ({topo})\n")
    width = len(str(count - 1))
    for index in range(shown):
        group = groups[index]
        text = "[" + ", ".join(map(str, group)) + "]" if args.full else abbreviate(group, 8)
        out.write(f"{index:>{width}}  {text}\n")
    if shown < count:
        out.write(f"… {count - shown} more (use --limit N or --json)\n")
    return 0
