"""``topology rank R``: everything about one rank."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .._preflight.communicators import rank_communicators
from .common import (
    abbreviate,
    add_cluster_arguments,
    add_layout_arguments,
    add_output_arguments,
    cluster_from_args,
    topology_from_args,
    write_json,
)

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
    parser.add_argument("rank", type=int, help="global rank")
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
        write_json(data)
        return 0
    out = sys.stdout
    out.write(f"rank {rank} of {topo}\n")
    dense = " ".join(f"{k}={v}" for k, v in info.coord("dense").items())
    out.write(f"  dense grid   {dense}\n")
    if info.expert:
        expert = " ".join(f"{k}={v}" for k, v in info.coord("expert").items())
        out.write(f"  expert grid  {expert}\n")
    if cluster is not None:
        out.write(
            f"  node         {cluster.node_of(rank)}, local GPU {cluster.local_gpu(rank)}"
            f" (NVLink domain {cluster.domain_of(rank)})\n"
        )
    pipe = info.pipeline
    out.write(
        f"  pipeline     stage {pipe.stage} of {pipe.num_stages}; prev {pipe.prev}, "
        f"next {pipe.next} (wraps); first {pipe.first}, last {pipe.last}\n"
    )
    embedding = "yes" if pipe.in_embedding else "no"
    position = "yes" if pipe.in_position_embedding else "no"
    out.write(f"  embedding    word {embedding}, position {position}\n")
    out.write("  groups       (local rank / size: ranks)\n")
    width = max(len(kind) for kind in topo.kinds)
    for kind, group in info.groups:
        if group is None:
            out.write(f"    {kind:<{width}}  none (stage {pipe.stage} holds no {kind})\n")
            continue
        where = f"{group.index(rank)}/{len(group)}"
        out.write(f"    {kind:<{width}}  {where:>7}: {abbreviate(group)}\n")
    out.write(f"  communicators {len(shared)} distinct non-singleton sets: {', '.join(shared)}\n")
    return 0
