"""megatron-core 0.19.2's own ``initialize_model_parallel`` over many layouts, for the GTP and
hybrid-CP differential tests: ``tests/megatron_gtp_oracle.py`` in one subprocess with the
unpacked release (``scripts/setup.sh`` unpacks it) on its ``PYTHONPATH``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.required import missing

ORACLE = Path(__file__).resolve().parent.parent / ".venv" / "oracles" / "megatron-core-0.19.2"
SCRIPT = Path(__file__).resolve().parent / "megatron_gtp_oracle.py"


def megatron_groups(test: str, layouts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What megatron-core 0.19.2 makes of each layout (see ``tests/megatron_gtp_oracle.py``);
    ``test`` names the test for :func:`~tests.required.missing` when the release is absent."""
    if not (ORACLE / "megatron" / "core" / "parallel_state.py").exists():
        missing(test, f"megatron-core 0.19.2 is not unpacked at {ORACLE}; scripts/setup.sh does it")
    result = subprocess.run(
        [sys.executable, str(SCRIPT)],
        input=json.dumps(layouts),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ORACLE)},
        timeout=600,
    )
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found
