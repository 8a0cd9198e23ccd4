"""Where the newer megatron-core oracle lies, for tests that run it in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.required import missing

ORACLE_0_19 = Path(__file__).resolve().parents[2] / ".venv/oracles/megatron-core-0.19.2"
"""megatron-core 0.19.2, unpacked by ``scripts/setup.sh`` (import it with this on PYTHONPATH)."""


def oracle_0_19() -> Path:
    """The 0.19.2 oracle folder; skip without it, except under ``CI``, where it must be there."""
    if not (ORACLE_0_19 / "megatron" / "core" / "parallel_state.py").is_file():
        reason = f"megatron-core 0.19.2 is not unpacked at {ORACLE_0_19}; scripts/setup.sh does it"
        missing("the megatron-core 0.19.2 differential tests", reason)
    return ORACLE_0_19


class LineOracle:
    """One megatron-core 0.19.2 process running ``script``: a JSON case per line in, a JSON
    answer per line out (the oracle folder on ``PYTHONPATH``, ``env`` added)."""

    def __init__(self, script: Path, folder: Path, what: str, env: dict[str, str] | None = None):
        self.what = what
        self.process = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "PYTHONPATH": str(folder), **(env or {})},
        )

    def ask(self, case: dict[str, Any]) -> dict[str, Any]:
        """The oracle's answer to one case."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(case) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the megatron-core 0.19.2 {self.what} stopped answering"
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        """End the process (it exits at the end of its input)."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
