"""``topology transfer``: the plan that moves a model's weights from one layout to another."""

from __future__ import annotations

import argparse
import math
from typing import Any

from .._architecture.presets import ARCHITECTURES
from .._datafile import read_data
from .._errors import TopologyError
from .._megatron.split.split import MEGATRON_NAMES, PipelineSplit
from .._megatron.topology import Topology
from .._refit.refit import engine_layout, refit
from .._transfer.plan import Transfer, transfer
from .._transfer.weights import weights
from .allocation_args import add_allocation_arguments, allocation_from_args
from .common import (
    CliError,
    Once,
    add_output_arguments,
    int_type,
    model_from_arg,
    plain_int,
    quoted_path,
    shorten,
    write_json,
)
from .completion import with_completer
from .text import fold, terminal_width

__all__ = ["parse_layout", "register", "run", "split_of"]

_INT_FIELDS = (
    "world_size",
    "tp",
    "pp",
    "cp",
    "ep",
    "etp",
    "dp",
    "vpp",
    "gtp",
    "egtp",
    "rank_offset",
)
_TEXT_FIELDS = ("order",)
_SPLIT_INTS = ("first_stage_layers", "last_stage_layers")
_SPLIT_FLAGS = ("account_for_embedding", "account_for_loss")
_SPLIT_KEYS = {**{k: k for k in (*_SPLIT_INTS, *_SPLIT_FLAGS)}, "pipeline_layout": "layout"}
"""A LAYOUT's pipeline-split keys and the :class:`PipelineSplit` field of each (Megatron's
``TransformerConfig`` names are read too, see ``MEGATRON_NAMES``)."""


def register(subparsers: Any) -> None:
    """Add the ``transfer`` command."""
    parser = subparsers.add_parser(
        "transfer",
        help="plan moving a model's weights from a training layout to a generation layout",
        description="Plan which rank sends which slice of which weight to move a model preset "
        "from one layout (--from) to another (--to): bytes per tier of the allocation, the most "
        "bytes a rank sends and receives and their lower bounds. Both layouts span the same "
        "ranks (colocated: what a rank holds already moves nothing) unless --to-offset or "
        "--to-world-size says otherwise.",
    )
    for flag, what in (("--from", "training"), ("--to", "generation")):
        parser.add_argument(
            flag,
            dest=flag[2:] + "_layout",
            required=True,
            action=Once,
            metavar="LAYOUT",
            help=f"the {what} layout: 'tp=8,pp=8,ep=32' (Topology fields, and its pipeline "
            "split: first_stage_layers=N, last_stage_layers=N, pipeline_layout=STR, "
            "account_for_embedding=1, account_for_loss=1) or a --config-style JSON file (also "
            "Megatron's num_layers_in_first_pipeline_stage, ... names)"
            + (
                "; or an engine's: 'engine=vllm,tp=8,dp=2,ep=16' (vllm, sglang, hf: whole tensors)"
                if flag == "--to"
                else ""
            ),
        )
    for flag, what in (
        ("--first-stage-layers", "decoder layers on the first pipeline stage"),
        ("--last-stage-layers", "decoder layers on the last pipeline stage"),
    ):
        parser.add_argument(
            flag,
            dest=flag[2:].replace("-", "_"),
            type=int_type(flag[2:].replace("-", "_")),
            action=Once,
            metavar="N",
            help=f"the --from layout's {what} (Megatron's num_layers_in_"
            f"{flag[2:].split('-')[0]}_pipeline_stage; NeMo-RL's DeepSeek-V3 pp 16: 3 and 2)",
        )
    parser.add_argument(
        "--pipeline-layout",
        dest="pipeline_layout",
        action=Once,
        metavar="STR",
        help="the --from layout's pipeline_model_parallel_layout (Megatron-Bridge's DeepSeek-V3 "
        "pp 16: 'Et*4|(t*4|)*14,tmL')",
    )
    model = parser.add_argument(
        "--model",
        required=True,
        action=Once,
        metavar="MODEL",
        help="a model preset ("
        + ", ".join(ARCHITECTURES)
        + ") or a Hugging Face config.json (or a folder holding one)",
    )
    with_completer(model, lambda: list(ARCHITECTURES))
    parser.add_argument(
        "-w",
        "--world-size",
        dest="world_size",
        type=int_type("world_size"),
        action=Once,
        metavar="N",
        help="ranks of both layouts (default: the layout's world_size, else the allocation's GPUs)",
    )
    parser.add_argument(
        "--to-world-size",
        dest="to_world_size",
        type=int_type("to_world_size"),
        action=Once,
        metavar="N",
        help="ranks of the --to layout when it differs",
    )
    parser.add_argument(
        "--to-offset",
        dest="to_offset",
        type=int_type("to_offset", minimum=0),
        action=Once,
        metavar="N",
        help="the --to layout's first rank (its rank_offset; default 0: colocated)",
    )
    parser.add_argument(
        "--summary",
        action="store_true",
        help="with --json, give the number of operations instead of the list",
    )
    add_allocation_arguments(parser)
    add_output_arguments(parser)
    parser.set_defaults(func=run)


def parse_layout(text: str, flag: str) -> dict[str, Any]:
    """The Topology fields of ``tp=8,pp=8`` or of a JSON file of ``Topology.to_dict()`` fields.

    >>> parse_layout("tp=8,pp=8,order=tp-cp-ep-dp-pp", "--from")
    {'tp': 8, 'pp': 8, 'order': 'tp-cp-ep-dp-pp'}
    """
    if "=" not in text:
        shown = quoted_path(text)
        data = read_data(text, f"{flag} {shown}")
        if not isinstance(data, dict):
            raise CliError(f"{flag} file {shown} must hold an object of Topology fields")
        return {k: v for k, v in data.items() if v is not None}
    fields: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if key in (*_TEXT_FIELDS, "pipeline_layout"):
            fields[key] = value.strip()
        elif key in (*_INT_FIELDS, *_SPLIT_INTS) and (number := plain_int(value)) is not None:
            fields[key] = number
        elif key in _SPLIT_FLAGS and value.strip().lower() in ("1", "true", "0", "false"):
            fields[key] = value.strip().lower() in ("1", "true")
        else:
            raise CliError(
                f"{flag} item {shorten(item)!r} is not FIELD=N; fields: "
                f"{', '.join(_INT_FIELDS)}, order, {', '.join(_SPLIT_KEYS)}"
            )
    return fields


def split_of(fields: dict[str, Any], flag: str) -> PipelineSplit | None:
    """Take the pipeline-split keys (ours or Megatron's) out of a LAYOUT's ``fields``.

    >>> fields = {"pp": 16, "first_stage_layers": 3, "num_layers_in_last_pipeline_stage": 2}
    >>> split_of(fields, "--from"), fields
    (PipelineSplit(first_stage_layers=3, last_stage_layers=2), {'pp': 16})
    """
    given: dict[str, Any] = {}
    for key in [k for k in fields if k in _SPLIT_KEYS or k in MEGATRON_NAMES]:
        ours = _SPLIT_KEYS.get(key) or MEGATRON_NAMES[key]
        if ours in given:
            raise CliError(f"{flag} gives the pipeline split's {ours} twice ({key}); give it once")
        given[ours] = fields.pop(key)
    if not given:
        return None
    try:
        return PipelineSplit(**given)
    except TopologyError as error:
        raise CliError(f"{flag}: {error}") from None


def _layouts(
    args: argparse.Namespace, gpus: int | None
) -> tuple[Topology, Topology, PipelineSplit | None, PipelineSplit | None]:
    src = parse_layout(args.from_layout, "--from")
    dst = parse_layout(args.to_layout, "--to")
    for key in ("first_stage_layers", "last_stage_layers", "pipeline_layout"):
        value = getattr(args, key)
        if value is not None:
            if key in src and src[key] != value:
                raise CliError(
                    f"--{key.replace('_', '-')} {value} and --from's {key}={src[key]} disagree; "
                    "give one"
                )
            src[key] = value
    src_split, dst_split = split_of(src, "--from"), split_of(dst, "--to")
    world = args.world_size or src.get("world_size") or gpus
    if world is None:
        raise CliError("no world size: pass -w N, world_size= in --from, or an allocation")
    src.setdefault("world_size", world)
    if args.world_size:
        src["world_size"] = args.world_size
    dst.setdefault("world_size", args.to_world_size or args.world_size or src["world_size"])
    if args.to_world_size:
        dst["world_size"] = args.to_world_size
    if args.to_offset is not None:
        dst["rank_offset"] = args.to_offset
    return Topology.from_dict(src), Topology.from_dict(dst), src_split, dst_split


def _is_engine(text: str) -> bool:
    """Whether a ``--to`` LAYOUT names an engine (``engine=vllm,tp=8``)."""
    return any(item.partition("=")[0].strip() == "engine" for item in text.split(","))


def run(args: argparse.Namespace) -> int:
    """Print the transfer plan's statistics (or its JSON)."""
    model = model_from_arg(args.model)
    alloc = allocation_from_args(args)
    gpus = sum(h.gpus for h in alloc.hosts) if alloc is not None else None
    engine = None
    if _is_engine(args.to_layout):
        try:
            engine = engine_layout(args.to_layout)
        except TopologyError as error:
            raise CliError(f"--to: {error}") from None
        if args.to_world_size and args.to_world_size != engine.world_size:
            raise CliError(
                f"--to-world-size {args.to_world_size} contradicts --to {engine}, which has "
                f"{engine.world_size} ranks; drop --to-world-size"
            )
        args.to_layout, args.to_world_size = "tp=1", engine.world_size
    src, dst, src_split, dst_split = _layouts(args, gpus)
    if engine is not None:
        plan = refit(
            src,
            engine,
            model,
            rank_offset=dst.rank_offset,
            allocation=alloc,
            src_pipeline_split=src_split,
        ).plan
        to: dict[str, Any] = {**engine.to_dict(), "rank_offset": dst.rank_offset}
        shown = str(engine).replace(",", " ") + (
            f" from rank {dst.rank_offset}" if dst.rank_offset else ""
        )
    else:
        plan = transfer(
            src,
            dst,
            weights(model),
            allocation=alloc,
            src_pipeline_split=src_split,
            dst_pipeline_split=dst_split,
        )
        to, shown = dst.to_dict(), str(dst)
    if args.json:
        ops: Any = len(plan) if args.summary else [op.to_dict() for op in plan.ops]
        write_json(
            "transfer",
            {
                "model": args.model,
                "from": src.to_dict(),
                "to": to,
                "from_pipeline_split": None if src_split is None else src_split.to_megatron(),
                "to_pipeline_split": None if dst_split is None else dst_split.to_megatron(),
                "ops": ops,
                "stats": plan.stats,
            },
        )
        return 0
    print(fold(_text(args.model, src, shown, plan), terminal_width()))
    return 0


def _size(n: int) -> str:
    """Bytes with a decimal unit (``1.50 GB``)."""
    if n < 1000:
        return f"{n} B"
    power = min(int(math.log10(n) // 3), 5)
    return f"{n / 1000**power:.2f} {'BKMGTP'[power]}B".replace("BB", "kB")


def _ratio(value: int, bound: int) -> str:
    return f"{value / bound:.3f}x the bound" if bound else "nothing to move"


def _text(model: str, src: Topology, dst: str, plan: Transfer) -> str:
    s = plan.stats
    lines = [
        f"transfer {model}: {src} -> {dst}",
        f"  weights {len(plan.params):,}, operations {s['ops']:,}, "
        f"senders {s['senders']:,}, receivers {s['receivers']:,}",
        *(
            [
                f"  pipeline split {plan.src_pipeline_split or 'even'} -> "
                f"{plan.dst_pipeline_split or 'even'}"
            ]
            if plan.src_pipeline_split or plan.dst_pipeline_split
            else []
        ),
        f"  bytes moved {_size(s['bytes_total'])}",
        f"  most sent by a rank      {_size(s['max_send_bytes'])} (bound "
        f"{_size(s['max_send_bound'])}: {_ratio(s['max_send_bytes'], s['max_send_bound'])})",
        f"  most received by a rank  {_size(s['max_recv_bytes'])} (bound "
        f"{_size(s['max_recv_bound'])}: {_ratio(s['max_recv_bytes'], s['max_recv_bound'])})",
        f"  most peers of a rank     {s['max_send_peers']} receivers (bound "
        f"{s['max_send_peers_bound']}), {s['max_recv_peers']} senders (bound "
        f"{s['max_recv_peers_bound']})",
    ]
    if s["bytes_by_tier"]:
        lines.append("  bytes by tier (the innermost domain holding both ranks):")
        width = max(len(name) for name in s["bytes_by_tier"])
        for name, nbytes in s["bytes_by_tier"].items():
            lines.append(f"    {name:<{width}}  {_size(nbytes)}")
    return "\n".join(lines)
