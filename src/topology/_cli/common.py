"""What every command shares: layout and cluster flags, config files, JSON output, exit codes.

Exit codes: 0 ok, 1 a finding at error level, 2 invalid input (one line on stderr, no
traceback), 3 an internal error (a bug; one line inviting a report). A command raises
:class:`CliError` (or ``TopologyError``) for invalid input; ``main`` turns either into exit
code 2 and any other exception into exit code 3.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NoReturn

import attrs

from .._architecture.architecture import Architecture
from .._architecture.config import model_from_config, read_model_config
from .._architecture.presets import ARCHITECTURES
from .._args import MAX_WORLD_SIZE, check_index, check_size, show
from .._datafile import read_data
from .._errors import TopologyError
from .._machine.cluster import Cluster
from .._megatron.topology import Topology
from .text import escape_controls, fold, terminal_width

__all__ = [
    "EXIT_FINDINGS",
    "EXIT_INTERNAL",
    "EXIT_INVALID",
    "EXIT_OK",
    "JSON_SCHEMA_VERSION",
    "JSON_SCHEMA_VERSIONS",
    "LAYOUT_FLAGS",
    "MAX_INT",
    "TOPOLOGY_SCHEMA",
    "CliError",
    "Once",
    "Parser",
    "abbreviate",
    "add_cluster_arguments",
    "add_layout_arguments",
    "add_output_arguments",
    "check_table",
    "cluster_flags_given",
    "cluster_from_args",
    "int_type",
    "json_schema_id",
    "one_line",
    "plain_int",
    "quoted_path",
    "shorten",
    "suggest",
    "topology_from_args",
    "use_color",
    "write_json",
]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INVALID = 2
EXIT_INTERNAL = 3

MAX_INT = MAX_WORLD_SIZE
"""The largest integer a flag or a config value may hold (2**40, the largest world)."""

LAYOUT_FLAGS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("world_size", ("--world-size", "-w"), "number of ranks (default: nodes x gpus-per-node)"),
    ("tp", ("--tp", "--tensor-model-parallel-size"), "tensor-parallel size"),
    ("pp", ("--pp", "--pipeline-model-parallel-size"), "pipeline-parallel size"),
    ("cp", ("--cp", "--context-parallel-size"), "context-parallel size"),
    ("ep", ("--ep", "--expert-model-parallel-size"), "expert-parallel size"),
    ("etp", ("--etp", "--expert-tensor-parallel-size"), "expert tensor-parallel size (default tp)"),
    ("dp", ("--dp",), "data-parallel size (derived; checked if given)"),
    ("gtp", ("--gtp",), "Megatron's gtp_remat_size: dense GTP (weight-remat) axis size"),
    ("egtp", ("--egtp",), "Megatron's expert_gtp_remat_size: expert GTP axis size"),
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

# What each config field may hold: a positive int, an optional one, a non-negative int, a
# string, an optional list of positive ints, a list of ints (stage indices may be negative).
TOPOLOGY_SCHEMA = {
    "world_size": "size",
    "tp": "size",
    "pp": "size",
    "cp": "size",
    "ep": "size",
    "etp": "size?",
    "dp": "size?",
    "vpp": "size?",
    "order": "text",
    "rank_offset": "offset",
    "dist_opt_instances": "size",
    "gtp": "size",
    "egtp": "size",
    "hcp_sizes": "sizes?",
    "embedding_stages": "stages",
    "position_embedding_stages": "stages",
}
_CLUSTER_SCHEMA = {"gpus_per_node": "size", "nodes": "size?", "nvlink_domain": "size?"}
_TABLES = ("topology", "cluster")


class CliError(Exception):
    """Invalid command-line input; ``main`` prints the message and exits with code 2."""


_UNRECOGNIZED = re.compile(r"^unrecognized arguments: (?P<args>.*)$")
_INVALID_CHOICE = re.compile(
    r"^argument (?P<name>[^:]+): invalid choice: '(?P<value>[^']*)' "
    r"\(choose from (?P<choices>.*)\)$"
)


def suggest(word: str, valid: Sequence[str]) -> str | None:
    """The valid spelling closest to ``word`` (difflib's ratio of at least 0.6), or None.

    >>> suggest("--tpp", ["--tp", "--pp", "--nodes"])
    '--tp'
    >>> suggest("shwo", ["show", "groups", "rank"])
    'show'
    >>> suggest("--frobnicate", ["--tp"]) is None
    True
    """
    matches = difflib.get_close_matches(word, valid, n=1)
    return matches[0] if matches else None


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr and exit code 2.

    A mistyped flag or command gets the closest valid spelling:
    ``topology show: error: unrecognized argument --tpp; did you mean --tp?``.
    """

    def format_help(self) -> str:
        """argparse's help with every line that argparse cannot break (a group of alternatives
        in the usage) folded to fit the terminal."""
        return fold(super().format_help(), terminal_width())

    def format_usage(self) -> str:
        """argparse's usage, folded to fit the terminal as :meth:`format_help` is."""
        return fold(super().format_usage(), terminal_width())

    def error(self, message: str) -> NoReturn:
        """Print ``topology <cmd>: error: <message>`` and exit 2 (no usage block); control
        characters and newlines a user typed are escaped, so the error is one line."""
        message = escape_controls(message, escape_newlines=True)
        hint = self._hint(message)
        if hint is not None:
            self.exit(EXIT_INVALID, f"{self.prog}: error: {hint}\n")
        self.exit(EXIT_INVALID, f"{self.prog}: error: {message}; see '{self.prog} --help'\n")

    def _hint(self, message: str) -> str | None:
        """The message with a 'did you mean' for a mistyped flag or choice, else None."""
        unknown = _UNRECOGNIZED.match(message)
        if unknown is not None:
            flags = [word for word in unknown["args"].split() if word.startswith("-")]
            for flag in flags:
                close = suggest(flag.split("=")[0], list(self._option_string_actions))
                if close is not None:
                    return f"unrecognized argument {flag}; did you mean {close}?"
            return None
        choice = _INVALID_CHOICE.match(message)
        if choice is not None:
            valid = [c.strip().strip("'") for c in choice["choices"].split(",")]
            close = suggest(choice["value"], valid)
            what = "command" if choice["name"] == "COMMAND" else f"{choice['name']} value"
            value = shorten(choice["value"])
            if close is not None:
                return f"unknown {what} {value!r}; did you mean {close!r}?"
            return f"unknown {what} {value!r}; valid: {', '.join(valid)}"
        return None


# -- flag values --------------------------------------------------------------------------------


def _show(value: object, limit: int = 40) -> str:
    """A short repr of a user's value (huge ints by their size; long text cut)."""
    if type(value) is int and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plain_int(text: str) -> int | None:
    """``text`` as an int when it is 1 to 30 plain ASCII digits, with an optional leading ``-``;
    None otherwise (``int()`` would also take ``1_6``, ``+2``, blanks and ``２``/``٢``)."""
    body = text[1:] if text.startswith("-") else text
    if not 1 <= len(body) <= 30 or not (body.isascii() and body.isdigit()):
        return None
    return int(text)


def int_type(
    name: str, minimum: Literal[0, 1] = 1, maximum: int = MAX_INT, why: str = ""
) -> Callable[[str], int]:
    """An argparse ``type`` for a positive (``minimum=0``: non-negative) int up to ``maximum``
    (default 2**40) named ``name`` in its message, spelled in plain ASCII digits (no ``_``,
    sign, blank or other script); the core's ``check_size``/``check_index`` say what is wrong.

    >>> int_type("tp")("8")
    8
    >>> int_type("tp")("1_6")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: tp must be a positive int in plain digits 0-9, got '1_6'
    >>> int_type("tp")("0")
    Traceback (most recent call last):
    argparse.ArgumentTypeError: tp must be a positive int, got 0 (int)
    """
    check, rule = (check_size, "a positive int") if minimum else (check_index, "a non-negative int")

    def parse(text: str) -> int:
        value = plain_int(text)
        if value is None:
            raise argparse.ArgumentTypeError(
                f"{name} must be {rule} in plain digits 0-9, got {_show(text)}"
            )
        try:
            return check(name, value, at_most=maximum, why=why)
        except TopologyError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = name
    return parse


def _int_list(text: str) -> list[int]:
    """Sizes separated by commas (``2,4``): every item plain ASCII digits, none empty.

    >>> _int_list("2,4")
    [2, 4]
    """
    parse = int_type("each hcp size")
    try:
        return [parse(item) for item in text.split(",")]
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(
            f"{error} (expected positive integers separated by commas like '2,4', "
            f"got {_show(text)})"
        ) from None


def _spelled(value: object, limit: int = 40) -> str:
    """A flag's value as it was typed (lists comma-separated), cut at ``limit`` characters."""
    text = ",".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Once(argparse.Action):
    """Store a flag's value, refusing a second, different value for the same setting.

    Every spelling of one setting (``--tp`` and ``--tensor-model-parallel-size``) shares a
    ``dest``; the action remembers which option string set it, so two that disagree (or one
    given twice with different values) are an error naming both. Equal values are fine.
    """

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        """Record ``option_string`` as the setter of ``self.dest``; raise if it disagrees."""
        given: dict[str, tuple[str, Any]] = namespace.__dict__.setdefault("_given_by", {})
        if self.dest in given and given[self.dest][1] != values:
            first, earlier = given[self.dest]
            raise argparse.ArgumentError(
                None,
                f"{first} {_spelled(earlier)} and {option_string} {_spelled(values)} "
                f"disagree; pass one value for {self.dest}",
            )
        given[self.dest] = (option_string or self.dest, values)
        setattr(namespace, self.dest, values)


def add_layout_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and the layout flags (Megatron's long names are aliases)."""
    group = parser.add_argument_group("layout (flags override --config)")
    group.add_argument(
        "--config",
        action=Once,
        metavar="FILE",
        help="JSON or TOML file with Topology.to_dict() fields (a [topology] and a [cluster] "
        "table are also accepted)",
    )
    for dest, flags, text in LAYOUT_FLAGS:
        kind = int_type(dest, 0 if dest == "rank_offset" else 1)
        group.add_argument(*flags, dest=dest, type=kind, action=Once, metavar="N", help=text)
    group.add_argument(
        "--order", action=Once, help="Megatron order string, innermost first (tp-cp-ep-dp-pp)"
    )
    group.add_argument(
        "--hcp-sizes",
        "--hierarchical-context-parallel-sizes",
        dest="hcp_sizes",
        type=_int_list,
        action=Once,
        metavar="A,B",
        help="hierarchical context-parallel level sizes (product = cp)",
    )


def add_cluster_arguments(
    parser: argparse.ArgumentParser, *, required: bool = False, unless: str = ""
) -> None:
    """Add ``--gpus-per-node``, ``--nodes`` and ``--nvlink-domain`` (``unless`` says when a
    required ``--gpus-per-node`` may be left out, for its help)."""
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "--gpus-per-node",
        dest="gpus_per_node",
        type=int_type("gpus_per_node"),
        action=Once,
        metavar="G",
        help="GPUs per node"
        + (f" (required{f' unless {unless}' if unless else ''})" if required else ""),
    )
    group.add_argument(
        "--nodes", type=int_type("nodes"), action=Once, metavar="N", help="nodes in the allocation"
    )
    group.add_argument(
        "--nvlink-domain",
        dest="nvlink_domain",
        type=int_type("nvlink_domain"),
        action=Once,
        metavar="G",
        help="GPUs per NVLink domain (default: the node)",
    )
    parser.set_defaults(_cluster_required=required)


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--json`` and ``--no-color``."""
    group = parser.add_argument_group("output")
    group.add_argument("--json", action="store_true", help="print JSON (schema in docs/cli.md)")
    group.add_argument("--no-color", dest="no_color", action="store_true", help="no colour")


# -- config files -------------------------------------------------------------------------------


def _bad(label: str, key: str, rule: str, value: object) -> CliError:
    return CliError(f"{label}: {key} must be {rule}, got {_show(value)} ({type(value).__name__})")


def _check_int(label: str, key: str, value: object, check: Callable[[str, object], int]) -> None:
    """``check`` (the core's ``check_size`` or ``check_index``) on a config value, as a CliError."""
    try:
        check(f"{label}: {key}", value)
    except TopologyError as error:
        raise CliError(str(error)) from None


def _check_stage(label: str, key: str, value: object) -> None:
    """A stage index: an int of magnitude at most 2**40 (negative counts from the end)."""
    if type(value) is not int:
        raise _bad(label, key, "an int", value)
    if abs(value) > MAX_INT:
        raise CliError(f"{label}: {key} must be at most 2**40 = {MAX_INT}, got {_show(value)}")


def _check_value(label: str, key: str, kind: str, value: object) -> None:
    if value is None and kind.endswith("?"):
        return
    if kind.startswith("size") and kind != "sizes?":
        _check_int(label, key, value, check_size)
    elif kind == "offset":
        _check_int(label, key, value, check_index)
    elif kind == "text":
        if not isinstance(value, str):
            raise _bad(label, key, "a string like 'tp-cp-ep-dp-pp'", value)
    else:
        if not isinstance(value, list):
            raise _bad(label, key, "a list of ints", value)
        for index, item in enumerate(value):
            if kind == "sizes?":
                _check_int(label, f"{key}[{index}]", item, check_size)
            else:
                _check_stage(label, f"{key}[{index}]", item)


def check_table(
    label: str, prefix: str, table: Mapping[str, Any], schema: Mapping[str, str]
) -> None:
    what = prefix.rstrip(".") or "topology"
    for key, value in table.items():
        if key not in schema:
            if not prefix and isinstance(value, dict):
                raise CliError(
                    f"{label}: unknown table {_show(key)}; valid tables: {', '.join(_TABLES)}"
                )
            raise CliError(
                f"{label}: unknown {what} field {_show(key)}; valid fields: {', '.join(schema)}"
            )
        _check_value(label, prefix + key, schema[key], value)


def _load_config(path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The topology and cluster fields of a config file, every value checked."""
    label = f"--config {path!r}" if len(path) <= 300 else f"--config {show(path)}"
    data = read_data(path, label, toml=path.endswith(".toml"))
    if not isinstance(data, dict):
        raise CliError(f"{label} must hold an object of fields, got {type(data).__name__}")
    if set(_TABLES) & set(data):
        unknown = sorted(set(data) - set(_TABLES))
        if unknown:
            raise CliError(
                f"{label} has an unexpected key {_show(unknown[0])} next to the "
                "'topology'/'cluster' tables; keep only those two"
            )
        topo, cluster = data.get("topology", {}), data.get("cluster", {})
        for name, table in (("topology", topo), ("cluster", cluster)):
            if not isinstance(table, dict):
                raise CliError(
                    f"{label}: '{name}' must be a table of fields, got {type(table).__name__}"
                )
        check_table(label, "topology.", topo, TOPOLOGY_SCHEMA)
    else:
        topo, cluster = data, {}
        check_table(label, "", topo, TOPOLOGY_SCHEMA)
    check_table(label, "cluster.", cluster, _CLUSTER_SCHEMA)
    try:  # a complete layout in the file must be valid on its own, whatever flags override
        if "world_size" in topo:
            Topology.from_dict(topo)
        if "gpus_per_node" in cluster:
            Cluster(**cluster)
    except TopologyError as error:
        raise CliError(f"{label} holds an invalid layout: {one_line(error)}") from None
    return dict(topo), dict(cluster)


def _config(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    cached = getattr(args, "_config_data", None)
    if cached is None:
        path = getattr(args, "config", None)
        cached = ({}, {}) if path is None else _load_config(path)
        args._config_data = cached
    return dict(cached[0]), dict(cached[1])


def topology_from_args(
    args: argparse.Namespace, *, default_world_size: int | None = None
) -> Topology:
    """The Topology given by ``--config`` and the layout flags (flags win).

    ``default_world_size`` (an allocation's GPUs) applies when neither gives a world size.

    Raises:
        CliError: for an unreadable or malformed config file or a missing world size.
        TopologyError: for an invalid layout.
    """
    fields, cluster_fields = _config(args)
    flags = {d: getattr(args, d, None) for d, _, _ in LAYOUT_FLAGS}
    flags = {d: v for d, v in flags.items() if v is not None}
    fields.update(flags)
    for dest in ("order", "hcp_sizes"):
        value = getattr(args, dest, None)
        if value is not None:
            fields[dest] = value
    if "world_size" not in fields and default_world_size is not None:
        fields["world_size"] = default_world_size
    if "world_size" not in fields:
        gpus = getattr(args, "gpus_per_node", None) or cluster_fields.get("gpus_per_node")
        nodes = getattr(args, "nodes", None) or cluster_fields.get("nodes")
        if isinstance(gpus, int) and isinstance(nodes, int):
            fields["world_size"] = gpus * nodes
        else:
            raise CliError(
                "no world size: pass --world-size N, --config FILE, or --nodes with --gpus-per-node"
            )
    return Topology.from_dict(fields)


def cluster_flags_given(args: argparse.Namespace) -> list[str]:
    """The cluster settings given by a flag or the config's cluster table, as flag names."""
    _, fields = _config(args)
    given = {name for name in _CLUSTER_SCHEMA if getattr(args, name, None) is not None}
    return [
        "--" + name.replace("_", "-") for name in _CLUSTER_SCHEMA if name in given | set(fields)
    ]


def cluster_from_args(args: argparse.Namespace) -> Cluster | None:
    """The Cluster given by the cluster flags (or the config's cluster table); None if absent.

    Raises:
        CliError: when the command needs ``--gpus-per-node`` and it is missing.
    """
    _, fields = _config(args)
    for name in _CLUSTER_SCHEMA:
        value = getattr(args, name, None)
        if value is not None:
            fields[name] = value
    if "gpus_per_node" not in fields:
        if getattr(args, "_cluster_required", False):
            raise CliError("this command needs the node size: pass --gpus-per-node G (e.g. 8)")
        if fields:
            raise CliError("--nodes and --nvlink-domain need --gpus-per-node G as well")
        return None
    return Cluster(**fields)


# -- output -------------------------------------------------------------------------------------


JSON_SCHEMA_VERSION = 1
"""The version of a command's ``--json`` document unless :data:`JSON_SCHEMA_VERSIONS` says
otherwise; keys are only ever added within one version."""

JSON_SCHEMA_VERSIONS = {"reshape": 2}
"""Documents past version 1: ``reshape`` 2 renamed each kind's ``shrink`` count to ``trim`` (an
old group minus the ranks that leave), so "shrink" names only the reshape policy."""


def json_schema_id(command: str) -> str:
    """The ``schema`` value of ``command``'s JSON document (its schema is in docs/schema/).

    >>> json_schema_id("show"), json_schema_id("reshape")
    ('rank-topology/show/1', 'rank-topology/reshape/2')
    """
    return f"rank-topology/{command}/{JSON_SCHEMA_VERSIONS.get(command, JSON_SCHEMA_VERSION)}"


def write_json(command: str, data: Mapping[str, Any]) -> None:
    """Print ``command``'s JSON object: ``"schema"`` first, then ``data``, indented, newline."""
    document = {"schema": json_schema_id(command), **data}
    sys.stdout.write(json.dumps(document, indent=2) + "\n")


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


def shorten(word: str, limit: int = 40, *, quoted: bool = False) -> str:
    """``word`` as typed (``quoted``: as ``repr`` spells it), or its first ``limit`` characters,
    ``…`` and its length when longer.

    >>> shorten("--tp"), shorten("n" + "9" * 5000)
    ('--tp', 'n999999999999999999999999999999999999999… (5001 characters)')
    >>> shorten("x" * 50, 4, quoted=True)
    "'xxxx'… (50 characters)"
    """
    shown = repr(word[:limit]) if quoted else word[:limit]
    return shown if len(word) <= limit else f"{shown}… ({len(word)} characters)"


def quoted_path(path: str) -> str:
    """A file path as ``repr`` spells it, shortened past 200 characters (a path of thousands
    of characters would bury the message).

    >>> quoted_path("out.svg"), quoted_path("x" * 300)[-19:]
    ("'out.svg'", "'… (300 characters)")
    """
    return shorten(path, 200, quoted=True)


def one_line(text: object, limit: int = 1000) -> str:
    """``text`` with its whitespace (newlines included) folded to single spaces, cut at ``limit``.

    >>> one_line("a\\n  b")
    'a b'
    """
    folded = " ".join(str(text).split())
    return folded if len(folded) <= limit else folded[: limit - 1] + "…"


def model_from_arg(value: str) -> Architecture:
    """``--model``'s model: a preset of the model table, or a Hugging Face ``config.json`` (a
    path to the file or to a folder holding one).

    Raises:
        CliError: neither a preset nor a path (a near preset is suggested).
        TopologyError: a config that cannot be read (one line naming the file and the key).

    >>> model_from_arg("llama-7b").layers
    32
    >>> model_from_arg("lama-7b")
    Traceback (most recent call last):
    topology._cli.common.CliError: unknown --model value 'lama-7b'; did you mean 'llama-7b'?
    """
    if value in ARCHITECTURES:
        return ARCHITECTURES[value]
    if os.path.exists(value) or value.endswith(".json") or os.sep in value:
        return read_model_config(value)
    close = suggest(value, list(ARCHITECTURES))
    if close is not None:
        raise CliError(f"unknown --model value {shorten(value)!r}; did you mean {close!r}?")
    raise CliError(
        f"unknown --model value {shorten(value)!r}; valid: {', '.join(ARCHITECTURES)}, or a "
        "config.json file or a folder holding one"
    )


def cost_model_from_arg(value: str) -> Any:
    """``--model``'s cost model (``topology.cost.Model``): a preset, a JSON file of Model
    fields, or a Hugging Face ``config.json`` (or its folder), costed with the sum of its
    shapes (``topology.weights``) as its parameter count.

    Raises:
        TopologyError: an unknown preset, an unreadable or invalid file or config.

    >>> cost_model_from_arg("llama-7b").parameters
    6740000000.0
    """
    from topology.cost import Model, load_model

    from .._transfer.weights import weights

    if os.path.isdir(value):
        architecture = read_model_config(value)
    elif value.endswith(".json") and os.path.isfile(value):
        data = read_data(value, f"model file {show(value)}")  # load_model's label
        if not isinstance(data, dict) or "architectures" not in data:
            return load_model(value)
        architecture = model_from_config(data, f"config.json {quoted_path(value)}")
    else:
        return load_model(value)
    listed = weights(architecture)
    total = sum(p.nbytes // p.itemsize for p in listed)
    experts = sum(p.nbytes // p.itemsize for p in listed if p.expert is not None)
    counted = attrs.evolve(architecture, parameters=total, expert_parameters=experts)
    return Model.from_architecture(value, counted)
