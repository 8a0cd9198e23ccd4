"""``topology reshape``: the re-layout after lost ranks or hosts (what a launcher calls on failure).

Prints, per kind, how many communicators are reused, trimmed and rebuilt, the ranks that must
fetch their shard, and the new hostfile (host numbers, ``slots`` = GPUs per host); ``--json``
gives one object (``new``, ``rank_of``, ``keeps_shard``, ``active``, ``communicators``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from .._reshape.reshape import POLICIES, Reshape, reshape
from .allocation_args import add_allocation_arguments, allocation_from_args
from .common import (
    add_layout_arguments,
    add_output_arguments,
    int_type,
    topology_from_args,
    write_json,
)
from .text import table, terminal_width

__all__ = ["register", "run"]


def _ranges(text: str) -> list[int]:
    """Numbers and inclusive ranges separated by commas (``0-7,12``).

    >>> _ranges("0-2,5")
    [0, 1, 2, 5]
    """
    out: list[int] = []
    number = int_type("each number", minimum=0)
    try:
        for item in text.split(","):
            low, _, high = item.partition("-")
            first = number(low)
            last = number(high) if high else first
            if last < first:
                raise argparse.ArgumentTypeError(f"range {item!r} runs backwards")
            if last - first > 1 << 24:
                raise argparse.ArgumentTypeError(f"range {item!r} is longer than 2**24")
            out.extend(range(first, last + 1))
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(
            f"{error} (expected numbers or ranges separated by commas like '0-7,12', "
            f"got {text[:40]!r})"
        ) from None
    return out


def register(subparsers: Any) -> None:
    """Add the ``reshape`` command."""
    parser = subparsers.add_parser(
        "reshape",
        help="re-layout after lost ranks or hosts: reused / trimmed / rebuilt communicators",
        description="Re-layout the job without lost ranks or hosts: drop the affected "
        "data-parallel replicas, take spare hosts, or shrink data parallelism (auto: the "
        "cheapest). Host h holds ranks h*G to h*G+G-1 (G = --gpus-per-node).",
    )
    add_layout_arguments(parser)
    parser.add_argument(
        "--gpus-per-node", type=int_type("gpus-per-node"), required=True, metavar="G"
    )
    lost = parser.add_mutually_exclusive_group(required=True)
    lost.add_argument("--lost-ranks", type=_ranges, metavar="RANGES", help="lost ranks (0-7,12)")
    lost.add_argument("--lost", type=_ranges, metavar="HOSTS", help="lost host numbers (3,5-6)")
    parser.add_argument(
        "--spares",
        type=_ranges,
        default=[],
        metavar="HOSTS",
        help="spare host numbers (default with an allocation: its hosts after the layout's)",
    )
    parser.add_argument("--policy", choices=POLICIES, default="auto")
    parser.add_argument(
        "--accumulation",
        type=int_type("accumulation"),
        default=1,
        metavar="N",
        help="gradient-accumulation steps now (the global batch to keep)",
    )
    add_allocation_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the re-layout."""
    allocation = allocation_from_args(args)
    result = reshape(
        topology_from_args(args),
        gpus_per_node=args.gpus_per_node,
        lost_ranks=args.lost_ranks or (),
        lost_hosts=args.lost or (),
        spares=args.spares,
        allocation=allocation,
        policy=args.policy,
        accumulation=args.accumulation,
    )
    if args.json:
        write_json("reshape", _document(result))
        return 0
    names = None if allocation is None else [h.name for h in allocation.hosts]
    print("\n".join(_text(result, args.gpus_per_node, names, terminal_width())))
    return 0


def _document(r: Reshape) -> dict[str, Any]:
    return {
        "policy": r.policy,
        "new": r.new.to_dict(),
        "rank_of": list(r.mapping),
        "keeps_shard": r.kept,
        "active": r.active,
        "communicators": {
            c.kind: {"reuse": c.reuse, "trim": c.trim, "rebuild": c.rebuild}
            for c in r.communicators
        },
        "accumulation": r.accumulation,
        "batch_kept": r.batch_kept,
    }


def _hostfile(r: Reshape, gpus: int, names: Sequence[str] | None) -> list[str]:
    """One line per new host: the old (or spare) host whose GPUs run those new ranks (its
    allocation name, else ``host<number>``)."""
    offset = r.old.rank_offset
    spare = dict(r.replaced)
    host_of = {}
    for local, new in enumerate(r.mapping):
        if new is not None:
            host_of[new - r.new.rank_offset] = local // gpus
    for new, _ in r.sources:
        local = new - r.new.rank_offset
        if local not in host_of:
            host_of[local] = spare.get((new - offset) // gpus, -1)
    lines = []
    for first in range(0, r.new.world_size, gpus):
        hosts = {host_of.get(n, -1) for n in range(first, min(first + gpus, r.new.world_size))}
        name = " ".join(f"host{h}" if names is None else names[h] for h in sorted(hosts))
        lines.append(f"{name} slots={gpus}" + ("  (mixed)" if len(hosts) > 1 else ""))
    return lines


def _text(r: Reshape, gpus: int, names: Sequence[str] | None, width: int) -> list[str]:
    lines = [
        f"policy {r.policy}: {r.old} -> {r.new}",
        f"{len(r.lost)} ranks lost; {r.active} survivors active, {r.kept} keep their shard; "
        f"dp {r.old.dp} -> {r.new.dp}, accumulation {r.accumulation}"
        + ("" if r.batch_kept else " (nearest: the global batch changes)"),
        "",
    ]
    rows = [(c.kind, c.reuse, c.trim, c.rebuild, c.gone) for c in r.communicators]
    lines += table(("kind", "reuse", "trim", "rebuild", "gone"), rows, width, align="lrrrr")
    lines += ["", f"ranks that fetch their shard: {len(r.sources)}"]
    lines += [f"  new rank {new} <- old rank {old}" for new, old in r.sources[:8]]
    if len(r.sources) > 8:
        lines.append(f"  ... and {len(r.sources) - 8} more")
    hostfile = _hostfile(r, gpus, names)
    lines += ["", f"new hostfile ({len(hostfile)} hosts):"]
    lines += ["  " + h for h in hostfile[:16]]
    if len(hostfile) > 16:
        lines.append(f"  ... and {len(hostfile) - 16} more")
    return lines
