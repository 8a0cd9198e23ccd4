"""``topology rank R``: everything about one rank."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._preflight.communicators import rank_communicators
from .common import (
    MAX_INT,
    abbreviate,
    add_cluster_arguments,
    add_layout_arguments,
    add_output_arguments,
    cluster_from_args,
    int_type,
    topology_from_args,
    write_json,
)
from .text import terminal_width, wrap

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``rank`` command."""
    parser = subparsers.add_parser(
        "rank",
        help="explain one rank: coordinates, node, every group, pipeline neighbours",
        description="Explain one global rank: coordinates in the dense and expert grids, node and "
        "local GPU (with --gpus-per-node), its group of every kind and its position there, "
        "pipeline neighbours and embedding membership.",
    )
    last = "past the last rank of the largest layout at the largest offset"
    parser.add_argument(
        "rank", type=int_type("rank", minimum=0, maximum=2 * MAX_INT, why=last), help="global rank"
    )
    add_layout_arguments(parser)
    add_cluster_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the explanation of ``args.rank``."""
    topo = topology_from_args(args)
    cluster = cluster_from_args(args)
    info = topo.rank_info(args.rank)
    rank = args.rank
    shared = rank_communicators(topo, rank)
    if args.json:
        data = info.to_dict()
        data["node"] = None if cluster is None else cluster.node_of(rank)
        data["local_gpu"] = None if cluster is None else cluster.local_gpu(rank)
        data["nvlink_domain"] = None if cluster is None else cluster.domain_of(rank)
        data["communicators"] = list(shared)
        write_json("rank", data)
        return 0
    columns = terminal_width()
    hang = " " * 15
    lines = wrap(f"rank {rank} of {topo}", columns)

    def field(name: str, text: str) -> None:
        nonlocal lines
        lines += wrap(text, columns, f"  {name:<12} ", hang)

    field("dense grid", " ".join(f"{k}={v}" for k, v in info.coord("dense").items()))
    if info.expert:
        field("expert grid", " ".join(f"{k}={v}" for k, v in info.coord("expert").items()))
    if cluster is not None:
        field(
            "node",
            f"{cluster.node_of(rank)}, local GPU {cluster.local_gpu(rank)} "
            f"(NVLink domain {cluster.domain_of(rank)})",
        )
    pipe = info.pipeline
    field(
        "pipeline",
        f"stage {pipe.stage} of {pipe.num_stages}; prev {pipe.prev}, next {pipe.next} "
        f"(wraps); first {pipe.first}, last {pipe.last}",
    )
    embedding = "yes" if pipe.in_embedding else "no"
    position = "yes" if pipe.in_position_embedding else "no"
    field("embedding", f"word {embedding}, position {position}")
    field("groups", "(local rank / size: ranks)")
    kind_width = max(len(kind) for kind in topo.kinds)
    where_width = max(len(f"{len(g)}/{len(g)}:") for _, g in info.groups if g is not None)
    for kind, group in info.groups:
        lead = f"    {kind:<{kind_width}}  "
        if group is None:
            lines += wrap(f"none (stage {pipe.stage} holds no {kind})", columns, lead, " " * 6)
            continue
        where = f"{group.index(rank)}/{len(group)}:".rjust(where_width)
        ranks = abbreviate(group)
        if len(lead) + len(where) + 1 + len(ranks) <= columns:
            lines.append(f"{lead}{where} {ranks}")
        else:  # the ranks on their own line, so the group reads whole
            lines.append(f"{lead}{where}".rstrip())
            lines += wrap(ranks, columns, " " * 6, " " * 7)
    field(
        "communicators",
        f"{len(shared)} distinct non-singleton sets: {', '.join(shared)}",
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
