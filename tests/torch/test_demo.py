"""The demo trains tp2 x dp2 and every step's loss equals the single-process model's."""

from __future__ import annotations

import re
import subprocess
import sys


def test_demo_losses_equal_single_process() -> None:
    """``python -m topology_torch.demo --nproc 4`` exits 0 and reports each step equal."""
    result = subprocess.run(
        [sys.executable, "-m", "topology_torch.demo", "--nproc", "4", "--steps", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tp2 x dp2" in result.stdout
    steps = re.findall(
        r"step (\d+): parallel loss (\S+)  single-process loss (\S+)  (\w+)", result.stdout
    )
    assert [int(s[0]) for s in steps] == [0, 1, 2], result.stdout
    for _, parallel, single, verdict in steps:
        assert verdict == "equal"
        assert abs(float(parallel) - float(single)) <= 1e-4 * abs(float(single))


def test_demo_fails_on_a_mismatch() -> None:
    """With one rank's parameter perturbed (``--corrupt``) the demo reports it and exits 1."""
    result = subprocess.run(
        [sys.executable, "-m", "topology_torch.demo", "--nproc", "2", "--steps", "1", "--corrupt"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "DIFFERENT" in result.stdout
