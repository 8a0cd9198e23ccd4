"""A script of this folder run against megatron-core 0.19.2's own code, for the differential
tests (GTP and hybrid-CP groups, pipeline splits): one subprocess with the unpacked release
(``scripts/setup.sh`` unpacks it) on its ``PYTHONPATH``, the cases as JSON on its stdin and
what Megatron makes of each as JSON on its stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.required import missing

ORACLE = Path(__file__).resolve().parent.parent / ".venv" / "oracles" / "megatron-core-0.19.2"


def megatron_run(
    test: str, script: str, cases: list[Any], needs: str = "megatron/core/parallel_state.py"
) -> list[Any]:
    """What ``script`` (a file of this folder) writes for ``cases`` against megatron-core
    0.19.2; ``test`` names the test for :func:`~tests.required.missing` when ``needs`` (a file
    of the release) is absent."""
    if not (ORACLE / needs).exists():
        missing(test, f"megatron-core 0.19.2 is not unpacked at {ORACLE}; scripts/setup.sh does it")
    result = subprocess.run(
        [sys.executable, "-W", "ignore", str(Path(__file__).resolve().parent / script)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ORACLE)},
        timeout=600,
    )
    found: list[Any] = json.loads(result.stdout)
    return found
