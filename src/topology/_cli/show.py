"""``topology show``: the layout at a glance (a picture up to 256 ranks, else a table)."""

from __future__ import annotations

import argparse
from typing import Any

from .._megatron.topology import Topology
from .._preflight.cluster import Cluster
from .._preflight.placement import placement
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
from .html import html_page
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
        "(r5 t1 p0 d3 = rank 5, tp rank 1, stage 0, dp replica 3); larger worlds as a table.",
    )
    add_layout_arguments(parser)
    add_cluster_arguments(parser)
    add_output_arguments(parser)
    parser.add_argument(
        "--color-by",
        dest="color_by",
        choices=("tp", "cp", "ep", "dp", "pp"),
        default="pp",
        help="colour cells by this axis's coordinate (default pp)",
    )
    parser.add_argument("--svg", metavar="FILE", help="also write the picture as SVG to FILE")
    parser.add_argument(
        "--html",
        metavar="FILE",
        help="also write an interactive page to FILE (any size; hover a rank to see its groups)",
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
    }


def to_json(topo: Topology, cluster: Cluster | None) -> dict[str, Any]:
    """The ``show --json`` document (schema in docs/cli.md)."""
    gpus = cluster.gpus_per_node if cluster else None
    cell_list = None
    if topo.world_size <= MAX_PICTURE_RANKS:
        cell_list = []
        for rank, text, _ in cells(topo):
            info = topo.rank_info(rank)
            cell_list.append(
                {
                    "rank": rank,
                    "label": text,
                    "node": None if gpus is None else rank // gpus,
                    "local_gpu": None if gpus is None else rank % gpus,
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
    }


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


def _write(path: str, flag: str, text: str) -> None:
    """Write ``text`` to ``path`` or raise a CliError naming ``flag``."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as error:
        raise CliError(f"cannot write {flag} {path!r}: {error.strerror or error}") from None


def run(args: argparse.Namespace) -> int:
    """Print the picture, table or JSON; write the SVG and the HTML page if asked."""
    topo = topology_from_args(args)
    cluster = cluster_from_args(args)
    if args.json:
        write_json("show", to_json(topo, cluster))
    drawable = topo.world_size <= MAX_PICTURE_RANKS
    node_cluster = cluster or Cluster(min(_DEFAULT_GPUS, topo.world_size))
    if args.svg:
        if not drawable:
            raise CliError(
                f"--svg draws worlds of at most {MAX_PICTURE_RANKS} ranks, got world_size "
                f"{topo.world_size}; use --json for larger layouts"
            )
        _write(args.svg, "--svg", render_svg(topo, node_cluster, args.color_by))
    if args.html:
        _write(args.html, "--html", html_page(topo, node_cluster, args.color_by))
    if args.json:
        return 0
    columns = terminal_width()
    if not drawable:
        print(_table(topo, cluster, columns), end="")
        return 0
    print("\n".join(wrap(str(topo), columns)))
    if cluster is None:
        hint = f"(assuming {node_cluster.gpus_per_node} GPUs per node; set --gpus-per-node)"
        print("\n".join(wrap(hint, columns)))
    lines = picture(topo, node_cluster, args.color_by, columns)
    if use_color(args):
        try:
            render_rich(lines)
            return 0
        except ImportError:
            pass
    print(render_text(lines), end="")
    return 0
