"""What every command shares: layout and cluster flags, JSON output, and the exit-code policy.

Exit codes: 0 ok, 1 a finding at error level, 2 invalid input (one line on stderr, no
traceback). A command raises :class:`CliError` (or ``TopologyError``) for invalid input;
``main`` turns either into exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from .._cluster import Cluster
from .._topology import Topology

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_INVALID",
    "EXIT_OK",
    "CliError",
    "Parser",
    "abbreviate",
    "add_cluster_arguments",
    "add_layout_arguments",
    "add_output_arguments",
    "cluster_from_args",
    "one_line",
    "topology_from_args",
    "use_color",
    "write_json",
]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INVALID = 2

_LAYOUT_FLAGS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("world_size", ("--world-size", "-w"), "number of ranks (default: nodes x gpus-per-node)"),
    ("tp", ("--tp", "--tensor-model-parallel-size"), "tensor-parallel size"),
    ("pp", ("--pp", "--pipeline-model-parallel-size"), "pipeline-parallel size"),
    ("cp", ("--cp", "--context-parallel-size"), "context-parallel size"),
    ("ep", ("--ep", "--expert-model-parallel-size"), "expert-parallel size"),
    ("etp", ("--etp", "--expert-tensor-parallel-size"), "expert tensor-parallel size (default tp)"),
    ("dp", ("--dp",), "data-parallel size (derived; checked if given)"),
    (
        "vpp",
        ("--vpp", "--virtual-pipeline-model-parallel-size"),
        "virtual pipeline chunks per stage",
    ),
    ("rank_offset", ("--rank-offset",), "first rank of the layout"),
    (
        "dist_opt_instances",
        ("--dist-opt-instances", "--num-distributed-optimizer-instances"),
        "distributed-optimizer instances",
    ),
)
_CLUSTER_FIELDS = ("gpus_per_node", "nodes", "nvlink_domain")


class CliError(Exception):
    """Invalid command-line input; ``main`` prints the message and exits with code 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        """Print ``topology <cmd>: error: <message>`` and exit 2 (no usage block)."""
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _int_list(text: str) -> list[int]:
    try:
        return [int(item) for item in text.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected integers separated by commas like '2,4', got {text!r}"
        ) from None


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and the layout flags (Megatron's long names are aliases)."""
    group = parser.add_argument_group("layout (flags override --config)")
    group.add_argument(
        "--config",
        metavar="FILE",
        help="JSON or TOML file with Topology.to_dict() fields (a [topology] and a [cluster] "
        "table are also accepted)",
    )
    for dest, flags, text in _LAYOUT_FLAGS:
        group.add_argument(*flags, dest=dest, type=_int, metavar="N", help=text)
    group.add_argument("--order", help="Megatron order string, innermost first (tp-cp-ep-dp-pp)")
    group.add_argument(
        "--hcp-sizes",
        "--hierarchical-context-parallel-sizes",
        dest="hcp_sizes",
        type=_int_list,
        metavar="A,B",
        help="hierarchical context-parallel level sizes (product = cp)",
    )


def add_cluster_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Add ``--gpus-per-node``, ``--nodes`` and ``--nvlink-domain``."""
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "--gpus-per-node",
        dest="gpus_per_node",
        type=_int,
        metavar="G",
        help="GPUs per node" + (" (required)" if required else ""),
    )
    group.add_argument("--nodes", type=_int, metavar="N", help="nodes in the allocation")
    group.add_argument(
        "--nvlink-domain",
        dest="nvlink_domain",
        type=_int,
        metavar="G",
        help="GPUs per NVLink domain (default: the node)",
    )
    parser.set_defaults(_cluster_required=required)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` and ``--no-color``."""
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="print JSON (schema in docs/cli.md)")
    group.add_argument("--no-color", dest="no_color", action="store_true", help="no colour")


def _read_config(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except OSError as error:
        raise CliError(f"cannot read --config {path!r}: {error.strerror or error}") from None
    if path.endswith(".toml"):
        import tomllib

        try:
            data: Any = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise CliError(f"--config {path!r} is not valid TOML: {error}") from None
    else:
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CliError(
                f"--config {path!r} is not valid JSON ({error}); write the output of "
                "Topology.to_dict() or use a .toml file"
            ) from None
    if not isinstance(data, dict):
        raise CliError(
            f"--config {path!r} must hold an object of topology fields, got {type(data).__name__}"
        )
    return data


def _config(args: argparse.Namespace) -> dict[str, Any]:
    cached = getattr(args, "_config_data", None)
    if cached is None:
        cached = {} if getattr(args, "config", None) is None else _read_config(args.config)
        args._config_data = cached
    return dict(cached)


def _split_config(data: Mapping[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if "topology" in data or "cluster" in data:
        unknown = sorted(set(data) - {"topology", "cluster"})
        if unknown:
            raise CliError(
                f"--config {path!r} has an unexpected key {unknown[0]!r} next to the "
                "'topology'/'cluster' tables; keep only those two"
            )
        topo, cluster = data.get("topology", {}), data.get("cluster", {})
        for name, table in (("topology", topo), ("cluster", cluster)):
            if not isinstance(table, dict):
                raise CliError(f"--config {path!r}: '{name}' must be a table of fields")
        return dict(topo), dict(cluster)
    return dict(data), {}


def topology_from_args(args: argparse.Namespace) -> Topology:
    """The Topology given by ``--config`` and the layout flags (flags win).

    Raises:
        CliError: for an unreadable or malformed config file or a missing world size.
        TopologyError: for an invalid layout.
    """
    fields, cluster_fields = _split_config(_config(args), getattr(args, "config", None) or "")
    flags = {d: getattr(args, d, None) for d, _, _ in _LAYOUT_FLAGS}
    flags = {d: v for d, v in flags.items() if v is not None}
    # to_dict() stores the derived dp and etp; drop them when a flag changes what they derive from.
    if "dp" not in flags and {"world_size", "tp", "pp", "cp"} & set(flags):
        fields.pop("dp", None)
    if "etp" not in flags and "tp" in flags and fields.get("etp") == fields.get("tp"):
        fields.pop("etp", None)
    if "pp" in flags and isinstance(fields.get("pp"), int):
        default_stages = sorted({0, fields["pp"] - 1})
        if fields.get("embedding_stages") in (default_stages, tuple(default_stages)):
            fields.pop("embedding_stages")
    fields.update(flags)
    for dest in ("order", "hcp_sizes"):
        value = getattr(args, dest, None)
        if value is not None:
            fields[dest] = value
    if "world_size" not in fields:
        gpus = getattr(args, "gpus_per_node", None) or cluster_fields.get("gpus_per_node")
        nodes = getattr(args, "nodes", None) or cluster_fields.get("nodes")
        if isinstance(gpus, int) and isinstance(nodes, int):
            fields["world_size"] = gpus * nodes
        else:
            raise CliError(
                "no world size: pass --world-size N, --config FILE, or --nodes with --gpus-per-node"
            )
    if not isinstance(fields.get("order", ""), str):
        raise CliError(f"order must be a string like 'tp-cp-ep-dp-pp', got {fields['order']!r}")
    try:
        return Topology.from_dict(fields)
    except TypeError as error:  # a config value of the wrong type deep inside a field
        raise CliError(f"invalid topology field value in the config: {error}") from None


def cluster_from_args(args: argparse.Namespace) -> Cluster | None:
    """The Cluster given by the cluster flags (or the config's cluster table); None if absent.

    Raises:
        CliError: when the command needs ``--gpus-per-node`` and it is missing.
    """
    _, fields = _split_config(_config(args), getattr(args, "config", None) or "")
    unknown = sorted(set(fields) - set(_CLUSTER_FIELDS))
    if unknown:
        raise CliError(
            f"unknown cluster field {unknown[0]!r}; valid fields: {', '.join(_CLUSTER_FIELDS)}"
        )
    for name in _CLUSTER_FIELDS:
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    if "gpus_per_node" not in fields:
        if getattr(args, "_cluster_required", False):
            raise CliError("this command needs the node size: pass --gpus-per-node G (e.g. 8)")
        if fields:
            raise CliError("--nodes and --nvlink-domain need --gpus-per-node G as well")
        return None
    try:
        return Cluster(**fields)
    except TypeError as error:
        raise CliError(f"invalid cluster field value in the config: {error}") from None


def write_json(data: Any) -> None:
    """Print ``data`` as indented JSON with a trailing newline."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def use_color(args: argparse.Namespace) -> bool:
    """True when colour is wanted: a terminal, no ``--no-color``/``--json``, no ``NO_COLOR``."""
    if getattr(args, "no_color", False) or getattr(args, "json", False):
        return False
    if os.environ.get("NO_COLOR"):
        return False
    return sys.stdout.isatty()


def abbreviate(ranks: Sequence[int], head: int = 4) -> str:
    """A group as text: every rank when short, else the first few, ``…``, the last, and the size.

    >>> abbreviate((0, 1, 2, 3))
    '[0, 1, 2, 3]'
    >>> abbreviate(tuple(range(0, 1000, 8)))
    '[0, 8, 16, 24, …, 992] (125 ranks)'
    """
    if len(ranks) <= head + 2:
        return "[" + ", ".join(map(str, ranks)) + "]"
    shown = ", ".join(map(str, ranks[:head]))
    return f"[{shown}, …, {ranks[-1]}] ({len(ranks)} ranks)"


def one_line(text: object) -> str:
    """``text`` with its whitespace (newlines included) folded to single spaces."""
    return " ".join(str(text).split())
