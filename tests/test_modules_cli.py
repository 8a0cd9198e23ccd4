"""``topology check --modules FILE`` and ``topology place --modules FILE``: a two-module file checks
and places, its JSON matches docs/schema/cli.schema.json, and every bad file is one clean error."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from topology import Module, Modules, Topology
from topology._cli.main import main
from topology._cli.modules_file import read_modules

from .test_cli_json_schema import _assert_valid

TWO = """\
[[module]]
name = "vision"
world_size = 8
tp = 1

[[module]]
name = "language"
world_size = 8
tp = 2
pp = 2
rank_offset = 8
"""


def _run(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(args)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def two(tmp_path: Path) -> str:
    path = tmp_path / "modules.toml"
    path.write_text(TWO, encoding="utf-8")
    return str(path)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_the_file_reads_as_modules(two: str) -> None:
    """The TOML file gives the vision and language modules on their spans."""
    assert read_modules(two) == Modules(
        [
            Module("vision", Topology(8)),
            Module("language", Topology(8, tp=2, pp=2), rank_offset=8),
        ]
    )


def test_json_holds_the_same_modules(two: str, tmp_path: Path) -> None:
    """The JSON form ({"module": [...]}) reads as the TOML form does."""
    data = {
        "module": [
            {"name": "vision", "world_size": 8, "tp": 1},
            {"name": "language", "world_size": 8, "tp": 2, "pp": 2, "rank_offset": 8},
        ]
    }
    assert read_modules(_write(tmp_path, "m.json", json.dumps(data))) == read_modules(two)


def test_two_modules_check(two: str) -> None:
    """check --modules prints each module's report and the whole job's, and passes."""
    code, out, _ = _run(["check", "--modules", two, "--gpus-per-node", "8", "--nodes", "2"])
    assert code == 0
    assert "== module vision [0, 8)" in out and "== module language [8, 16)" in out
    assert "modules-communicators" in out and out.endswith("check ok\n")


def test_two_modules_check_json_matches_the_schema(two: str) -> None:
    """check --modules --json validates against $defs/check-modules."""
    code, out, _ = _run(["check", "--modules", two, "--gpus-per-node", "8", "--json"])
    data: dict[str, Any] = json.loads(out)
    assert (
        code == 0 and data["ok"] and [m["name"] for m in data["modules"]] == ["vision", "language"]
    )
    assert data["communicators"]["per_rank_max"] == 5
    _assert_valid("check-modules", data)


def test_a_job_larger_than_the_nodes_fails(two: str) -> None:
    """16 ranks on one 8-GPU node is a whole-job world-size error (exit 1)."""
    code, out, _ = _run(["check", "--modules", two, "--gpus-per-node", "8", "--nodes", "1"])
    assert code == 1 and "world-size-mismatch: the modules need 16 ranks" in out


def test_two_modules_place(two: str) -> None:
    """place --modules orders the hosts for both modules; its JSON matches the schema."""
    args = ["place", "--modules", two, "--hosts", "n[1-4]", "--gpus-per-host", "4"]
    code, out, _ = _run(args)
    assert code == 0 and "== module language" in out
    code, out, _ = _run([*args, "--json"])
    data: dict[str, Any] = json.loads(out)
    assert code == 0 and sorted(data["hosts"]) == ["n1", "n2", "n3", "n4"]
    _assert_valid("place-modules", data)


def test_place_writes_the_hostfile(two: str, tmp_path: Path) -> None:
    """place --modules --write-hostfile writes the chosen order, one host per line."""
    out = tmp_path / "hosts.txt"
    args = ["place", "--modules", two, "--hosts", "n[1-4]", "--gpus-per-host", "4", "--json"]
    code, text, _ = _run([*args, "--write-hostfile", str(out)])
    assert code == 0 and out.read_text().split() == json.loads(text)["hosts"]


MIMO = """\
[[module]]
name = "vision"
num_ranks = 8

[[module]]
name = "language"
num_ranks = 16
tp = 2
ep = 4
gtp_remat = 2
rank_offset = 8
"""


def test_mimo_spelling_reads_as_megatron_mimo_builds(tmp_path: Path) -> None:
    """A file in MIMO's ModuleGridSpec spelling reads with MIMO's names and expert default
    (expt_tp 1, where world_size/tp spelling takes etp = tp): the language module's expert
    tp groups are single ranks, its dense tp groups pairs."""
    found = read_modules(_write(tmp_path, "mimo.toml", MIMO))
    language = found.module("language").layout
    assert language == Topology(16, tp=2, ep=4, etp=1, gtp=2, rank_offset=8)
    assert (language.etp, language.tp, language.gtp) == (1, 2, 2)
    ours = MIMO.replace("num_ranks", "world_size").replace("gtp_remat", "gtp")
    assert read_modules(_write(tmp_path, "ours.toml", ours)).module("language").layout.etp == 2


def test_check_help_documents_the_format() -> None:
    """topology check --help names --modules and the [[module]] format."""
    code, out, _ = _run(["check", "--help"])
    assert code == 0 and "--modules FILE" in out and "[[module]]" in out


BAD = [
    ('[[module]]\nname = "a"\nworld_size = 8\nfoo = 1\n', r"module 'a'.*unknown .*field 'foo'"),
    ("[[module]]\nworld_size = 8\n", r"module\[0\]: name must be a non-empty string"),
    ('[[module]]\nname = "a"\ntp = 2\n', r"module 'a' has no world_size"),
    ('[[module]]\nname = "a"\nworld_size = 6\ntp = 4\n', r"module 'a' holds an invalid layout"),
    ('[module]\nname = "a"\n', r"'module' must list 1 to 64 tables, got dict"),
    ("layout = 1\n", r"must hold one list 'module' of tables"),
    (
        '[[module]]\nname = "a"\nnum_ranks = 8\netp = 2\n',
        r"module 'a' holds an invalid layout: MIMO's ModuleGridSpec has no field 'etp' \(this "
        r"project's name for 'expt_tp'\)",
    ),
    ('[[module]]\nname = "a"\nnum_ranks = "8"\n', r"module 'a' holds an invalid layout: .*'8'"),
    (
        '[[module]]\nname = "a"\nworld_size = 8\n[[module]]\nname = "b"\nworld_size = 8\n'
        "rank_offset = 4\n",
        r"holds invalid modules: modules 'a' \[0, 8\) and 'b' \[4, 12\) overlap",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_a_bad_file_is_one_clean_error(tmp_path: Path, text: str, message: str) -> None:
    """Each malformed modules file exits 2 with one line naming the file and the problem."""
    path = _write(tmp_path, "bad.toml", text)
    code, out, err = _run(["check", "--modules", path, "--gpus-per-node", "8"])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "--modules" in err and re.search(message, err), err


def test_layout_flags_do_not_go_with_modules(two: str) -> None:
    """--modules gives every layout: --tp next to it is refused."""
    code, _, err = _run(["check", "--modules", two, "--tp", "2", "--gpus-per-node", "8"])
    assert code == 2 and "--modules gives every layout, so --tp cannot go with it" in err
