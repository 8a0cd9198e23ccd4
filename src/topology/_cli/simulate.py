"""``topology simulate``: the step time of one layout, or one of seed 003's toy scenarios."""

from __future__ import annotations

import argparse
from typing import Any

from .common import (
    EXIT_OK,
    CliError,
    Once,
    add_cluster_arguments,
    add_layout_arguments,
    add_output_arguments,
    cluster_from_args,
    topology_from_args,
    write_json,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``simulate`` command."""
    parser = subparsers.add_parser(
        "simulate",
        help="estimate one training step of a layout (or a seed 003 scenario)",
        description="Estimate the step time of a layout: compute, communication per parallel "
        "dimension on its real groups, pipeline bubble and memory per GPU. --scenario runs "
        "seed 003's toy GPU (0d..4d) instead.",
    )
    parser.add_argument(
        "--scenario",
        choices=("0d", "1d", "2d", "3d", "4d", "all"),
        action=Once,
        help="one of seed 003's toy scenarios, or all of them side by side (ignores the layout "
        "flags)",
    )
    parser.add_argument(
        "--model",
        default="llama-7b",
        action=Once,
        help="a model preset or a JSON file (default llama-7b)",
    )
    parser.add_argument(
        "--hardware", default="h100", action=Once, help="toy, h100 or a100 (default h100)"
    )
    add_layout_arguments(parser)
    add_cluster_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the estimate (or scenario) as text or JSON; exit 0."""
    from topology.cost import SCENARIOS, estimate, load_hardware, load_model, scenario

    if args.scenario == "all":
        results = [scenario(name) for name in SCENARIOS]
        if args.json:
            write_json([result.to_dict() for result in results])
        else:
            print("\n\n".join(map(str, results)))
            print()
            print(_table(results))
        return EXIT_OK
    if args.scenario is not None:
        result = scenario(args.scenario)
        if args.json:
            write_json(result.to_dict())
        else:
            print(result)
        return EXIT_OK
    topology = topology_from_args(args)
    cluster = cluster_from_args(args)
    if cluster is None:
        raise CliError("simulate needs the node size: pass --gpus-per-node G (or --scenario)")
    model = load_model(args.model)
    hardware = load_hardware(args.hardware)
    result_estimate = estimate(topology, cluster, model, hardware)
    if args.json:
        data = result_estimate.to_dict()
        data.update({"model": model.name, "hardware": hardware.name})
        write_json(data)
    else:
        print(f"{model.name} on {hardware.name}, {cluster.gpus_per_node} GPUs per node")
        print(result_estimate)
    return EXIT_OK


def _table(results: list[Any]) -> str:
    """One row per scenario: GPUs, compute, communication, bubble, total, and speed-up."""
    rows = [
        f"{'':4}{'GPUs':>6}{'compute':>10}{'comm':>10}{'bubble':>10}{'total':>10}{'speed-up':>10}"
    ]
    base = results[0].estimate.total
    for result in results:
        e = result.estimate
        comm = sum(seconds for _, seconds in e.communication)
        rows.append(
            f"{result.name:4}{e.topology.world_size:>6}{e.compute:>10.4g}{comm:>10.4g}"
            f"{e.bubble:>10.4g}{e.total:>10.4g}{base / e.total:>9.2f}x"
        )
    return "\n".join(rows)
