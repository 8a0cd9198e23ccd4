"""``topology groups KIND``: every group of one kind, in Megatron's order."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._layout.groups import JSON_RANKS
from .common import (
    CliError,
    abbreviate,
    add_layout_arguments,
    add_output_arguments,
    int_type,
    topology_from_args,
    write_json,
)
from .completion import kind_names, with_completer
from .text import terminal_width, wrap

__all__ = ["register", "run"]

_LIMIT = 64
"""Groups shown unless ``--limit`` says otherwise (text and JSON)."""

_FULL_RANKS = 1 << 16
"""``--full`` spells out groups of at most this many ranks; longer ones stay summarised."""


def register(subparsers: Any) -> None:
    """Add the ``groups`` command."""
    parser = subparsers.add_parser(
        "groups",
        help="list the groups of one kind (tp, dp, pp, ep, embedding, mp, ...)",
        description="List every group of KIND in Megatron's order (Megatron names such as mp, "
        "dp_cp or expt_dp are accepted).",
    )
    kind = parser.add_argument(
        "kind", help="group kind, e.g. tp, dp, dp-cp, pp, ep, edp, embedding"
    )
    with_completer(kind, kind_names)
    parser.add_argument(
        "--limit",
        type=int_type("limit", minimum=0),
        metavar="N",
        help=f"show at most N groups (default {_LIMIT}); the output says how many it left out",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"spell out every rank of groups up to {_FULL_RANKS} ranks (text and JSON)",
    )
    add_layout_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the groups of ``args.kind``."""
    topo = topology_from_args(args)
    if args.limit is not None and args.limit < 0:
        raise CliError(f"--limit must be a non-negative int, got {args.limit}; e.g. --limit 10")
    kind = topo.kind(args.kind).name
    groups = topo.groups(kind)
    count = len(groups)
    size = topo.size(kind)
    shown = min(_LIMIT if args.limit is None else args.limit, count)
    spelled = _FULL_RANKS if args.full else JSON_RANKS
    if args.json:
        write_json(
            "groups",
            {
                "kind": kind,
                "size": size,
                "count": count,
                "groups": [groups.ranks(i).to_json(spelled) for i in range(shown)],
                "truncated": shown < count,
                "omitted": count - shown,
            },
        )
        return 0
    columns = terminal_width()
    lines = wrap(f"{kind}: {count} groups of {size} ranks ({topo})", columns)
    width = len(str(count - 1))
    for index in range(shown):
        group = groups.ranks(index)
        if args.full and len(group) <= _FULL_RANKS:
            text = "[" + ", ".join(map(str, group)) + "]"
        else:
            text = abbreviate(group, 8)
        lines += wrap(text, columns, f"{index:>{width}}  ", " " * (width + 2))
    if shown < count:
        lines += wrap(f"… {count - shown} more groups not shown (use --limit N)", columns)
    if args.full and size > _FULL_RANKS:
        note = f"(--full spells out groups of at most {_FULL_RANKS} ranks; these have {size})"
        lines += wrap(note, columns)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
