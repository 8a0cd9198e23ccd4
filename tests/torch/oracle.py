"""Where the newer megatron-core oracle lies, for tests that run it in a subprocess."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ORACLE_0_19 = Path(__file__).resolve().parents[2] / ".venv/oracles/megatron-core-0.19.2"
"""megatron-core 0.19.2, unpacked by ``scripts/setup.sh`` (import it with this on PYTHONPATH)."""


def oracle_0_19() -> Path:
    """The 0.19.2 oracle folder; skip without it, except under ``CI``, where it must be there."""
    if not (ORACLE_0_19 / "megatron" / "core" / "parallel_state.py").is_file():
        reason = f"megatron-core 0.19.2 is not unpacked at {ORACLE_0_19}; scripts/setup.sh does it"
        if os.environ.get("CI"):
            pytest.fail(f"the megatron-core 0.19.2 differential tests must run in CI: {reason}")
        pytest.skip(reason)
    return ORACLE_0_19
