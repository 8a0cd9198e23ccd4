"""``import topology`` loads only the standard library and attrs, quickly (run in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import json, sys, time
start = time.perf_counter()
import topology
elapsed = time.perf_counter() - start
heavy = sorted(
    name for name in sys.modules
    if name.split(".")[0] in {"torch", "hypothesis", "numpy", "topology_torch", "rich"}
)
lazy = "topology.strategies" in sys.modules
print(json.dumps({"seconds": elapsed, "heavy": heavy, "strategies": lazy}))
"""


def probe() -> dict[str, object]:
    """Import topology in a fresh interpreter and report what it loaded and how long it took."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_import_loads_no_heavy_packages() -> None:
    """``import topology`` loads neither torch, hypothesis, numpy, rich nor the adapter."""
    result = probe()
    assert result["heavy"] == []
    assert result["strategies"] is False


def test_import_is_fast() -> None:
    """``import topology`` takes well under half a second (target: < 100 ms)."""
    seconds = min(float(probe()["seconds"]) for _ in range(3))  # type: ignore[arg-type]
    print(f"import topology: {seconds * 1000:.1f} ms")
    assert seconds < 0.5
