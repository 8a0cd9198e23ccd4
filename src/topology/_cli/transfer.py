"""``topology transfer``: the plan that moves a model's weights from one layout to another."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from .._architecture.presets import ARCHITECTURES
from .._datafile import read_data
from .._errors import TopologyError
from .._megatron.split.split import MEGATRON_NAMES, PipelineSplit
from .._megatron.topology import Topology
from .._refit.refit import RankRefit, engine_layout, refit, refit_rank
from .._transfer.metadata import shard_table
from .._transfer.params import Param
from .._transfer.plan import RankTransfer, Transfer, TransferOp, spanned_ranks, transfer
from .._transfer.rank import transfer_rank
from .._transfer.timing import TransferTime, transfer_time
from .._transfer.weights import weights
from .allocation_args import add_allocation_arguments, allocation_from_args
from .common import (
    CliError,
    Once,
    add_output_arguments,
    int_type,
    json_schema_id,
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
    parser.add_argument(
        "--hardware",
        action=Once,
        help="with an allocation, the hardware preset whose links time the plan: NICs per GPU "
        "(inter) and NVLink per GPU (intra); default h100: 50 GB/s, 450 GB/s",
    )
    parser.add_argument(
        "--relay",
        action="store_true",
        help="with an allocation, send a piece several GPUs of one host need (and none holds) "
        "to one of them over the network, then on to the others over NVLink (stage-2 "
        "operations): each piece enters a host's NICs once",
    )
    parser.add_argument(
        "--rank",
        type=int_type("rank", minimum=0),
        action=Once,
        metavar="R",
        help="print only rank R's sends and receives, planned without the whole plan",
    )
    parser.add_argument(
        "--write-plans",
        dest="write_plans",
        action=Once,
        metavar="DIR",
        help="write each rank's sends and receives to DIR/rank-R.jsonl (one operation a line) "
        "and the plan's statistics, layouts and file names to DIR/manifest.json",
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
    items: dict[str, str] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if key in items:
            raise CliError(
                f"{flag} gives {key} twice ({shorten(items[key])!r}, {shorten(item)!r}); "
                "give it once"
            )
        items[key] = item
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
        _agree(src, key, getattr(args, key), f"--{key.replace('_', '-')}", "--from")
    src_split, dst_split = split_of(src, "--from"), split_of(dst, "--to")
    _agree(src, "world_size", args.world_size, "-w", "--from")
    world = src.get("world_size") or gpus
    if world is None:
        raise CliError("no world size: pass -w N, world_size= in --from, or an allocation")
    src["world_size"] = world
    if args.to_world_size is not None:
        _agree(dst, "world_size", args.to_world_size, "--to-world-size", "--to")
    else:
        _agree(dst, "world_size", args.world_size, "-w", "--to")
    dst.setdefault("world_size", world)
    _agree(dst, "rank_offset", args.to_offset, "--to-offset", "--to")
    return Topology.from_dict(src), Topology.from_dict(dst), src_split, dst_split


def _agree(fields: dict[str, Any], key: str, value: object, option: str, flag: str) -> None:
    """Set a LAYOUT's ``key`` to ``value`` given by ``option`` (None: not given); a different
    value of ``key`` in the layout is refused.

    >>> _agree({"world_size": 16}, "world_size", 8, "-w", "--from")
    Traceback (most recent call last):
    topology._cli.common.CliError: -w 8 and --from's world_size=16 disagree; give one
    """
    if value is None:
        return
    if key in fields and fields[key] != value:
        raise CliError(
            f"{option} {value} and {flag}'s {key}={shorten(str(fields[key]))} disagree; give one"
        )
    fields[key] = value


def _is_engine(text: str) -> bool:
    """Whether a ``--to`` LAYOUT names an engine (``engine=vllm,tp=8``)."""
    return any(item.partition("=")[0].strip() == "engine" for item in text.split(","))


def run(args: argparse.Namespace) -> int:
    """Print the transfer plan's statistics (or its JSON), one rank's part, or write every
    rank's part to files."""
    if args.rank is not None and args.write_plans is not None:
        raise CliError("--rank and --write-plans both given; give one")
    from topology.cost import load_hardware

    hardware = load_hardware(args.hardware or "h100")
    model = model_from_arg(args.model)
    folder = None if args.write_plans is None else _plans_folder(args.write_plans)
    alloc = allocation_from_args(args)
    if args.hardware is not None and alloc is None:
        raise CliError(
            f"--hardware {shorten(args.hardware)} times the plan on an allocation; give one "
            "(--hosts HOSTLIST --gpus-per-host N, --allocation FILE, ...) or drop --hardware"
        )
    if args.relay and alloc is None:
        raise CliError(
            "--relay routes through the hosts of an allocation; give one (--hosts HOSTLIST "
            "--gpus-per-host N, --allocation FILE, ...) or drop --relay"
        )
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
    params = weights(model)
    to: dict[str, Any] = dst.to_dict()
    shown = str(dst)
    if engine is not None:
        to = {**engine.to_dict(), "rank_offset": dst.rank_offset}
        shown = str(engine).replace(",", " ") + (
            f" from rank {dst.rank_offset}" if dst.rank_offset else ""
        )
    head = {
        "model": args.model,
        "from": src.to_dict(),
        "to": to,
        "from_pipeline_split": None if src_split is None else src_split.to_megatron(),
        "to_pipeline_split": None if dst_split is None else dst_split.to_megatron(),
    }
    if args.rank is not None and engine is not None:
        into = refit_rank(
            src,
            engine,
            model,
            args.rank,
            rank_offset=dst.rank_offset,
            allocation=alloc,
            src_pipeline_split=src_split,
            relay=args.relay,
        )
        if args.json:
            ops: Any = len(into.part.ops) if args.summary else _landed(into)
            write_json("transfer", {**head, "rank": args.rank, "ops": ops, "params": into.table()})
        else:
            print(fold(_rank_text(args.model, src, shown, into.part), terminal_width()))
        return 0
    if args.rank is not None:
        mine = transfer_rank(
            src,
            dst,
            params,
            args.rank,
            allocation=alloc,
            src_pipeline_split=src_split,
            dst_pipeline_split=dst_split,
            relay=args.relay,
        )
        if args.json:
            ops = len(mine.ops) if args.summary else [op.to_dict() for op in mine.ops]
            shards = shard_table(dst, params, pipeline_split=dst_split)
            write_json("transfer", {**head, "rank": args.rank, "ops": ops, "params": shards})
        else:
            print(fold(_rank_text(args.model, src, shown, mine), terminal_width()))
        return 0
    table: list[dict[str, Any]] | None = None
    if engine is not None:
        planned = refit(
            src,
            engine,
            model,
            rank_offset=dst.rank_offset,
            allocation=alloc,
            src_pipeline_split=src_split,
            relay=args.relay,
        )
        plan = planned.plan
        if args.json:
            table = planned.table()
    else:
        plan = transfer(
            src,
            dst,
            params,
            allocation=alloc,
            src_pipeline_split=src_split,
            dst_pipeline_split=dst_split,
            relay=args.relay,
        )
    timed = None
    if alloc is not None:
        timed = transfer_time(
            plan,
            alloc,
            nic_bandwidth=hardware.inter.bandwidth,
            nvlink_bandwidth=hardware.intra.bandwidth,
        )
    if folder is not None:
        _write_plans(folder, plan, head)
    if args.json:
        ops = len(plan) if args.summary else [op.to_dict() for op in plan.ops]
        time = None if timed is None else {"hardware": hardware.name, **timed.to_dict()}
        document = {**head, "ops": ops, "stats": plan.stats, "time": time}
        document["params"] = (
            shard_table(dst, params, pipeline_split=dst_split) if table is None else table
        )
        write_json("transfer", document)
        return 0
    text = _text(args.model, src, shown, plan)
    if timed is not None:
        text += "\n" + _time_text(hardware.name, timed)
    if folder is not None:
        files = spanned_ranks(plan.src, plan.dst)
        text += f"\n  plans written: {files:,} rank files and manifest.json in "
        text += quoted_path(str(folder))
    print(fold(text, terminal_width()))
    return 0


def _plans_folder(text: str) -> Path:
    """``--write-plans DIR``: a folder, made if missing (before planning)."""
    if not text:
        raise CliError("--write-plans is empty; give a folder")
    folder = Path(text)
    try:
        if folder.exists() and not folder.is_dir():
            raise CliError(
                f"--write-plans {quoted_path(text)} is a file, not a folder; give a folder"
            )
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as error:
        why = error.strerror if isinstance(error, OSError) else str(error)
        raise CliError(f"--write-plans {quoted_path(text)}: {why}; give a folder") from None
    return folder


def _write_plans(folder: Path, plan: Transfer, head: dict[str, Any]) -> None:
    """Write one JSON-lines file per rank (its sends, then its receives, each in plan order),
    streamed rank by rank, then ``manifest.json``."""
    templates = [_template(param) for param in plan.params]
    files = []
    for rank in range(spanned_ranks(plan.src, plan.dst)):
        path = f"rank-{rank}.jsonl"
        counts = []
        with open(folder / path, "w", encoding="utf-8") as out:
            for side in (0, 1):
                lines = [
                    _line(row, templates, stage) for stage, row in plan.staged_rank_rows(rank, side)
                ]
                out.writelines(lines)
                counts.append(len(lines))
        files.append({"rank": rank, "path": path, "sends": counts[0], "recvs": counts[1]})
    manifest = {"schema": json_schema_id("transfer-manifest"), **head, "stats": plan.stats}
    with open(folder / "manifest.json", "w", encoding="utf-8") as out:
        json.dump({**manifest, "files": files}, out, indent=1)
        out.write("\n")


def _template(param: Param) -> str:
    """The JSON line of an operation on ``param`` as :meth:`TransferOp.to_dict` spells it
    (compact), its name and dim filled in, a ``%d`` for each other value, less its closing
    brace (a 2-D block adds ``rows``)."""
    name = json.dumps(param.name).replace("%", "%%")
    return (
        f'{{"src":%d,"dst":%d,"param":{name},"dim":{param.cut_dim},"start":%d,"stop":%d,'
        '"src_start":%d,"dst_start":%d,"bytes":%d'
    )


def _line(row: tuple[Any, ...], templates: list[str], stage: int = 1) -> str:
    """One operation row (:attr:`Transfer.rows`) of ``stage`` as a JSON line."""
    end = "}\n" if stage == 1 else f',"stage":{stage}}}\n'
    if len(row) == 8:
        src, dst, index, start, stop, src_start, dst_start, nbytes = row
        line: str = templates[index] % (src, dst, start, stop, src_start, dst_start, nbytes)
        return line + end
    src, dst, index, start, stop, src_start, dst_start, nbytes, (a, z, b, c) = row
    line = templates[index] % (src, dst, start, stop, src_start, dst_start, nbytes)
    return line + f',"rows":{{"start":{a},"stop":{z},"src_start":{b},"dst_start":{c}}}' + end


def _landed(into: RankRefit) -> list[dict[str, Any]]:
    """A rank's operations in the ``ops`` format, each receive with the boxes of the engine's
    local tensors it fills (``into``: ``{"tensor", "box"}``)."""
    found = [op.to_dict() for op in into.sends]
    for op in into.recvs:
        boxes = [{"tensor": n, "box": [list(d) for d in b]} for n, b in into.boxes(op)]
        found.append({**op.to_dict(), "into": boxes})
    return found


def _rank_text(model: str, src: Topology, dst: str, mine: RankTransfer) -> str:
    """Rank ``mine.rank``'s sends and receives, one a line."""
    sent = sum(op.nbytes for op in mine.sends)
    got = sum(op.nbytes for op in mine.recvs)
    lines = [
        f"transfer {model}: {src} -> {dst}, rank {mine.rank}",
        f"  sends {len(mine.sends):,} operations ({_size(sent)}), receives "
        f"{len(mine.recvs):,} ({_size(got)})",
    ]
    for verb, ops, peer in (("send", mine.sends, "dst"), ("recv", mine.recvs, "src")):
        for op in ops:
            lines.append(
                f"  {verb} {'to' if peer == 'dst' else 'from'} {getattr(op, peer)}: "
                f"{op.param.name}[{_where(op)}] ({_size(op.nbytes)})"
            )
    return "\n".join(lines)


def _where(op: TransferOp) -> str:
    """The global slice of ``op`` as ``dim d start:stop`` (and its dim-0 rows of a 2-D block)."""
    cut = f"dim {op.param.cut_dim} {op.start}:{op.stop}"
    return cut if op.rows is None else f"rows {op.rows[0]}:{op.rows[1]}, {cut}"


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
        *(
            [
                f"  relay copies {s['relay_ops']:,} operations ({_size(s['relay_bytes'])}) over "
                "NVLink, after the network stage (stage 2)"
            ]
            if "relay_ops" in s
            else []
        ),
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


def _time_text(hardware: str, timed: TransferTime) -> str:
    """The predicted time and its bound, each with the resource that sets it."""
    return "\n".join(
        [
            f"  time on {hardware} links (NICs {_size(round(timed.nic_bandwidth))}/s per GPU, "
            f"NVLink {_size(round(timed.nvlink_bandwidth))}/s per GPU, each way):",
            f"    predicted time  {timed.seconds:.4g} s ({timed.busiest})",
            f"    lower bound     {timed.bound:.4g} s ({timed.bound_by}): "
            + (f"{timed.ratio:.3f}x the bound" if timed.bound else "nothing to move"),
        ]
    )
