"""``topology place``: the host order that keeps the chattiest groups inside domains.

Runs :func:`topology.place` on the layout and the allocation the flags give, and prints the
chosen host order (node rank = position), the groups of each kind that cross each tier before
(the launcher's order, or ``--host-order``) and after, the method that won and the unused hosts.
``--write-hostfile FILE`` writes the chosen hosts in node order: one name per line
(``--format order``, the default: ``--host-order`` of ``check``, ``show`` and ``place`` reads
it), ``host slots=N`` lines (``hostfile``) or one line per task (``slurm``).

>>> from topology import Allocation, Host, Tier, Topology, place
>>> racks = {"n1": "r1", "n2": "r2", "n3": "r1", "n4": "r2"}
>>> alloc = Allocation([Host(n, 4, (r,)) for n, r in racks.items()], [Tier("rack")])
>>> for line in crossing_table(place(Topology(16, tp=8), alloc), 80):
...     print(line)
kind  groups  node    rack
tp         2  2 -> 2  2 -> 0
etp        2  2 -> 2  2 -> 0
ep        16  0 -> 0  0 -> 0
cp        16  0 -> 0  0 -> 0
pp        16  0 -> 0  0 -> 0
dp         8  8 -> 8  0 -> 8
edp        8  8 -> 8  0 -> 8

(tp groups leave the racks; the dp groups, which talk once a step, now cross them instead.)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._machine.allocation import Allocation
from .._machine.hostlist import host_list
from .._machine.hosts import gpu_counts
from .._machine.rankmap import RankMap
from .._machine.textfile import check_host_name
from .._preflight.place.place import Arrangement, place
from .allocation_args import (
    add_allocation_arguments,
    allocation_from_args,
    order_name,
    placement_allocation,
)
from .common import (
    CliError,
    add_layout_arguments,
    add_output_arguments,
    cost_model_from_arg,
    topology_from_args,
    write_json,
)
from .hostfiles import add_hostfile_arguments, hostfile_text
from .modules import add_modules_argument, run_place
from .output import check_output, write_output
from .simulate import add_preset_arguments
from .text import table, terminal_width, wrap

__all__ = ["crossing_table", "optimality", "register", "run", "to_json"]

_EDGE = 8
"""The text output lists the first and last this many node ranks of a longer host order."""


def register(subparsers: Any) -> None:
    """Add the ``place`` command."""
    parser = subparsers.add_parser(
        "place",
        help="choose the host order (node ranks) that keeps groups inside racks and switches",
        description="Choose which hosts of the allocation run the job and in which order the "
        "launcher should number them (node rank = position), so that as few groups as "
        "possible cross a tier: tp/etp first, then ep and cp, then pp and dp. Prints the order, "
        "the groups that cross each tier before (the launcher's order, or --host-order) and "
        "after, and the hosts left unused. Never worse than the launcher's order; optimal on "
        "allocations of up to 8 hosts and where few host types make it cheap (exact search); "
        "elsewhere it says which entries of the "
        "crossing vector a lower bound proves optimal.",
    )
    add_layout_arguments(parser)
    add_modules_argument(parser)
    add_allocation_arguments(parser)
    add_output_arguments(parser)
    add_preset_arguments(parser, model_default=None, optional=True)
    add_hostfile_arguments(parser, "the chosen hosts", default="order")
    parser.set_defaults(func=run)


def _baseline(arrangement: Arrangement, order: str) -> str:
    """The name of the order compared against (``host-order`` for ``--host-order``)."""
    return order if order == "host-order" else arrangement.baseline


def _method(arrangement: Arrangement, order: str) -> str:
    """The winning method; with ``--host-order`` its ``listed`` order is the given one."""
    return (
        "host-order"
        if order == "host-order" and arrangement.method == "listed"
        else (arrangement.method)
    )


def to_json(
    arrangement: Arrangement, order: str, written: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The ``place --json`` document: ``layout``, ``topology``, ``host_list``,
    :meth:`Arrangement.to_dict` (``hosts``, ``crossings`` per kind and tier before and after),
    ``slots`` (the ranks each host runs, node order) and ``hostfile`` (the ``written`` path and
    format of ``--write-hostfile``, null without it)."""
    data = arrangement.to_dict()
    data["baseline"] = _baseline(arrangement, order)
    data["method"] = _method(arrangement, order)
    data["slots"] = list(arrangement.slots())
    data["hostfile"] = None if written is None else {"path": written[0], "format": written[1]}
    return {
        "layout": str(arrangement.topology),
        "topology": arrangement.topology.to_dict(),
        "host_list": host_list(arrangement.hosts),
        **data,
    }


def crossing_table(arrangement: Arrangement, columns: int, indent: str = "") -> list[str]:
    """Per kind (rows) and tier (columns), the groups that cross: ``before -> after``."""
    before, after = arrangement.before, arrangement.after
    header = ("kind", "groups", *before.tiers)
    rows = []
    for k, kind in enumerate(before.kinds):
        row: list[object] = [kind, before.totals[k]]
        for t in range(len(before.tiers)):
            row.append(f"{before.crossing[k][t]} -> {after.crossing[k][t]}")
        rows.append(row)
    align = "<>" + "<" * len(before.tiers)
    return table(header, rows, columns, align=align, indent=indent, labels=2)


def optimality(arrangement: Arrangement) -> str:
    """One line: whether no host order crosses fewer groups, proven by the exact search or,
    entry by entry of the crossing vector (kind class on tier), by the lower bound.

    >>> from topology import Allocation, Host, Tier, Topology, place
    >>> racks = Allocation([Host(f"n{i}", 4, (r,)) for i, r in enumerate("aaaaabbbbbcccccc")],
    ...                    [Tier("rack")])
    >>> optimality(place(Topology(64, tp=4, pp=4), racks))
    'optimal: every class on every tier meets its lower bound (16 hosts)'
    """
    hosts = len(arrangement.allocation.hosts)
    if len({h.gpus for h in arrangement.allocation.hosts}) > 1:
        return (
            "not proven optimal: hosts of different GPU counts are placed by the launcher "
            "orders and orders that group each domain's hosts, scored on the real rank map"
        )
    if not arrangement.allocation.tiers:
        return "optimal: without tiers every host order crosses the same groups"
    if arrangement.exact:
        return f"optimal: exact search over every order of the {hosts} hosts"
    entries = arrangement.certificate()
    unproven = [
        f"{e['class']} on {e['tier']} ({e['crossing']} cross, at least {e['bound']} must)"
        for e in entries
        if not e["proven"]
    ]
    if not unproven:
        return f"optimal: every class on every tier meets its lower bound ({hosts} hosts)"
    proven = [f"{e['class']} on {e['tier']}" for e in entries if e["proven"]]
    return (
        f"optimal: proven by the lower bound for {', '.join(proven) or 'no class'}; "
        f"unproven ({hosts} hosts, past the exact search): {', '.join(unproven)}"
    )


def render(arrangement: Arrangement, order: str, columns: int) -> str:
    """The text output of ``place``."""
    alloc = arrangement.allocation
    hosts = arrangement.hosts
    counts = {h.gpus for h in alloc.hosts}
    gpus = (
        f"{len(alloc.hosts)} hosts of {alloc.hosts[0].gpus} GPUs"
        if len(counts) == 1
        else f"{len(alloc.hosts)} hosts: {gpu_counts(alloc.hosts)}"
    )
    baseline = _baseline(arrangement, order)
    method = _method(arrangement, order)
    verdict = (
        f"better than the {baseline} order"
        if arrangement.improved
        else f"no order crosses fewer groups than the {baseline} order"
        if arrangement.optimal
        else f"no order found crosses fewer groups than the {baseline} order"
    )
    lines = [*wrap(str(arrangement.topology), columns)]
    tiers = ", ".join(t.name for t in alloc.tiers) or "none (a host list says nothing of racks)"
    lines += wrap(
        f"allocation: {gpus}; tiers: {tiers}",
        columns,
        hang="    ",
    )
    lines += ["", *wrap(f"method: {method} ({verdict})", columns, hang="    ")]
    lines += wrap(optimality(arrangement), columns, hang="    ")
    lines += ["", *wrap(f"host order: {host_list(hosts)}", columns, hang="    ")]
    width = len(str(len(hosts) - 1))
    lines += ["node rank -> host:"]
    shown = list(enumerate(hosts))
    if len(shown) > 2 * _EDGE:
        hidden = len(shown) - 2 * _EDGE
        more = (-1, f"… {hidden} more (all of them: --write-hostfile OUT or --json)")
        shown = [*shown[:_EDGE], more, *shown[-_EDGE:]]
    lines += [
        f"  {'':>{width}}  {name}" if node < 0 else f"  {node:>{width}}  {name}"
        for node, name in shown
    ]
    lines += ["", f"groups that cross each tier ({baseline} order -> chosen order):"]
    lines += crossing_table(arrangement, columns, indent="  ")
    if arrangement.step_time_before is not None and arrangement.step_time_after is not None:
        lines += [
            "",
            f"predicted step time (topology.cost): {arrangement.step_time_before:.4g} s -> "
            f"{arrangement.step_time_after:.4g} s",
        ]
    unused = arrangement.unused
    text = host_list(unused) if unused else "none"
    lines += ["", *wrap(f"unused hosts ({len(unused)}): {text}", columns, hang="    ")]
    return "\n".join(lines) + "\n"


def _writable_names(alloc: Allocation) -> None:
    """Refuse, before placing, a host that a hostfile line cannot hold as itself, so that what
    ``--write-hostfile`` writes, ``--host-order`` and ``--hostfile`` read back unchanged."""
    for host in alloc.hosts:
        check_host_name(host.name, "--write-hostfile")


def run(args: argparse.Namespace) -> int:
    """Place the layout on the allocation; print text or JSON; write the hostfile if asked.

    ``--write-hostfile``'s path and every host name are checked before placing; the file is
    written before anything is printed.
    """
    if args.modules is not None:
        return run_place(args)
    if args.write_hostfile is not None:
        check_output(args.write_hostfile, "--write-hostfile")
    alloc = allocation_from_args(args)
    if alloc is None:
        raise CliError(
            "place needs the job's hosts: pass --allocation, --slurm-topology (with --hosts), "
            "--topograph, --hostfile or --hosts (with --gpus-per-host)"
        )
    if args.write_hostfile is not None:
        _writable_names(alloc)
    topo = topology_from_args(args, default_world_size=alloc.gpus)
    order = order_name(args)
    baseline = "listed" if order == "host-order" else order
    step_time = None
    if args.model is not None:
        from topology.cost import estimate, load_hardware

        model, hardware = cost_model_from_arg(args.model), load_hardware(args.hardware)

        def step_time(rank_map: RankMap) -> float:
            return estimate(topo, rank_map, model, hardware).total

    arrangement = place(
        topo,
        placement_allocation(args, alloc, topo.world_size),
        order=baseline,
        step_time=step_time,
    )
    written = None
    if args.write_hostfile is not None:
        written = (args.write_hostfile, args.hostfile_format)
        rows = zip(arrangement.hosts, arrangement.slots(), strict=False)
        write_output(
            args.write_hostfile, "--write-hostfile", hostfile_text(rows, args.hostfile_format)
        )
    if args.json:
        write_json("place", to_json(arrangement, order, written))
    else:
        sys.stdout.write(render(arrangement, order, terminal_width()))
    return 0
