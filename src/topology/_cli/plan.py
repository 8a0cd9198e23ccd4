"""``topology plan``: rank every layout of a world size by estimated step time."""

from __future__ import annotations

import argparse
import textwrap
from collections.abc import Sequence
from typing import Any

from .common import (
    EXIT_OK,
    CliError,
    Once,
    add_cluster_arguments,
    add_output_arguments,
    cluster_from_args,
    cost_model_from_arg,
    int_type,
    quoted_path,
    write_json,
)
from .simulate import add_preset_arguments
from .text import fold, table, terminal_width

__all__ = ["register"]

_PLOT_LINES = ("compute", "tp", "cp", "ep", "pp", "dp", "edp", "bubble")


def register(subparsers: Any) -> None:
    """Add the ``plan`` command."""
    parser = subparsers.add_parser(
        "plan",
        help="rank every layout of a world size by estimated step time",
        description="Cost every factorisation tp*cp*pp*dp (and ep for MoE models) of the world "
        "size on the cluster, drop what does not fit, and rank the rest.",
    )
    parser.add_argument(
        "--world-size",
        "-w",
        dest="world_size",
        type=int_type("world_size"),
        action=Once,
        metavar="N",
        help="number of ranks (default: nodes x gpus-per-node)",
    )
    add_preset_arguments(parser, model_default=None)
    parser.add_argument(
        "--top",
        type=int_type("top"),
        default=5,
        action=Once,
        metavar="K",
        help="layouts to list (5)",
    )
    parser.add_argument(
        "--max-tp",
        dest="max_tp",
        type=int_type("max_tp"),
        action=Once,
        metavar="N",
        help="largest tp to try (default: the NVLink domain)",
    )
    parser.add_argument(
        "--plot",
        action=Once,
        metavar="FILE",
        help="write a .png or .svg of the step time by dimension",
    )
    add_cluster_arguments(parser, required=True)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the ranked layouts and the explanation (or JSON); optionally plot them; exit 0."""
    from topology.cost import load_hardware, plan

    cluster = cluster_from_args(args)
    if cluster is None:
        raise CliError("plan needs the node size: pass --gpus-per-node G (e.g. 8)")
    world_size = args.world_size or cluster.world_size
    if world_size is None:
        raise CliError("no world size: pass --world-size N, or --nodes with --gpus-per-node")
    if args.plot is not None:
        _check_plot_target(args.plot)
    result = plan(
        world_size,
        cluster,
        cost_model_from_arg(args.model),
        load_hardware(args.hardware),
        top=args.top,
        max_tp=args.max_tp,
    )
    if args.plot is not None:
        _plot(result, args.plot)
    if args.json:
        write_json("plan", result.to_dict())
    else:
        print(render(result, terminal_width()))
    return EXIT_OK


def render(result: Any, columns: int) -> str:
    """The plan as text at most ``columns`` wide: what was costed, the ranking, the winner.

    The ranking is a table (place, seconds per step, layout, the lines of the step in seconds)
    whose layout and breakdown cells wrap between words; the explanation wraps below it.
    """
    title, *_ = str(result).split("\n", 1)
    rows = []
    for place, est in enumerate(result.ranked, start=1):
        parts = [f"compute {est.compute:.3g}"]
        parts += [f"{n} {s:.3g}" for n, s in est.communication if s]
        if est.bubble:
            parts.append(f"bubble {est.bubble:.3g}")
        rows.append((f"{place}.", f"{est.total:.4g}", str(est.topology), ", ".join(parts)))
    header = ("#", "s/step", "layout", "breakdown (s)")
    lines = [fold(title, columns), ""]
    lines += table(header, rows, columns, align=">><<", wrap_columns=(2, 3))
    lines += ["", fold(result.explain(), columns)]
    return "\n".join(lines)


def _check_plot_target(path: str) -> None:
    if not path.endswith((".png", ".svg")):
        raise CliError(f"--plot {quoted_path(path)} must end in .png or .svg")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise CliError(
            "--plot needs matplotlib, which is not installed; pip install matplotlib"
        ) from None


def plot_labels(result: Any) -> list[str]:
    """One full label per ranked layout (order, vpp and all), wrapped to two lines at most.

    The layouts that decide a ranking often differ only in the parenthesis (``vpp2``, the
    fastest axis), so nothing of the layout's name is dropped.
    """
    return [
        f"{place}. " + "\n".join(textwrap.wrap(str(estimate.topology), 34))
        for place, estimate in enumerate(result.ranked, start=1)
    ]


def axis_start(totals: Sequence[float], computes: Sequence[float]) -> float:
    """Where the seconds axis starts: just below the smallest compute time (never below 0).

    Every layout of a plan computes about as long; the ranking is decided by communication and
    the bubble, stacked after compute. Bars from 0 squeeze those into the last sliver of the
    plot; starting just before the first bar's compute ends shows all of them at full width.

    >>> axis_start([8.08, 8.1, 8.27], [7.77, 7.77, 7.77])
    7.72
    >>> axis_start([1.0, 3.0], [0.2, 0.2])
    0.0
    """
    lowest = min(computes)
    margin = 0.1 * (max(totals) - lowest)
    return max(0.0, round(lowest - margin, 10))


def _plot(result: Any, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = plot_labels(result)
    totals = [e.total for e in result.ranked]
    figure, axes = plt.subplots(figsize=(9, 1.2 + 0.7 * max(1, len(labels))))
    left = [0.0] * len(labels)
    for line in _PLOT_LINES:
        values = [_value(e, line) for e in result.ranked]
        if any(values):
            axes.barh(labels, values, left=left, label=line)
            left = [a + b for a, b in zip(left, values, strict=True)]
    start = axis_start(totals, [e.compute for e in result.ranked])
    axes.set_xlim(start, max(totals) + 0.05 * (max(totals) - start))
    axes.invert_yaxis()
    axes.tick_params(axis="y", labelsize="small")
    note = f" (axis starts at {start:.3g} s: compute bars are cut)" if start > 0 else ""
    axes.set_xlabel(f"seconds per step{note}")
    axes.set_title(f"{result.model} on {result.world_size} x {result.hardware}")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    figure.tight_layout()
    try:
        figure.savefig(path)
    except OSError as error:
        raise CliError(
            f"cannot write --plot {quoted_path(path)}: {error.strerror or error}"
        ) from None
    finally:
        plt.close(figure)


def _value(estimate: Any, line: str) -> float:
    if line == "compute":
        return float(estimate.compute)
    if line == "bubble":
        return float(estimate.bubble)
    return float(estimate.comm(line))
