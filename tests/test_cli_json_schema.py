"""Every command's ``--json`` object matches docs/schema/cli.schema.json (JSON Schema 2020-12).

Laws: the schema file is a valid Draft 2020-12 schema; every output carries
``"schema": "rank-topology/<command>/<version>"`` (1, ``reshape`` 2) and validates against
``$defs/<command>`` and against the whole file. The check is strict: every key the command
prints must be named in the schema (the published file lets readers meet added keys; the test
does not let the file fall behind).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from referencing import Registry, Resource

from topology import Topology
from topology._cli.main import main
from topology.strategies import topologies

REPO = Path(__file__).resolve().parent.parent
SCHEMA_FILE = REPO / "docs" / "schema" / "cli.schema.json"
SCHEMA: dict[str, Any] = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
COMMANDS = ("show", "groups", "rank", "check", "place", "simulate", "plan", "transfer", "reshape")
VERSIONS = {"reshape": 2}
"""Documents past schema version 1 (``reshape`` renamed its ``shrink`` counts to ``trim``)."""
MODULE_DOCUMENTS = ("check-modules", "place-modules")
"""The documents of ``check --modules`` and ``place --modules`` (tested in test_modules_cli.py)."""
FILE_DOCUMENTS = ("transfer-manifest",)
"""Documents written to files: ``transfer --write-plans``'s manifest (test_cli_transfer_rank.py)."""


def _strict(node: Any) -> Any:
    """``node`` with ``additionalProperties: false`` wherever an object lists its properties."""
    if isinstance(node, list):
        return [_strict(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _strict(value) for key, value in node.items()}
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


_STRICT = _strict(SCHEMA)
_REGISTRY: Registry[Any] = Registry().with_resource(_STRICT["$id"], Resource.from_contents(_STRICT))
_WHOLE = jsonschema.Draft202012Validator(_STRICT, registry=_REGISTRY)
_PER_COMMAND = {
    command: jsonschema.Draft202012Validator(
        {"$ref": f"{_STRICT['$id']}#/$defs/{command}"}, registry=_REGISTRY
    )
    for command in (*COMMANDS, *MODULE_DOCUMENTS, *FILE_DOCUMENTS)
}


def _docs_examples() -> list[list[str]]:
    """The ``$ topology ... --json`` lines of docs/cli.md, as argument lists."""
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    return [shlex.split(m)[1:] for m in re.findall(r"^\$ (topology .*--json)$", text, re.M)]


DOCS_EXAMPLES = _docs_examples()

MORE_EXAMPLES = [
    ["show", "-w", "8", "--cp", "2", "--ep", "2", "--json"],
    ["show", "-w", "16", "--tp", "2", "--gtp", "2", "--ep", "2", "--egtp", "2", "--json"],
    [
        "check",
        "-w",
        "32",
        "--gtp",
        "2",
        "--egtp",
        "2",
        "--ep",
        "2",
        "--gpus-per-node",
        "8",
        "--json",
    ],
    ["groups", "embedding", "-w", "16", "--pp", "4", "--limit", "2", "--json"],
    ["groups", "tp", "-w", "4096", "--tp", "8", "--full", "--json"],
    ["rank", "777777", "-w", str(1 << 20), "--tp", "8", "--pp", "8", "--json"],
    ["rank", "3", "-w", "8", "--json"],
    ["check", "-w", "64", "--tp", "16", "--gpus-per-node", "8", "--nodes", "4", "--json"],
    ["check", "-w", "12", "--tp", "3", "--gpus-per-node", "8", "--rank-offset", "4", "--json"],
    ["simulate", "--scenario", "0d", "--json"],
    [
        "simulate",
        "-w",
        "64",
        "--ep",
        "8",
        "--gpus-per-node",
        "8",
        "--model",
        "mixtral-8x7b",
        "--json",
    ],
    ["plan", "-w", "64", "--gpus-per-node", "8", "--model", "mixtral-8x7b", "--json"],
    [
        "transfer",
        "--from",
        "ep=4,etp=1",
        "--to",
        "tp=2,pp=2",
        "-w",
        "4",
        "--model",
        "mixtral-8x7b",
        "--to-offset",
        "4",
        "--json",
    ],
    [  # with an allocation: "time" holds the predicted seconds and the bound
        "transfer",
        "--from",
        "tp=4",
        "--to",
        "tp=2,dp=2",
        "-w",
        "4",
        "--to-offset",
        "4",
        "--model",
        "llama-7b",
        "--hosts",
        "n[0-1]",
        "--gpus-per-host",
        "4",
        "--summary",
        "--json",
    ],
    [  # one rank's part: its sends and receives, the params table, no stats
        "transfer",
        "--from",
        "ep=4,etp=1",
        "--to",
        "tp=2,pp=2",
        "-w",
        "4",
        "--model",
        "mixtral-8x7b",
        "--to-offset",
        "4",
        "--rank",
        "5",
        "--json",
    ],
    [  # under gtp: row-parallel weights move as 2-D blocks, their ops carry "rows"
        "transfer",
        "--from",
        "tp=2,gtp=2",
        "--to",
        "tp=4",
        "-w",
        "4",
        "--model",
        "llama-7b",
        "--json",
    ],
    [  # --relay: stage-2 ops, relay_ops and relay_bytes in stats, relay_seconds in time
        *("transfer", "--from", "tp=2", "--to", "dp=2", "-w", "2", "--to-offset", "2"),
        *("--model", "llama-7b", "--hosts", "a,b", "--gpus-per-host", "2", "--relay", "--json"),
    ],
    ["reshape", "-w", "32", "--tp", "8", "--gpus-per-node", "8", "--lost", "1", "--json"],
    [
        "reshape",
        "-w",
        "16",
        "--tp",
        "2",
        "--gpus-per-node",
        "4",
        "--lost-ranks",
        "5",
        "--spares",
        "4",
        "--policy",
        "spares",
        "--json",
    ],
]


def _json(args: list[str]) -> dict[str, Any]:
    """Run ``topology ARGS`` in-process; require exit 0 or 1 (check's findings) and parse."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    assert code in (0, 1), (args, code)
    data = json.loads(out.getvalue())
    assert isinstance(data, dict)
    return data


def _assert_valid(command: str, data: dict[str, Any], *, whole: bool = True) -> None:
    """``data`` names its schema first and matches ``$defs/<command>`` (and the whole file)."""
    assert next(iter(data)) == "schema"
    assert data["schema"] == f"rank-topology/{command}/{VERSIONS.get(command, 1)}"
    _PER_COMMAND[command].validate(data)
    if whole:
        _WHOLE.validate(data)


@contextlib.contextmanager
def _config(topo: Topology) -> Iterator[str]:
    """A ``--config`` file holding ``topo``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "layout.json"
        path.write_text(json.dumps(topo.to_dict()), encoding="utf-8")
        yield str(path)


# -- the schema file ------------------------------------------------------------------------


def test_schema_file_is_a_valid_draft_2020_12_schema() -> None:
    """The schema file (and the test's strict form of it) passes Draft 2020-12's metaschema."""
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator.check_schema(_STRICT)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_schema_file_has_one_definition_per_command() -> None:
    """Each command (and each --modules form) has a ``$defs`` entry; the root accepts those."""
    documents = (*COMMANDS, *MODULE_DOCUMENTS, *FILE_DOCUMENTS)
    assert set(documents) <= set(SCHEMA["$defs"])
    assert SCHEMA["oneOf"] == [{"$ref": f"#/$defs/{c}"} for c in documents]


def test_docs_list_an_example_of_every_command() -> None:
    """docs/cli.md's JSON section shows at least one ``--json`` command line per command."""
    assert {args[0] for args in DOCS_EXAMPLES} == set(COMMANDS)


def test_strict_check_rejects_an_unlisted_key() -> None:
    """A key the schema does not name fails the test's strict check, even deep inside."""
    data = _json(["rank", "0", "-w", "8", "--json"])
    data["pipeline"]["surprise"] = 1
    with pytest.raises(jsonschema.ValidationError, match="surprise"):
        _PER_COMMAND["rank"].validate(data)


def test_a_document_matches_only_its_own_command() -> None:
    """show's object fails groups's definition: the ``schema`` constants tell them apart."""
    data = _json(["show", "-w", "8", "--json"])
    with pytest.raises(jsonschema.ValidationError):
        _PER_COMMAND["groups"].validate(data)


# -- fixed examples -------------------------------------------------------------------------


@pytest.mark.parametrize("args", DOCS_EXAMPLES + MORE_EXAMPLES, ids=" ".join)
def test_example_output_matches_the_schema(args: list[str]) -> None:
    """Each documented (and each extra) example's output validates against its command's schema."""
    _assert_valid(args[0], _json(args))


def test_show_layout_and_summary_agree() -> None:
    """show names the layout string ``layout`` and keeps ``summary`` with the same value."""
    data = _json(["show", "-w", "16", "--tp", "2", "--pp", "4", "--json"])
    assert data["layout"] == data["summary"] == str(Topology(16, tp=2, pp=4))


def test_transfer_stats_carry_bounds_no_plan_beats() -> None:
    """transfer's stats give the most bytes and peers per rank next to their lower bounds."""
    args = ["transfer", "--from", "dp=8", "--to", "tp=8", "-w", "8", "--to-offset", "8"]
    stats = _json([*args, "--model", "llama-7b", "--summary", "--json"])["stats"]
    for name in ("max_send_bytes", "max_recv_bytes", "max_send_peers", "max_recv_peers"):
        bound = stats[name.replace("bytes", "bound") if "bytes" in name else f"{name}_bound"]
        assert stats[name] >= bound >= 1, name


def test_simulate_all_is_an_object_of_scenarios() -> None:
    """``simulate --scenario all --json`` is an object whose ``scenarios`` run 0d..4d."""
    data = _json(["simulate", "--scenario", "all", "--json"])
    assert [s["scenario"] for s in data["scenarios"]] == ["0d", "1d", "2d", "3d", "4d"]


# -- generated layouts ----------------------------------------------------------------------

_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(topologies(max_world_size=256), st.sampled_from((None, 1, 2, 4, 8)))
def test_show_groups_rank_check_match_the_schema(topo: Topology, gpus: int | None) -> None:
    """show, groups (every kind), rank (first and last) and check validate on any layout."""
    with _config(topo) as path:
        layout = ["--config", path]
        cluster = [] if gpus is None else ["--gpus-per-node", str(gpus)]
        _assert_valid("show", _json(["show", *layout, *cluster, "--json"]), whole=False)
        for kind in topo.kinds:
            _assert_valid("groups", _json(["groups", kind, *layout, "--json"]), whole=False)
        last = topo.rank_offset + topo.world_size - 1
        for rank in sorted({topo.rank_offset, last}):
            args = ["rank", str(rank), *layout, *cluster, "--json"]
            _assert_valid("rank", _json(args), whole=False)
        check = ["check", *layout, "--gpus-per-node", str(gpus or 8), "--json"]
        _assert_valid("check", _json(check), whole=False)


@_SETTINGS
@given(topologies(max_world_size=256), st.sampled_from(("llama-7b", "mixtral-8x7b")))
def test_simulate_matches_the_schema(topo: Topology, model: str) -> None:
    """simulate validates on any layout it accepts (exit 2 for one it rejects prints nothing)."""
    with _config(topo) as path:
        args = ["simulate", "--config", path, "--gpus-per-node", "8", "--model", model, "--json"]
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(args)
    assert code in (0, 2), code
    if code == 0:
        _assert_valid("simulate", json.loads(out.getvalue()), whole=False)
    else:
        assert out.getvalue() == ""
