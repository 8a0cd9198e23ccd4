"""What the benchmark scripts share: the median of repeated timings and writing the JSON result."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """The median wall time of ``repeat`` calls of ``fn``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def write_result(path: str, result: Any) -> None:
    """Write ``result`` as indented JSON to ``path`` (creating its folder) and say where."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
