"""``topology simulate``: the step time of one layout, or one of the toy teaching scenarios.

The scenarios (0d..4d) run the toy GPU model of the small educational step-time simulator the
cost model was checked against (README, "Where this differs"): one GPU, then data, tensor,
pipeline and context parallelism added one at a time.
"""

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
    cost_model_from_arg,
    topology_from_args,
    write_json,
)
from .completion import with_completer
from .text import fold, table, terminal_width

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``simulate`` command."""
    parser = subparsers.add_parser(
        "simulate",
        help="estimate one training step of a layout (or a toy teaching scenario)",
        description="Estimate the step time of a layout: compute, communication per parallel "
        "dimension on its real groups, pipeline bubble and memory per GPU. --scenario instead "
        "runs a toy GPU model from the educational step-time simulator the README cites: 0d "
        "one GPU, 1d data parallel, 2d + tensor parallel, 3d + pipeline, 4d + context parallel.",
    )
    parser.add_argument(
        "--scenario",
        choices=("0d", "1d", "2d", "3d", "4d", "all"),
        action=Once,
        help="one toy scenario (0d..4d, on the toy GPU model), or all of them side by side; "
        "ignores the layout flags",
    )
    add_preset_arguments(parser, model_default="llama-7b")
    add_layout_arguments(parser)
    add_cluster_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the estimate (or scenario) as text or JSON; exit 0."""
    from topology.cost import SCENARIOS, estimate, load_hardware, scenario

    if args.scenario == "all":
        results = [scenario(name) for name in SCENARIOS]
        if args.json:
            write_json("simulate", {"scenarios": [result.to_dict() for result in results]})
        else:
            columns = terminal_width()
            print("\n\n".join(fold(str(result), columns) for result in results))
            print()
            print(_table(results, columns))
        return EXIT_OK
    if args.scenario is not None:
        result = scenario(args.scenario)
        if args.json:
            write_json("simulate", result.to_dict())
        else:
            print(fold(str(result), terminal_width()))
        return EXIT_OK
    topology = topology_from_args(args)
    cluster = cluster_from_args(args)
    if cluster is None:
        raise CliError("simulate needs the node size: pass --gpus-per-node G (or --scenario)")
    model = cost_model_from_arg(args.model)
    hardware = load_hardware(args.hardware)
    result_estimate = estimate(topology, cluster, model, hardware)
    if args.json:
        data = result_estimate.to_dict()
        data.update({"model": model.name, "hardware": hardware.name})
        write_json("simulate", data)
    else:
        columns = terminal_width()
        title = f"{model.name} on {hardware.name}, {cluster.gpus_per_node} GPUs per node"
        print(fold(title, columns))
        print(fold(str(result_estimate), columns))
    return EXIT_OK


def add_preset_arguments(
    parser: argparse.ArgumentParser, *, model_default: str | None, optional: bool = False
) -> None:
    """Add ``--model`` (required when ``model_default`` is None, unless ``optional``) and
    ``--hardware``."""
    default = "" if model_default is None else f" (default {model_default})"
    model = parser.add_argument(
        "--model",
        default=model_default,
        required=model_default is None and not optional,
        action=Once,
        help=f"a model preset ({model_presets()}), a JSON file of model fields or a Hugging "
        f"Face config.json (or its folder){default}",
    )
    hardware = parser.add_argument(
        "--hardware",
        default="h100",
        action=Once,
        help=f"a hardware preset: {hardware_presets()} (default h100)",
    )
    with_completer(model, model_names)
    with_completer(hardware, hardware_names)


def model_names() -> list[str]:
    """The model presets ``--model`` accepts."""
    from topology.cost import MODELS

    return list(MODELS)


def hardware_names() -> list[str]:
    """The hardware presets ``--hardware`` accepts."""
    from topology.cost import HARDWARE

    return list(HARDWARE)


def model_presets() -> str:
    """The model presets ``--model`` accepts, comma-separated."""
    return ", ".join(model_names())


def hardware_presets() -> str:
    """The hardware presets ``--hardware`` accepts, comma-separated."""
    return ", ".join(hardware_names())


def _table(results: list[Any], columns: int) -> str:
    """One row per scenario: GPUs, compute, communication, bubble, total, and speed-up."""
    header = ("", "GPUs", "compute", "comm", "bubble", "total", "speed-up")
    base = results[0].estimate.total
    rows = []
    for result in results:
        e = result.estimate
        comm = sum(seconds for _, seconds in e.communication)
        rows.append(
            (
                result.name,
                e.topology.world_size,
                f"{e.compute:.4g}",
                f"{comm:.4g}",
                f"{e.bubble:.4g}",
                f"{e.total:.4g}",
                f"{base / e.total:.2f}x",
            )
        )
    return "\n".join(table(header, rows, columns, align="<>>>>>>"))
