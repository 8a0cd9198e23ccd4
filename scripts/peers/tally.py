"""Tally a peer suite run by several ranks: a test passes when it passed on every rank.

Usage: python scripts/peers/tally.py RESULTS_DIR LABEL  (RESULTS_DIR holds rank<N>.json files
written by a harness plugin such as megatron_harness.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: str, label: str) -> int:
    runs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("rank*.json"))]
    if not runs:
        print(f"{label}: no results in {folder} (did the run start?)")
        return 1
    names = sorted({name for run in runs for name in run})
    verdicts: dict[str, str] = {}
    for name in names:
        seen = {run.get(name, "missing") for run in runs}
        verdicts[name] = (
            "passed" if seen == {"passed"} else "skipped" if seen == {"skipped"} else "failed"
        )
    counts = {
        v: sum(1 for x in verdicts.values() if x == v) for v in ("passed", "failed", "skipped")
    }
    for name, verdict in verdicts.items():
        if verdict != "passed":
            print(f"  {verdict:7} {name}")
    print(
        f"{label}: {counts['passed']} of {len(names)} pass on all {len(runs)} ranks "
        f"({counts['failed']} fail, {counts['skipped']} skipped)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:3]))
