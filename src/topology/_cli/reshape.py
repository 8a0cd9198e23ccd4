"""``topology reshape``: the re-layout after lost ranks or hosts (what a launcher calls on failure).

Prints, per kind, how many communicators are reused, trimmed and rebuilt, the ranks that must
fetch their shard (and from which host), the global batch, the new hostfile (host names in node
order, ``slots`` = ranks each runs), the idle hosts and the torchrun and srun lines that launch
the new layout; ``--write-hostfile FILE [--format hostfile|slurm]`` writes the whole hostfile;
``--json`` gives one object (``new``, ``rank_of``, ``keeps_shard``, ``active``,
``communicators``, ``hosts``, ``sources``, ``idle_hosts``, ``launch``, ...).

Hosts: with an allocation flag its hosts, in the launcher's order (``--launcher-order``,
``--host-order``), and their GPU counts; else ``--gpus-per-node`` GPUs a host, host ``h`` named
``host<h>``. ``--lost`` and ``--spares`` take host numbers (node ranks, ``3,5-6``) or host names
as a Slurm host list (``node[3-5,9]``).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

from .._errors import TopologyError
from .._machine.allocation import Allocation
from .._machine.hostlist import expand_hostlist, host_list
from .._reshape.reshape import POLICIES, Relaunch, Reshape, reshape
from .allocation_args import (
    add_allocation_arguments,
    allocation_from_args,
    host_order_from_args,
    no_cluster_with_allocation,
    order_name,
    placement_allocation,
)
from .common import (
    CliError,
    add_layout_arguments,
    add_output_arguments,
    cluster_from_args,
    int_type,
    topology_from_args,
    write_json,
)
from .hostfiles import (
    add_hostfile_arguments,
    command_lines,
    hostfile_text,
    srun_command,
    torchrun_command,
)
from .output import check_output, write_output
from .text import table, terminal_width, wrap

__all__ = ["register", "run"]

_NUMBERS = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")
"""A ``--lost``/``--spares`` value of host numbers (node ranks) and ranges; anything else is a
host list of names."""

_EDGE = 8
"""The text output shows the first and last this many hosts of a longer hostfile."""

_SOURCES = 8
"""The text output lists this many ranks that fetch their shard."""

_PLACEHOLDER = "HOSTFILE"
"""The srun line's ``SLURM_HOSTFILE`` when no slurm-format file is written."""


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


def _hosts(text: str) -> list[int] | list[str]:
    """Host numbers and ranges (``3,5-6``), or host names as a Slurm host list (``node[3-5]``).

    >>> _hosts("3,5-6"), _hosts("node[3-4],gpu9")
    ([3, 5, 6], ['node3', 'node4', 'gpu9'])
    """
    if _NUMBERS.fullmatch(text):
        return _ranges(text)
    try:
        names = list(expand_hostlist(text))
    except TopologyError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not names:
        raise argparse.ArgumentTypeError(
            f"{text[:40]!r} names no host; give host numbers (3,5-6) or names (node[3-5])"
        )
    return names


def register(subparsers: Any) -> None:
    """Add the ``reshape`` command."""
    parser = subparsers.add_parser(
        "reshape",
        help="re-layout after lost ranks or hosts: reused / trimmed / rebuilt communicators",
        description="Re-layout the job without lost ranks or hosts: take spare hosts, drop the "
        "affected data-parallel replicas, or shrink data parallelism (auto: given spares when "
        "they cover the loss, else the cheapest). Prints what each kind reuses, trims and "
        "rebuilds, the global batch, the new hostfile and the torchrun and srun lines that "
        "launch it. The hosts are an allocation's, in the launcher's order (node rank = "
        "position), with their GPU counts; or, with --gpus-per-node G, host h holds ranks h*G "
        "to h*G+G-1 and is named host<h>.",
    )
    add_layout_arguments(parser)
    parser.add_argument(
        "--gpus-per-node",
        dest="gpus_per_node",
        type=int_type("gpus_per_node"),
        metavar="G",
        help="GPUs per host (required unless an allocation gives the hosts; an error with one)",
    )
    lost = parser.add_mutually_exclusive_group(required=True)
    lost.add_argument("--lost-ranks", type=_ranges, metavar="RANGES", help="lost ranks (0-7,12)")
    lost.add_argument(
        "--lost",
        type=_hosts,
        metavar="HOSTS",
        help="lost hosts: node ranks (3,5-6) or names as a host list (node[3-5,9])",
    )
    parser.add_argument(
        "--spares",
        type=_hosts,
        default=[],
        metavar="HOSTS",
        help="spare hosts, numbers or names (default with an allocation: its hosts after the "
        "layout's)",
    )
    parser.add_argument("--policy", choices=POLICIES, default="auto")
    parser.add_argument(
        "--accumulation",
        type=int_type("accumulation"),
        default=1,
        metavar="N",
        help="gradient-accumulation steps now (the global batch to keep)",
    )
    add_hostfile_arguments(parser, "the new hostfile")
    add_allocation_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def _node_order(args: argparse.Namespace, alloc: Allocation, world_size: int) -> Allocation:
    """The allocation's hosts in the order the launcher numbered them: the ``--host-order``
    hosts first (then the rest, the spares, as listed), else ``--launcher-order``."""
    if host_order_from_args(args) is not None:
        return placement_allocation(args, alloc, world_size)
    return alloc.ordered(order_name(args))


def run(args: argparse.Namespace) -> int:
    """Print the re-layout; write the hostfile if asked (before anything is printed)."""
    path: str | None = args.write_hostfile
    if path is not None:
        check_output(path, "--write-hostfile")
    alloc = allocation_from_args(args)
    gpus: int | None = None
    if alloc is not None:
        no_cluster_with_allocation(args)
        topo = topology_from_args(args, default_world_size=alloc.gpus)
        alloc = _node_order(args, alloc, topo.world_size)
    else:
        topo = topology_from_args(args)
        cluster = cluster_from_args(args)
        if cluster is None:
            raise CliError(
                "reshape needs the hosts: pass --gpus-per-node G, or an allocation (--allocation, "
                "--hostfile, --hosts with --gpus-per-host, ...)"
            )
        gpus = cluster.gpus_per_node
    result = reshape(
        topo,
        gpus_per_node=gpus,
        lost_ranks=args.lost_ranks or (),
        lost_hosts=args.lost or (),
        spares=args.spares,
        allocation=alloc,
        policy=args.policy,
        accumulation=args.accumulation,
    )
    launch = result.relaunch
    form: str = args.hostfile_format
    if path is not None:
        write_output(
            path,
            "--write-hostfile",
            hostfile_text(zip(launch.hosts, launch.slots, strict=True), form),
        )
    if args.json:
        write_json("reshape", _document(result, launch, path, form))
    else:
        sys.stdout.write("\n".join(_text(result, launch, path, form, terminal_width())) + "\n")
    return 0


def _commands(r: Reshape, launch: Relaunch, path: str | None, form: str) -> dict[str, Any]:
    """The launch facts and the torchrun and srun lines, from the computed hosts."""
    nnodes, master = len(launch.hosts), launch.hosts[0]
    slurm = path if path is not None and form == "slurm" else None
    return {
        "nnodes": nnodes,
        "nproc_per_node": launch.nproc_per_node,
        "ntasks": r.new.world_size,
        "master_addr": master,
        "hostfile": path,
        "format": form,
        "torchrun": torchrun_command(nnodes, launch.nproc_per_node, master),
        "srun": srun_command(nnodes, r.new.world_size, master, slurm or _PLACEHOLDER),
    }


def _document(r: Reshape, launch: Relaunch, path: str | None, form: str) -> dict[str, Any]:
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
        "global_batch": {"before": r.old_global_batch, "after": r.global_batch},
        "rejected": dict(r.rejected),
        "lost_hosts": list(launch.lost),
        "hosts": [
            {"name": name, "slots": slots, "first_rank": first, "gpus": list(gpus)}
            for name, slots, first, gpus in zip(
                launch.hosts, launch.slots, launch.first_rank, launch.gpus, strict=True
            )
        ],
        "idle_hosts": list(launch.idle),
        "sources": [
            {"rank": new, "host": host, "from_rank": old, "from_host": source}
            for new, host, old, source in launch.sources
        ],
        "launch": _commands(r, launch, path, form),
    }


def _span(gpus: tuple[int, ...]) -> str:
    """Local GPUs as ranges: ``0-3,6-7``."""
    parts: list[str] = []
    start = 0
    while start < len(gpus):
        end = start
        while end + 1 < len(gpus) and gpus[end + 1] == gpus[end] + 1:
            end += 1
        parts.append(str(gpus[start]) if end == start else f"{gpus[start]}-{gpus[end]}")
        start = end + 1
    return ",".join(parts)


def _batch(r: Reshape) -> str:
    """The data parallelism, the accumulation and what becomes of the global batch."""
    head = f"dp {r.old.dp} -> {r.new.dp}, accumulation {r.old_accumulation} -> {r.accumulation}: "
    if r.batch_kept:
        return head + f"the global batch stays {r.global_batch} micro-batches a step"
    return head + (
        f"the global batch changes, {r.old_global_batch} -> {r.global_batch} micro-batches a "
        f"step (no whole accumulation keeps {r.old_global_batch} at dp {r.new.dp})"
    )


def _hostfile_lines(launch: Relaunch, path: str | None, form: str, width: int) -> list[str]:
    """The new hostfile (first and last hosts of a long one) and where the whole file is."""
    ranks = sum(launch.slots)
    lines = [f"new hostfile ({len(launch.hosts)} hosts, {ranks} ranks; node rank = line):"]
    rows = list(zip(launch.hosts, launch.slots, launch.gpus, strict=True))
    shown = [
        f"  {name} slots={slots}"
        + ("" if gpus == tuple(range(slots)) else f"  (GPUs {_span(gpus)})")
        for name, slots, gpus in rows
    ]
    where = (
        f"all of them in {path}"
        if path is not None
        else "all of them: --write-hostfile FILE or --json"
    )
    if len(shown) > 2 * _EDGE:
        more = f"  … {len(shown) - 2 * _EDGE} more ({where})"
        shown = [*shown[:_EDGE], *wrap(more, width, hang="    "), *shown[-_EDGE:]]
    lines += shown
    if path is not None:
        what = "one line per task" if form == "slurm" else "host slots=N a line"
        lines += wrap(f"wrote {path} ({form} format: {what})", width, hang="    ")
    return lines


def _text(r: Reshape, launch: Relaunch, path: str | None, form: str, width: int) -> list[str]:
    lost = launch.lost
    lines = wrap(f"policy {r.policy}: {r.old} -> {r.new}", width, hang="    ")
    lines += wrap(
        f"{len(r.lost)} ranks lost on {len(lost)} host{'s' * (len(lost) != 1)} "
        f"({host_list(lost) or 'none'}); {r.active} survivors active, {r.kept} keep their shard",
        width,
        hang="    ",
    )
    lines += wrap(_batch(r), width, hang="    ")
    for policy, reason in r.rejected:
        lines += wrap(f"{policy} not taken: {reason}", width, hang="    ")
    lines.append("")
    rows = [(c.kind, c.reuse, c.trim, c.rebuild, c.gone) for c in r.communicators]
    lines += table(("kind", "reuse", "trim", "rebuild", "gone"), rows, width, align="lrrrr")
    lines += ["", f"ranks that fetch their shard: {len(launch.sources)}"]
    for new, host, old, source in launch.sources[:_SOURCES]:
        lines += wrap(
            f"new rank {new} on {host} <- old rank {old} on {source}", width, "  ", "    "
        )
    if len(launch.sources) > _SOURCES:
        lines.append(f"  … {len(launch.sources) - _SOURCES} more (all of them: --json)")
    lines += ["", *_hostfile_lines(launch, path, form, width)]
    idle = launch.idle
    lines += wrap(f"idle hosts ({len(idle)}): {host_list(idle) or 'none'}", width, hang="    ")
    commands = _commands(r, launch, path, form)
    lines += ["", "launch on the new hostfile (node rank = its line, from 0):"]
    each = "$NODE_RANK its line" + ("" if launch.nproc_per_node else ", $SLOTS its slots")
    lines += wrap(f"torchrun, on every host ({each}):", width, "  ", "    ")
    lines += command_lines(commands["torchrun"], width, "    ")
    if path is not None and form == "slurm":
        lines.append("  srun, from the batch script:")
    else:
        lines += wrap(
            f"srun, from the batch script ({_PLACEHOLDER}: write it with --write-hostfile "
            f"{_PLACEHOLDER} --format slurm):",
            width,
            "  ",
            "    ",
        )
    lines += command_lines(commands["srun"], width, "    ")
    return lines
