"""``import topology`` loads only the standard library and attrs (run in a subprocess).

How long the import takes is measured in benchmarks/bench_core.py, not asserted here.
"""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys
import topology
heavy = sorted(
    name for name in sys.modules
    if name.split(".")[0] in {"torch", "hypothesis", "numpy", "topology_torch", "rich"}
)
lazy = "topology.strategies" in sys.modules
print(json.dumps({"heavy": heavy, "strategies": lazy}))
"""


def probe() -> dict[str, object]:
    """Import topology in a fresh interpreter and report what it loaded."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=600
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_import_loads_no_heavy_packages() -> None:
    """``import topology`` loads neither torch, hypothesis, numpy, rich nor the adapter."""
    result = probe()
    assert result["heavy"] == []
    assert result["strategies"] is False
