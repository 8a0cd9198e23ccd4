"""pytest plugin: one outcome per test, written to ``$PEER_RESULTS/rank<RANK>.json`` for tally.py.

For suites whose ranks are spawned by the tests themselves (torch's ``MultiProcessTestCase``):
the pytest process is the one that reports, so it writes ``rank0.json``. Loaded with
``-p peer_outcomes`` by ``scripts/peers/torchtitan.sh`` and ``device_mesh.sh``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

_outcomes: dict[str, str] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep one outcome per test: failed if any phase failed, else skipped or passed."""
    previous = _outcomes.get(report.nodeid)
    if report.failed:
        _outcomes[report.nodeid] = "failed"
    elif report.skipped and previous != "failed":
        _outcomes[report.nodeid] = "skipped"
    elif report.when == "call" and previous is None:
        _outcomes[report.nodeid] = "passed"
    if report.when == "teardown":
        folder = os.environ.get("PEER_RESULTS")
        if folder:  # after every test: a run cut short by a timeout still has a tally
            rank = os.environ.get("RANK", "0")
            Path(folder, f"rank{rank}.json").write_text(json.dumps(_outcomes, indent=1))
