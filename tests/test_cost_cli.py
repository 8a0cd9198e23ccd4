"""The simulate and plan commands: JSON output, seed figures, plots, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from topology._cli.main import main


def _run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "topology", *argv], capture_output=True, text=True, timeout=600
    )


def test_simulate_scenario_1d_json_has_the_seed_figures() -> None:
    """`topology simulate --scenario 1d --json` reports 8.0 + 20.4 = 28.4 s and the 7.8 s ring."""
    done = _run("simulate", "--scenario", "1d", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["compute_s"] == pytest.approx(8.0)
    assert data["seed_sequential_ring_s"] == pytest.approx(20.4)
    assert data["seed_total_s"] == pytest.approx(28.4)
    assert data["communication_s"]["dp"] == pytest.approx(7.8)


def test_simulate_layout_text(capsys: pytest.CaptureFixture[str]) -> None:
    """A layout from the shared flags prints its lines and memory."""
    code = main(
        ["simulate", "-w", "64", "--tp", "8", "--gpus-per-node", "8", "--model", "llama-13b"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "tp comm" in out and "(intra-node)" in out and "GB of 80 GB" in out


def test_simulate_needs_a_node_size(capsys: pytest.CaptureFixture[str]) -> None:
    """A layout without --gpus-per-node (and no scenario) exits 2 naming the flag."""
    assert main(["simulate", "-w", "8"]) == 2
    assert "--gpus-per-node" in capsys.readouterr().err


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --json` lists the ranked layouts fastest first."""
    code = main(["plan", "-w", "64", "--gpus-per-node", "8", "--model", "llama-13b", "--json"])
    data = json.loads(capsys.readouterr().out)
    totals = [entry["total_s"] for entry in data["ranked"]]
    assert code == 0 and totals == sorted(totals) and data["explanation"].startswith("winner")


def test_plan_model_from_json_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--model accepts a JSON file of Model fields."""
    path = tmp_path / "m.json"
    path.write_text(
        json.dumps(
            {
                "name": "mine",
                "parameters": 1e9,
                "layers": 8,
                "hidden": 2048,
                "sequence_length": 2048,
                "global_batch": 64,
            }
        )
    )
    code = main(["plan", "-w", "16", "--gpus-per-node", "8", "--model", str(path)])
    assert code == 0 and "mine on 16 x h100" in capsys.readouterr().out


def test_plan_unknown_model_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown preset exits 2 with the valid presets in the message."""
    assert main(["plan", "-w", "8", "--gpus-per-node", "8", "--model", "gpt-9"]) == 2
    assert "unknown model 'gpt-9'; use a preset (llama-7b" in capsys.readouterr().err


def test_plan_plot_writes_svg(tmp_path: Path) -> None:
    """--plot FILE.svg writes the stacked bars (matplotlib installed)."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "plan.svg"
    assert (
        main(
            [
                "plan",
                "-w",
                "32",
                "--gpus-per-node",
                "8",
                "--model",
                "llama-7b",
                "--plot",
                str(target),
                "--json",
            ]
        )
        == 0
    )
    assert target.read_text().lstrip().startswith("<?xml")


def test_plan_plot_without_matplotlib_exits_2(tmp_path: Path) -> None:
    """With matplotlib unimportable, --plot exits 2 and says how to install it."""
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from topology._cli.main import main\n"
        f"sys.exit(main(['plan', '-w', '8', '--gpus-per-node', '8', '--model', 'llama-7b', "
        f"'--plot', {str(tmp_path / 'p.png')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    assert "--plot needs matplotlib" in done.stderr and "Traceback" not in done.stderr


def test_simulate_all_scenarios_json(capsys: pytest.CaptureFixture[str]) -> None:
    """`--scenario all --json` lists 0d..4d; 0d is the seed's 32.0 s, and 4d uses 32 GPUs."""
    assert main(["simulate", "--scenario", "all", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert list(document) == ["schema", "scenarios"]
    assert document["schema"] == "rank-topology/simulate/1"
    data = document["scenarios"]
    assert [d["scenario"] for d in data] == ["0d", "1d", "2d", "3d", "4d"]
    assert data[0]["total_s"] == pytest.approx(32.0)
    assert data[4]["topology"]["world_size"] == 32


def test_plot_names_every_layout_fully_and_starts_its_axis_below_compute() -> None:
    """Each bar's label is the whole layout (vpp included); the axis cuts only compute."""
    from topology import Cluster
    from topology._cli.plan import axis_start, plot_labels
    from topology.cost import MODELS, plan

    result = plan(64, Cluster(8), MODELS["llama-7b"], top=5)
    labels = plot_labels(result)
    assert len(set(labels)) == len(labels) == len(result.ranked)
    for place, (label, estimate) in enumerate(zip(labels, result.ranked, strict=True), start=1):
        assert " ".join(label.split()) == f"{place}. {' '.join(str(estimate.topology).split())}"
    assert any("vpp" in label for label in labels)  # the detail a prefix used to drop
    start = axis_start([e.total for e in result.ranked], [e.compute for e in result.ranked])
    assert 0 < start < min(e.compute for e in result.ranked)
