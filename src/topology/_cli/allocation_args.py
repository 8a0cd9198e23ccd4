"""The allocation flags every command shares: which hosts a job got, and the launcher's order.

Sources (one at most): ``--allocation FILE`` (our TOML/JSON, docs/allocation.md),
``--slurm-topology FILE`` with ``--hosts HOSTLIST`` (Slurm's ``topology.conf`` and the job's
hosts), ``--topograph FILE`` (NVIDIA Topograph's graph JSON), ``--hostfile FILE`` (one host per
line, ``slots=N``), or ``--hosts HOSTLIST`` alone (hosts without tiers). With a file source,
``--hosts`` selects the job's hosts, in the order given. ``--gpus-per-host N`` gives the GPU
count a source lacks. The launcher numbers the hosts in ``--launcher-order`` (default: as
listed), or exactly as a ``--host-order FILE`` lists them (one host per line; it overrides
``--launcher-order``).

>>> from topology._cli.common import Parser
>>> parser = Parser(prog="demo")
>>> add_allocation_arguments(parser)
>>> args = parser.parse_args(["--hosts", "node[1-3]", "--gpus-per-host", "4",
...                           "--launcher-order", "lexicographic"])
>>> allocation_from_args(args)
<Allocation of 3 hosts, 12 GPUs; tiers: no tiers>
>>> rank_map_from_args(args, 10).host_order
('node1', 'node2', 'node3')
"""

from __future__ import annotations

import argparse
from collections import Counter

from .._args import show
from .._errors import TopologyError
from .._machine.allocation import Allocation, Host, host_slots
from .._machine.hostlist import expand_hostlist
from .._machine.hosts import LAUNCHER_ORDERS
from .._machine.rankmap import RankMap
from .._machine.readers.hostfile import read_hostfile
from .._machine.readers.native_format import read_allocation
from .._machine.readers.slurm_topology import read_slurm_topology
from .._machine.readers.topograph import read_topograph
from .._machine.textfile import check_host_name, lines, read_text
from .common import CliError, Once, cluster_flags_given, int_type

__all__ = [
    "SOURCES",
    "add_allocation_arguments",
    "allocation_from_args",
    "host_order_from_args",
    "no_cluster_with_allocation",
    "order_name",
    "placement_allocation",
    "rank_map_from_args",
]

SOURCES = ("allocation", "slurm_topology", "topograph", "hostfile")
"""The ``dest`` of each file source flag; at most one may be given."""

_FLAG = {
    "allocation": "--allocation",
    "slurm_topology": "--slurm-topology",
    "topograph": "--topograph",
    "hostfile": "--hostfile",
    "hosts": "--hosts",
}


def add_allocation_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the allocation source flags, ``--hosts``, ``--gpus-per-host``, ``--launcher-order``,
    ``--host-order`` and ``--slurm-plugin``."""
    group = parser.add_argument_group(
        "allocation (the hosts the job got; one source at most)",
        "Give the real hosts instead of a uniform cluster; ranks fill the hosts in the "
        "launcher's order, G ranks per host of G GPUs.",
    )
    sources = group.add_mutually_exclusive_group()
    sources.add_argument(
        "--allocation",
        action=Once,
        metavar="FILE",
        help="our allocation file, TOML (.toml) or JSON: hosts, GPUs, tiers (docs/allocation.md)",
    )
    sources.add_argument(
        "--slurm-topology",
        dest="slurm_topology",
        action=Once,
        metavar="FILE",
        help="Slurm topology.conf (tree or block plugin); needs --hosts and --gpus-per-host",
    )
    sources.add_argument(
        "--topograph",
        action=Once,
        metavar="FILE",
        help="NVIDIA Topograph graph JSON ({'instances': [...]}); needs --gpus-per-host",
    )
    sources.add_argument(
        "--hostfile",
        action=Once,
        metavar="FILE",
        help="hostfile, one host per line with optional slots=N (no tiers)",
    )
    group.add_argument(
        "--hosts",
        action=Once,
        metavar="HOSTLIST",
        help="the job's hosts as a Slurm host list (e.g. $SLURM_JOB_NODELIST, 'node[1-18,20]'), "
        "in launcher-listed order: selects hosts of a source file, or alone names hosts "
        "without tiers (with --gpus-per-host)",
    )
    group.add_argument(
        "--gpus-per-host",
        dest="gpus_per_host",
        type=int_type("gpus_per_host"),
        action=Once,
        metavar="N",
        help="GPUs (ranks) per host where the source gives none: --slurm-topology, "
        "--topograph, --hosts alone, hostfile lines without slots=N",
    )
    group.add_argument(
        "--slurm-plugin",
        dest="slurm_plugin",
        choices=("tree", "block"),
        action=Once,
        help="which lines of a topology.conf holding both SwitchName and BlockName to read",
    )
    group.add_argument(
        "--launcher-order",
        dest="launcher_order",
        choices=LAUNCHER_ORDERS,
        action=Once,
        help="how the launcher numbers hosts (node rank): listed (as the source lists them; "
        "a hostfile, SLURM_HOSTFILE, --node-rank by hand; the default), lexicographic (plain "
        "string sort, node10 < node9: what torchrun's rendezvous does), natural (node9 < "
        "node10), slurm (Slurm's default block distribution: hostlist_sort order)",
    )
    group.add_argument(
        "--host-order",
        dest="host_order",
        action=Once,
        metavar="FILE",
        help="the exact host order to check, one host per line (node rank = line); overrides "
        "--launcher-order (e.g. the --write-hostfile of 'topology place')",
    )


def _source(args: argparse.Namespace) -> str | None:
    given = [dest for dest in SOURCES if getattr(args, dest, None) is not None]
    if len(given) > 1:  # argparse's exclusive group stops this; kept for namespaces built by hand
        raise CliError(
            f"{_FLAG[given[0]]} and {_FLAG[given[1]]} are two allocation sources; give one"
        )
    return given[0] if given else None


def _need_gpus(args: argparse.Namespace, what: str) -> int:
    gpus: int | None = getattr(args, "gpus_per_host", None)
    if gpus is None:
        raise CliError(f"{what} gives no GPU counts; pass --gpus-per-host N (e.g. 4 or 8)")
    return gpus


def _selected(alloc: Allocation, hosts: str | None, flag: str) -> Allocation:
    """``alloc`` cut down to (and ordered as) the ``--hosts`` list, when given."""
    if hosts is None:
        return alloc
    names = expand_hostlist(hosts)
    known = {host.name for host in alloc.hosts}
    missing = [name for name in names if name not in known]
    if missing:
        raise CliError(
            f"--hosts names {show(missing[0])}, which {flag} does not list"
            f"{f' (nor {len(missing) - 1} more)' if len(missing) > 1 else ''}; "
            "give hosts of the file"
        )
    repeated = sorted(name for name, n in Counter(names).items() if n > 1)
    if repeated:
        raise CliError(f"--hosts names {show(repeated[0])} twice; list each host once")
    return alloc.with_order(names)


def _read(args: argparse.Namespace) -> Allocation | None:
    source = _source(args)
    hosts: str | None = getattr(args, "hosts", None)
    gpus: int | None = getattr(args, "gpus_per_host", None)
    plugin = getattr(args, "slurm_plugin", None)
    if plugin is not None and source != "slurm_topology":
        raise CliError("--slurm-plugin reads a --slurm-topology file; give one or drop it")
    if source is None:
        if hosts is None:
            return None
        per_host = _need_gpus(args, "--hosts")
        names = expand_hostlist(hosts)
        if not names:
            raise CliError(f"--hosts {show(hosts)} names no hosts; e.g. --hosts 'node[1-4]'")
        return Allocation(tuple(Host(name, per_host) for name in names))
    path: str = getattr(args, source)
    if source == "allocation":
        if gpus is not None:
            raise CliError(
                "--gpus-per-host does not apply to --allocation: the file gives GPU counts "
                "(gpus_per_host, or gpus per host); drop the flag"
            )
        return _selected(read_allocation(path), hosts, f"--allocation {show(path)}")
    if source == "hostfile":
        return _selected(read_hostfile(path, gpus_per_host=gpus), hosts, f"--hostfile {show(path)}")
    if source == "slurm_topology":
        if hosts is None:
            raise CliError(
                "--slurm-topology describes the whole cluster; pass the job's hosts with "
                '--hosts HOSTLIST (e.g. --hosts "$SLURM_JOB_NODELIST")'
            )
        per_host = _need_gpus(args, "--slurm-topology")
        return read_slurm_topology(path, gpus_per_host=per_host, hosts=hosts, plugin=plugin)
    per_host = _need_gpus(args, "--topograph")
    return read_topograph(path, gpus_per_host=per_host, hosts=hosts)


def allocation_from_args(args: argparse.Namespace) -> Allocation | None:
    """The allocation the flags describe, hosts in the source's listed order; None without one.

    Raises:
        CliError: flags that do not go together, a source that lacks ``--gpus-per-host``.
        TopologyError: an unreadable or malformed file, a bad host list.
    """
    cached: tuple[Allocation | None] | None = getattr(args, "_allocation_data", None)
    if cached is None:
        alloc = _read(args)
        if alloc is None:
            for dest, flag in (
                ("launcher_order", "--launcher-order"),
                ("host_order", "--host-order"),
                ("gpus_per_host", "--gpus-per-host"),
            ):
                if getattr(args, dest, None) is not None:
                    raise CliError(
                        f"{flag} needs an allocation: pass --allocation, --slurm-topology, "
                        "--topograph, --hostfile or --hosts"
                    )
        cached = (alloc,)
        args._allocation_data = cached
    return cached[0]


def host_order_from_args(args: argparse.Namespace) -> tuple[str, ...] | None:
    """The host names of ``--host-order FILE`` in file order; None without the flag.

    The file is what ``place --write-hostfile`` writes in either format: one host per line,
    optionally followed by ``slots=N`` (``--format hostfile``), or the same host on consecutive
    lines, one per task (``--format slurm``); such a run is one host running that many ranks.

    Raises:
        CliError: a line holding anything but a name and ``slots=N``, a host listed again
            after another host, no hosts.
        TopologyError: an unreadable file (or one that starts with a byte-order mark), a name
            with a control or format character or hostfile syntax (``check_host_name``).
    """
    read = _host_order_file(args)
    return None if read is None else tuple(read)


def _host_order_file(args: argparse.Namespace) -> dict[str, int | None] | None:
    """``--host-order``'s hosts in file order, each with the ranks the file gives it (its
    ``slots=N``, or its lines when repeated one per task; None when it says nothing)."""
    cached: tuple[dict[str, int | None] | None] | None = getattr(args, "_host_order_data", None)
    if cached is None:
        cached = (_read_host_order(getattr(args, "host_order", None)),)
        args._host_order_data = cached
    return cached[0]


def _read_host_order(path: str | None) -> dict[str, int | None] | None:
    if path is None:
        return None
    label = f"--host-order {show(path)}"
    hosts: dict[str, int | None] = {}
    first: dict[str, int] = {}
    previous = None
    for number, content in lines(read_text(path, label)):
        name, *rest = content.split()
        slots = _slots(rest, f"{label} line {number}", content)
        check_host_name(name, f"{label} line {number}")
        if name == previous and slots is None:  # a slurm hostfile: one line per task
            hosts[name] = (hosts[name] or 1) + 1
            continue
        if name in first:
            raise CliError(
                f"{label} line {number} lists host {show(name)} again (first on line "
                f"{first[name]}); list each host once"
            )
        first[name] = number
        hosts[name] = slots
        previous = name if slots is None else None
    if not hosts:
        raise CliError(f"{label} names no hosts; write one host name per line")
    return hosts


def _slots(rest: list[str], where: str, content: str) -> int | None:
    """The ``slots=N`` after a host name on a ``--host-order`` line; None without one."""
    if not rest:
        return None
    key, _, value = rest[0].partition("=")
    if len(rest) > 1 or key != "slots" or not (value.isascii() and value.isdecimal()):
        raise CliError(
            f"{where} holds {show(content)}; write one host name per line, optionally "
            "followed by slots=N"
        )
    if len(value) > 18 or int(value) < 1:
        raise CliError(f"{where} has slots={value}; slots must be a positive int, e.g. slots=8")
    return int(value)


def order_name(args: argparse.Namespace) -> str:
    """The host order in force: ``"host-order"`` for ``--host-order``, else the launcher's."""
    if getattr(args, "host_order", None) is not None:
        return "host-order"
    order: str | None = getattr(args, "launcher_order", None)
    return order or "listed"


def _ordered(alloc: Allocation, stated: dict[str, int | None], world_size: int) -> Allocation:
    """``alloc`` with the ``--host-order`` hosts in that order, checked to hold ``world_size``
    and to run the ranks the file gives each host (its slots, or its lines one per task)."""
    names = tuple(stated)
    try:
        chosen = alloc.with_order(names)
    except TopologyError as error:
        raise CliError(f"--host-order: {error}") from None
    if chosen.gpus < world_size:
        raise CliError(
            f"--host-order lists {len(names)} hosts with {chosen.gpus} GPUs but the layout "
            f"needs {world_size} ranks; list more hosts"
        )
    runs = dict(zip(names, host_slots(chosen, names, world_size), strict=False))
    for name, slots in stated.items():
        if slots is not None and slots != runs.get(name, 0):
            raise CliError(
                f"--host-order gives host {show(name)} {slots} ranks but {world_size} ranks "
                f"fill it with {runs.get(name, 0)} (its GPUs, in this order); give it "
                f"slots={runs.get(name, 0)} or give the layout's world size"
            )
    return chosen


def rank_map_from_args(args: argparse.Namespace, world_size: int) -> RankMap | None:
    """Where each of ``world_size`` ranks runs on the flags' allocation; None without one.

    Raises:
        CliError: as :func:`allocation_from_args`; a ``--host-order`` naming unknown hosts or
            too few GPUs.
        TopologyError: an unreadable file; ``world_size`` above the allocation's GPUs.
    """
    alloc = allocation_from_args(args)
    if alloc is None:
        return None
    stated = _host_order_file(args)
    if stated is not None:
        return _ordered(alloc, stated, world_size).rank_map(world_size)
    if world_size > alloc.gpus:
        raise CliError(
            f"the layout needs {world_size} ranks but the allocation has {alloc.gpus} GPUs "
            f"on {len(alloc.hosts)} hosts; give more hosts or a smaller --world-size"
        )
    return alloc.rank_map(world_size, order=order_name(args))


def placement_allocation(
    args: argparse.Namespace, alloc: Allocation, world_size: int
) -> Allocation:
    """``alloc`` with the ``--host-order`` hosts first (in that order), then the rest as listed,
    so that its ``listed`` order is the order to compare against; ``alloc`` without the flag."""
    stated = _host_order_file(args)
    if stated is None:
        return alloc
    _ordered(alloc, stated, world_size)
    names = tuple(stated)
    given = set(names)
    rest = tuple(h.name for h in alloc.hosts if h.name not in given)
    return alloc.with_order((*names, *rest))


def no_cluster_with_allocation(args: argparse.Namespace) -> None:
    """Refuse ``--gpus-per-node``, ``--nodes``, ``--nvlink-domain`` (or a config's cluster
    table) next to an allocation: the hosts say all of that, and two answers could disagree."""
    given = cluster_flags_given(args)
    if given:
        raise CliError(
            f"{', '.join(given)} {'describes' if len(given) == 1 else 'describe'} a uniform "
            "cluster, but an allocation gives the "
            f"hosts; drop {'it' if len(given) == 1 else 'them'} (use --gpus-per-host for a "
            "source without GPU counts)"
        )
