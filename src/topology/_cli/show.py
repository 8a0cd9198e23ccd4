"""``topology show``: the layout at a glance (a picture up to 256 ranks, else a table)."""

from __future__ import annotations

import argparse
from typing import Any

from .._machine.cluster import Cluster
from .._machine.hostlist import host_list
from .._machine.rankmap import RankMap
from .._megatron.topology import Topology
from .._preflight.crossings import NODE_TIER, Crossings, crossings
from .._preflight.placement import placement
from .allocation_args import (
    add_allocation_arguments,
    allocation_from_args,
    no_cluster_with_allocation,
    order_name,
    rank_map_from_args,
)
from .common import (
    CliError,
    add_cluster_arguments,
    add_layout_arguments,
    add_output_arguments,
    cluster_from_args,
    topology_from_args,
    use_color,
    write_json,
)
from .hostmap import allocation_page, allocation_svg
from .html import html_page
from .output import check_output, write_output
from .picture import MAX_PICTURE_RANKS, cells, picture, render_rich, render_svg, render_text
from .text import table, terminal_width, wrap

__all__ = ["register", "run"]

_DEFAULT_GPUS = 8


def register(subparsers: Any) -> None:
    """Add the ``show`` command."""
    parser = subparsers.add_parser(
        "show",
        help="draw the layout (nodes as boxes, GPUs labelled with coordinates)",
        description="Draw the layout: up to 256 ranks as nodes with one labelled cell per GPU "
        "(r5 t1 p0 d3 = rank 5, tp rank 1, stage 0, dp replica 3); larger worlds as a table. "
        "With an allocation, also each tier's domains with their hosts and ranks, and how many "
        "groups of each kind cross each tier.",
    )
    add_layout_arguments(parser)
    add_cluster_arguments(parser)
    add_allocation_arguments(parser)
    add_output_arguments(parser)
    parser.add_argument(
        "--color-by",
        dest="color_by",
        choices=("tp", "cp", "ep", "dp", "pp"),
        default="pp",
        help="colour cells by this axis's coordinate (default pp)",
    )
    parser.add_argument(
        "--svg",
        metavar="FILE",
        help="also write the picture as SVG to FILE (with an allocation: its hosts by name in "
        "their domains, the first 64 hosts)",
    )
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write a page to FILE: interactive (any size; hover a rank to see its "
        "groups), or with an allocation the --svg drawing of its hosts",
    )
    parser.set_defaults(func=run)


def _sizes(topo: Topology) -> dict[str, int]:
    return {
        "tp": topo.tp,
        "cp": topo.cp,
        "ep": topo.ep,
        "dp": topo.dense.size("dp"),
        "pp": topo.pp,
        "etp": topo.etp,
        "edp": topo.edp,
        **{name: size for name, size in (("gtp", topo.gtp), ("egtp", topo.egtp)) if size > 1},
    }


def _where(
    rank: int, cluster: Cluster | None, rank_map: RankMap | None
) -> tuple[int | None, int | None]:
    """``(node, local GPU)`` of ``rank``, from the rank map or the cluster; None without both."""
    if rank_map is not None:
        location = rank_map.location(rank)
        return location.node, location.local_gpu
    if cluster is not None:
        return rank // cluster.gpus_per_node, rank % cluster.gpus_per_node
    return None, None


def to_json(
    topo: Topology,
    cluster: Cluster | None,
    allocation: dict[str, Any] | None = None,
    rank_map: RankMap | None = None,
) -> dict[str, Any]:
    """The ``show --json`` document (schema in docs/cli.md)."""
    cell_list = None
    if topo.world_size <= MAX_PICTURE_RANKS:
        cell_list = []
        for rank, text, _ in cells(topo):
            info = topo.rank_info(rank)
            node, local_gpu = _where(rank, cluster, rank_map)
            cell_list.append(
                {
                    "rank": rank,
                    "label": text,
                    "node": node,
                    "local_gpu": local_gpu,
                    "dense": info.coord("dense"),
                    "expert": info.coord("expert"),
                }
            )
    layout = str(topo)
    return {
        "layout": layout,
        "summary": layout,  # the name before schema 1, which docs/cli.md promised; same value
        "topology": topo.to_dict(),
        "sizes": _sizes(topo),
        "kinds": {k: {"size": topo.size(k), "groups": len(topo.groups(k))} for k in topo.kinds},
        "cluster": None
        if cluster is None
        else {
            "gpus_per_node": cluster.gpus_per_node,
            "nodes": cluster.nodes,
            "nvlink_domain": cluster.nvlink_domain,
        },
        "cells": cell_list,
        "allocation": allocation,
    }


def picture_cluster(rank_map: RankMap) -> tuple[Cluster | None, str | None]:
    """The :class:`Cluster` the pictures draw for ``rank_map``'s hosts (equal GPU counts, equal
    NVLink domains of consecutive hosts), or None and why the pictures cannot draw it.

    The pictures draw equal nodes in equal NVLink domains; any other allocation is refused
    rather than drawn as a machine it is not.
    """
    hosts = rank_map.hosts
    gpus = sorted({h.gpus for h in hosts})
    if len(gpus) > 1:
        shown = ", ".join(map(str, gpus))
        return None, (
            f"its hosts have {shown} GPUs and the pictures draw equal hosts only; "
            "read the text output's tier tables or use --json"
        )
    whole = RankMap(hosts, rank_map.tiers, sum(h.gpus for h in hosts)).as_cluster()
    if whole is None:
        nvlink = next(i for i, t in enumerate(rank_map.tiers) if t.nvlink)
        sizes: dict[int, int] = {}
        for label in rank_map.host_domain_ids(nvlink):
            sizes[label] = sizes.get(label, 0) + gpus[0]
        shown = ", ".join(map(str, sorted(set(sizes.values()), reverse=True)))
        return None, (
            f"its {rank_map.tiers[nvlink].name} NVLink domains hold {shown} GPUs or are not "
            "consecutive in the host order, and the pictures draw equal domains of consecutive "
            "hosts only; read the text output's tier tables or use --json"
        )
    return Cluster(whole.gpus_per_node, nvlink_domain=whole.nvlink_domain), None


def allocation_json(rank_map: RankMap, found: Crossings, order: str) -> dict[str, Any]:
    """``show --json``'s ``allocation``: the host order used, the rank map and the crossings."""
    return {"order": order, "rank_map": rank_map.to_dict(), "crossings": found.to_dict()}


def rank_ranges(spans: list[tuple[int, int]]) -> str:
    """``(first rank, count)`` spans as ``0-7,16-23`` (touching spans merged, in rank order).

    >>> rank_ranges([(16, 8), (0, 4), (4, 4), (40, 1)])
    '0-7,16-23,40'
    """
    merged: list[list[int]] = []
    for first, count in sorted(spans):
        if merged and merged[-1][1] + 1 == first:
            merged[-1][1] = first + count - 1
        else:
            merged.append([first, first + count - 1])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in merged)


def _crossing_line(found: Crossings, tier: int) -> str:
    parts = [
        f"{kind} {found.crossing[i][tier]} of {found.totals[i]}"
        for i, kind in enumerate(found.kinds)
    ]
    return ", ".join(parts) if parts else "no kinds counted"


def allocation_text(rank_map: RankMap, found: Crossings, order: str, columns: int) -> list[str]:
    """The text sections of ``show`` with an allocation: the host order, then per tier each
    domain with its hosts and ranks and how many groups of each kind cross the tier."""
    hosts = rank_map.to_dict()["hosts"]
    names = [h["name"] for h in hosts]
    head = (
        f"allocation: {rank_map.world_size} ranks on {len(names)} hosts, host order "
        f"{order} (node rank = position): {host_list(names)}"
    )
    lines = ["", *wrap(head, columns, hang="    "), ""]
    lines += wrap(
        f"groups that cross hosts ({NODE_TIER}): {_crossing_line(found, 0)}",
        columns,
        hang="    ",
    )
    for t, tier in enumerate(rank_map.tiers):
        labels = rank_map.host_domain_ids(t)
        domain_names = rank_map.domain_names(t)
        members: dict[int, list[int]] = {}
        for node, label in enumerate(labels):
            members.setdefault(label, []).append(node)
        rows = []
        for label, nodes in members.items():
            name = domain_names[label]
            rows.append(
                (
                    "(unknown)" if name is None else name,
                    len(nodes),
                    host_list([names[n] for n in nodes]),
                    rank_ranges([(hosts[n]["first_rank"], hosts[n]["ranks"]) for n in nodes]),
                )
            )
        kind = " (NVLink)" if tier.nvlink else ""
        lines += ["", f"tier {tier.name}{kind}: {len(members)} domains"]
        lines += table(
            ("domain", "hosts", "names", "ranks"),
            rows,
            columns,
            align="<><<",
            wrap_columns=(2, 3),
            indent="  ",
        )
        lines += wrap(
            f"groups that cross {tier.name}: {_crossing_line(found, t + 1)}",
            columns,
            indent="  ",
            hang="      ",
        )
    return lines


def _table(topo: Topology, cluster: Cluster | None, columns: int) -> str:
    header: tuple[str, ...] = ("kind", "size", "groups")
    rows: list[tuple[object, ...]] = []
    if cluster is not None:
        header += ("nodes/group", "in node")
        for kind in topo.kinds:
            row = placement(topo, cluster, kind)
            in_node = "yes" if row.intra_node else "no"
            rows.append((kind, row.size, row.groups, row.nodes, in_node))
    else:
        rows = [(k, topo.size(k), len(topo.groups(k))) for k in topo.kinds]
    lines = [*wrap(str(topo), columns), "", *table(header, rows, columns, align="<>>>>")]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    """Print the picture, table or JSON; write the SVG and the HTML page if asked.

    Output paths are checked before any work and the files written before anything is printed,
    so a bad path is exit 2 with nothing on stdout.
    """
    for flag, path in (("--svg", args.svg), ("--html", args.html)):
        if path is not None:
            check_output(path, flag)
    alloc = allocation_from_args(args)
    rank_map = found = None
    if alloc is not None:
        no_cluster_with_allocation(args)
        topo = topology_from_args(args, default_world_size=alloc.gpus)
        rank_map = rank_map_from_args(args, topo.rank_offset + topo.world_size)
        cluster = None
    else:
        topo = topology_from_args(args)
        cluster = cluster_from_args(args)
    if rank_map is not None:
        found = crossings(topo, rank_map)
    drawable = topo.world_size <= MAX_PICTURE_RANKS
    node_cluster = cluster or Cluster(min(_DEFAULT_GPUS, topo.world_size))
    if rank_map is not None:
        drawn, _ = picture_cluster(rank_map)
        node_cluster = drawn or node_cluster
        drawable = drawable and drawn is not None
    if args.svg:
        if rank_map is not None:
            write_output(args.svg, "--svg", allocation_svg(topo, rank_map, args.color_by))
        elif not drawable:
            raise CliError(
                f"--svg draws worlds of at most {MAX_PICTURE_RANKS} ranks, got world_size "
                f"{topo.world_size}; use --json for larger layouts (or --html)"
            )
        else:
            write_output(args.svg, "--svg", render_svg(topo, node_cluster, args.color_by))
    if args.html:
        page = (
            html_page(topo, node_cluster, args.color_by)
            if rank_map is None
            else allocation_page(topo, rank_map, args.color_by)
        )
        write_output(args.html, "--html", page)
    if args.json:
        extra = None
        if rank_map is not None and found is not None:
            extra = allocation_json(rank_map, found, order_name(args))
        write_json("show", to_json(topo, cluster, extra, rank_map))
        return 0
    columns = terminal_width()
    after = []
    if rank_map is not None and found is not None:
        after = allocation_text(rank_map, found, order_name(args), columns)
    if not drawable:
        print(_table(topo, cluster, columns), end="")
        if after:
            print("\n".join(after))
        return 0
    print("\n".join(wrap(str(topo), columns)))
    if cluster is None and rank_map is None:
        hint = f"(assuming {node_cluster.gpus_per_node} GPUs per node; set --gpus-per-node)"
        print("\n".join(wrap(hint, columns)))
    lines = picture(topo, node_cluster, args.color_by, columns)
    if use_color(args):
        try:
            render_rich(lines)
            if after:
                print("\n".join(after))
            return 0
        except ImportError:
            pass
    print(render_text(lines), end="")
    if after:
        print("\n".join(after))
    return 0
