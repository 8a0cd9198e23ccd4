"""The ``topology`` command run as a user runs it: a subprocess of ``python -m topology``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from topology import Cluster, Topology, check

SEED_004 = ["--world-size", "16", "--tp", "2", "--pp", "4"]
"""Seed 004's layout: 16 GPUs, tp 2, pp 4 (Megatron order)."""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m topology ARGS`` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "topology", *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
    )


def run_json(*args: str) -> Any:
    """Run with ``--json``, require exit 0 and parse stdout."""
    done = run(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def assert_invalid(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    """Exit 2, one stderr line that names the problem, no traceback, nothing on stdout."""
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert lines[0].startswith("topology")
    for fragment in fragments:
        assert fragment in lines[0]


# -- each command, checked against the library -------------------------------------------------


def test_show_json_matches_the_library() -> None:
    """show --json gives the topology, sizes, kinds and one cell per rank with coordinates."""
    topo = Topology(16, tp=2, pp=4)
    data = run_json("show", *SEED_004, "--gpus-per-node", "8")
    assert Topology.from_dict(data["topology"]) == topo
    assert data["sizes"] == {"tp": 2, "cp": 1, "ep": 1, "dp": 2, "pp": 4, "etp": 2, "edp": 2}
    assert list(data["kinds"]) == list(topo.kinds)
    assert data["kinds"]["dp"] == {"size": 2, "groups": 8}
    cell = data["cells"][5]
    assert (cell["rank"], cell["node"], cell["local_gpu"]) == (5, 0, 5)
    assert cell["dense"] == dict(topo.dense.coord(5)) and cell["label"] == "t1 p1 d0"


def test_show_draws_nodes_with_labelled_cells() -> None:
    """show draws two 8-GPU boxes for seed 004, each GPU labelled by rank and coordinates."""
    done = run("show", *SEED_004, "--gpus-per-node", "8", "--no-color")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("node ") == 2 and "┌" in done.stdout
    assert "r5 t1 p1 d0" in done.stdout and "r12 t0 p3 d0" in done.stdout
    assert "\x1b[" not in done.stdout


def test_show_labels_cp_and_ep_when_used() -> None:
    """Cells gain c and e coordinates when cp or ep exceed 1."""
    done = run("show", "-w", "8", "--cp", "2", "--ep", "2", "--no-color")
    assert "r3 t0 p0 d1 c1 e1" in done.stdout, done.stdout


def test_gtp_flags_give_the_gtp_kinds() -> None:
    """--gtp / --egtp reach the Topology: show names the sizes, the kinds and g/eg in cells,
    groups and rank answer the GTP kinds."""
    flags = ["-w", "16", "--tp", "2", "--gtp", "2", "--pp", "2", "--egtp", "2"]
    topo = Topology(16, tp=2, gtp=2, pp=2, egtp=2)
    data = run_json("show", *flags)
    assert Topology.from_dict(data["topology"]) == topo
    assert (data["sizes"]["gtp"], data["sizes"]["egtp"], data["sizes"]["dp"]) == (2, 2, 2)
    assert list(data["kinds"]) == list(topo.kinds) and "egtp-edp" in data["kinds"]
    assert data["cells"][2]["label"] == "t0 g1 p0 d0 eg1"
    groups = run_json("groups", "dp-gtp", *flags)
    assert [tuple(g) for g in groups["groups"]] == list(topo.groups("gtp-dp"))
    assert run_json("rank", "5", *flags)["groups"]["gtp"]["ranks"] == [5, 7]


def test_show_writes_svg(tmp_path: Path) -> None:
    """show --svg writes a well-formed SVG with one cell per rank."""
    import xml.etree.ElementTree as ET

    target = tmp_path / "layout.svg"
    done = run("show", *SEED_004, "--svg", str(target))
    assert done.returncode == 0, done.stderr
    root = ET.parse(target).getroot()
    titles = [e.text for e in root.iter("{http://www.w3.org/2000/svg}title")]
    assert sum(1 for t in titles if t and t.startswith("rank ")) == 16


def test_show_large_world_gives_a_table() -> None:
    """Worlds beyond 256 ranks get a per-kind table, not a picture; JSON has no cells."""
    done = run("show", "-w", "1024", "--tp", "8", "--pp", "4", "--gpus-per-node", "8")
    assert done.returncode == 0 and "┌" not in done.stdout
    assert any(line.split()[:3] == ["tp", "8", "128"] for line in done.stdout.splitlines())
    assert run_json("show", "-w", "1024", "--tp", "8")["cells"] is None


def test_groups_json_equals_library_groups() -> None:
    """groups KIND --json lists exactly Topology.groups(KIND), Megatron names accepted."""
    topo = Topology(16, tp=2, pp=4)
    for kind in ("dp", "mp", "embedding"):
        data = run_json("groups", kind, *SEED_004)
        assert data["groups"] == [list(g) for g in topo.groups(kind)]
        assert data["count"] == len(topo.groups(kind)) and data["truncated"] is False
    assert run_json("groups", "dp", *SEED_004, "--limit", "3")["truncated"] is True


def test_groups_text_lists_every_group() -> None:
    """groups dp prints one line per group with its index."""
    done = run("groups", "dp", *SEED_004)
    assert done.returncode == 0
    assert "0  [0, 2]" in done.stdout and "7  [13, 15]" in done.stdout


def test_rank_json_equals_rank_info() -> None:
    """rank R --json is RankInfo.to_dict() plus node, local GPU and communicators."""
    topo = Topology(16, tp=2, pp=4)
    data = run_json("rank", "5", *SEED_004, "--gpus-per-node", "4")
    expected = topo.rank_info(5).to_dict()
    assert {k: data[k] for k in expected} == json.loads(json.dumps(expected))
    assert (data["node"], data["local_gpu"]) == (1, 1)
    assert data["pipeline"]["next"] == 9 and data["groups"]["embedding"] is None


def test_rank_text_abbreviates_huge_groups() -> None:
    """rank on a 2^20-rank layout shows the first ranks, an ellipsis, the last and the size."""
    done = run("rank", "777777", "-w", str(1 << 20), "--tp", "8", "--pp", "8")
    assert done.returncode == 0, done.stderr
    topo = Topology(1 << 20, tp=8, pp=8)
    dp = topo.group_of(777777, "dp")
    assert f"[{dp[0]}, {dp[1]}, {dp[2]}, {dp[3]}, …, {dp[-1]}] (16384 ranks)" in done.stdout
    assert f"next {topo.pipeline(777777).next}" in done.stdout


def test_check_json_equals_library_report() -> None:
    """check --json is its schema key, then check(...).to_dict() for the same layout and cluster."""
    topo = Topology(64, tp=8, pp=2)
    data = run_json(
        "check", "-w", "64", "--tp", "8", "--pp", "2", "--gpus-per-node", "8", "--nodes", "8"
    )
    report = json.loads(json.dumps(check(topo, Cluster(8, nodes=8)).to_dict()))
    assert data == {"schema": "rank-topology/check/1", **report}


def test_megatron_long_flags_are_aliases() -> None:
    """Megatron's long flag names give the same layout as the short ones."""
    short = run_json("show", "-w", "32", "--tp", "2", "--pp", "2", "--cp", "2", "--ep", "2")
    long = run_json(
        "show",
        "--world-size",
        "32",
        "--tensor-model-parallel-size",
        "2",
        "--pipeline-model-parallel-size",
        "2",
        "--context-parallel-size",
        "2",
        "--expert-model-parallel-size",
        "2",
    )
    assert short == long


def test_config_json_and_toml_give_the_layout(tmp_path: Path) -> None:
    """--config accepts to_dict() JSON and TOML (with a cluster table); flags override it."""
    topo = Topology(16, tp=2, pp=4, order="tp-pp-dp")
    as_json = tmp_path / "layout.json"
    as_json.write_text(json.dumps(topo.to_dict()))
    as_toml = tmp_path / "layout.toml"
    as_toml.write_text(
        '[topology]\nworld_size = 16\ntp = 2\npp = 4\norder = "tp-pp-dp"\n'
        "[cluster]\ngpus_per_node = 4\n"
    )
    assert Topology.from_dict(run_json("show", "--config", str(as_json))["topology"]) == topo
    from_toml = run_json("show", "--config", str(as_toml))
    assert Topology.from_dict(from_toml["topology"]) == topo
    assert from_toml["cluster"]["gpus_per_node"] == 4
    overridden = run_json("show", "--config", str(as_json), "--pp", "2")["topology"]
    assert (overridden["pp"], overridden["order"]) == (2, "tp-pp-dp-ep-cp")


# -- exit codes --------------------------------------------------------------------------------


def test_check_exit_codes() -> None:
    """check exits 0 for a good layout, 1 for an error-level finding, 2 for invalid input."""
    good = run("check", "-w", "4096", "--tp", "8", "--pp", "4", "--gpus-per-node", "8")
    bad = run("check", "-w", "4096", "--tp", "8", "--order", "dp-tp", "--gpus-per-node", "8")
    assert (good.returncode, bad.returncode) == (0, 1), good.stderr + bad.stderr
    assert "tp-crosses-nodes" in bad.stdout and "check ok" in good.stdout
    assert_invalid(run("check", "-w", "4096", "--tp", "8"), "--gpus-per-node")


def test_check_strict_fails_on_warnings() -> None:
    """check --strict exits 1 when only warnings were found."""
    args = ("check", "-w", "12", "--tp", "4", "--gpus-per-node", "8")
    assert (run(*args).returncode, run(*args, "--strict").returncode) == (0, 1)


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("show", "--tp", "x", "-w", "8"), ("--tp", "'x'")),
        (("show", "-w", "12", "--tp", "8"), ("world_size 12", "tp(8)")),
        (("show", "--tp", "2"), ("no world size",)),
        (("rank", "99", "-w", "8"), ("rank 99", "0 to 7")),
        (("groups", "xp", "-w", "8"), ("unknown kind 'xp'",)),
        (("groups", "-w", "8"), ("kind",)),
        (("check", "-w", "8", "--gpus-per-node", "0"), ("gpus_per_node", "0")),
        (("frobnicate",), ("frobnicate",)),
        (("show", "-w", "8", "--nodes", "2"), ("--gpus-per-node",)),
    ],
)
def test_bad_flags_give_one_clear_line(args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    """Invalid flags exit 2 with one stderr line naming the problem."""
    assert_invalid(run(*args), *fragments)


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        (None, ("cannot read --config", "No such file")),
        ("{not json", ("not valid JSON",)),
        ("[1, 2]", ("must hold an object",)),
        ('{"world_size": 8, "tpp": 2}', ("unknown topology field 'tpp'",)),
        ('{"tp": 2}', ("no world size",)),
        ('{"world_size": "8"}', ("world_size must be a positive int",)),
        ('{"topology": {"world_size": 8}, "extra": 1}', ("unexpected key 'extra'",)),
    ],
)
def test_bad_config_files_give_one_clear_line(
    tmp_path: Path, content: str | None, fragments: tuple[str, ...]
) -> None:
    """A missing, malformed or wrong-field config exits 2 with one stderr line."""
    path = tmp_path / "layout.json"
    if content is not None:
        path.write_text(content)
    assert_invalid(run("show", "--config", str(path)), *fragments)


def test_bad_toml_gives_one_clear_line(tmp_path: Path) -> None:
    """Invalid TOML exits 2 with one stderr line."""
    path = tmp_path / "layout.toml"
    path.write_text("world_size = = 8\n")
    assert_invalid(run("show", "--config", str(path)), "not valid TOML")
