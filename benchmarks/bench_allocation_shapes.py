"""CPU time and peak memory of ``check`` and ``place`` on allocation shapes whose domains are not
runs of consecutive hosts, at 2**26 ranks (issue 31, item 7).

Shapes (all written here, deterministic; ``H`` hosts of ``G`` GPUs, ``H * G = 2**26``):

- ``racks listed``: 1,024 hosts in 2 NVLink racks of 512 consecutive hosts (the baseline).
- ``racks interleaved``: the same hosts, rack ``i % 2`` (host ``i``'s rack alternates).
- ``racks scattered``: 8,192 hosts of 8,192 GPUs in 512 racks, rack ``i % 512``.
- ``singleton racks``: 1,024 hosts, each its own NVLink rack, under leaves of 32 hosts.
- ``strided leaves``: 1,024 hosts in racks of 16 consecutive hosts, leaf ``i % 32``.
- ``deep chain``: a ``topology.conf`` of 32 leaves of 32 hosts under a chain of 400 switches
  (401 tiers).
- ``ragged racks``: 8,192 hosts in racks of 18 and 17 hosts, alternately.
- ``unknown domains``: 1,024 hosts in racks of 32, every third host of unknown rack.
- ``lexicographic``: 1,024 hosts ``n0 .. n1023`` in racks of 32 by number, launched in
  torchrun's lexicographic order (``n10 < n2``), so no rack is a run of node ranks.

Layouts: ``dense`` (tp 8, pp 8, dp the rest) and ``moe`` (tp 2, cp 2, ep 8, etp 1, pp 4).

Each run is the CLI in a fresh process under ``/usr/bin/time -v`` (user + system CPU seconds,
maximum resident set size), with a wall-clock limit (``--timeout``, default 120 s) and an address
space limit of 8 GB; a run cut by either is shown as such. The goal: every row under 2 CPU-s and
200 MB. A benchmark, not a test: the numbers depend on the machine.

Run: ``python benchmarks/bench_allocation_shapes.py [--timeout S] [--only TEXT] [--src DIR]``
(``--src``: the ``src`` folder to measure, e.g. a checkout of an older commit, for a before/after
table); prints a table and writes ``benchmarks/results/allocation_shapes.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
WORLD = 1 << 26
MEMORY_LIMIT = 8 << 30
LAYOUTS: dict[str, tuple[str, ...]] = {
    "dense": ("--tp", "8", "--pp", "8"),
    "moe": ("--tp", "2", "--cp", "2", "--ep", "8", "--etp", "1", "--pp", "4"),
}


def _toml(
    tiers: list[tuple[str, bool]], hosts: list[tuple[str, list[str | None]]], gpus: int
) -> str:
    """An allocation file: ``tiers`` (name, nvlink) and per host its name and domain per tier."""
    lines = [f"gpus_per_host = {gpus}"]
    for name, nvlink in tiers:
        lines += ["[[tiers]]", f'name = "{name}"', f"nvlink = {str(nvlink).lower()}"]
    for host, domains in hosts:
        known = ", ".join(
            f'{tier} = "{domain}"'
            for (tier, _), domain in zip(tiers, domains, strict=True)
            if domain is not None
        )
        lines += ["[[hosts]]", f'name = "{host}"', f"domains = {{ {known} }}"]
    return "\n".join(lines) + "\n"


def _shapes(folder: Path, world: int = WORLD) -> dict[str, tuple[str, ...]]:
    """Per shape, the CLI arguments that give its allocation (files written to ``folder``) for
    ``world`` ranks (a power of two, at least 2**16)."""

    def write(name: str, text: str) -> str:
        path = folder / name
        path.write_text(text)
        return str(path)

    rack = [("rack", True)]
    hosts = 1 << 13
    big, many = world >> 10, world >> 13  # GPUs per host: 1,024 or 8,192 hosts
    chain = [f"SwitchName=l{i} Nodes=n[{32 * i}-{32 * i + 31}]" for i in range(32)]
    chain += ["SwitchName=c0 Switches=l[0-31]"]
    chain += [f"SwitchName=c{i} Switches=c{i - 1}" for i in range(1, 400)]
    ragged: list[tuple[str, list[str | None]]] = []
    number = 0
    while len(ragged) < hosts:
        for _ in range(18 if number % 2 == 0 else 17):
            ragged.append((f"n{len(ragged)}", [f"r{number}"]))
        number += 1
    listed = [(f"n{i}", [f"r{i // 512}"]) for i in range(1024)]
    return {
        "racks listed": ("--allocation", write("listed.toml", _toml(rack, listed, big))),
        "racks interleaved": (
            "--allocation",
            write(
                "interleaved.toml",
                _toml(rack, [(f"n{i}", [f"r{i % 2}"]) for i in range(1024)], big),
            ),
        ),
        "racks scattered": (
            "--allocation",
            write(
                "scattered.toml",
                _toml(rack, [(f"n{i}", [f"r{i % 512}"]) for i in range(hosts)], many),
            ),
        ),
        "singleton racks": (
            "--allocation",
            write(
                "singleton.toml",
                _toml(
                    [("rack", True), ("leaf", False)],
                    [(f"n{i}", [f"r{i}", f"l{i // 32}"]) for i in range(1024)],
                    big,
                ),
            ),
        ),
        "strided leaves": (
            "--allocation",
            write(
                "strided.toml",
                _toml(
                    [("rack", True), ("leaf", False)],
                    [(f"n{i}", [f"r{i // 16}", f"l{i % 32}"]) for i in range(1024)],
                    big,
                ),
            ),
        ),
        "deep chain": (
            "--slurm-topology",
            write("chain.conf", "\n".join(chain) + "\n"),
            "--hosts",
            "n[0-1023]",
            "--gpus-per-host",
            str(big),
        ),
        "ragged racks": (
            "--allocation",
            write("ragged.toml", _toml(rack, ragged[:hosts], many)),
        ),
        "unknown domains": (
            "--allocation",
            write(
                "unknown.toml",
                _toml(
                    rack,
                    [(f"n{i}", [None if i % 3 == 2 else f"r{i // 32}"]) for i in range(1024)],
                    big,
                ),
            ),
        ),
        "lexicographic": (
            "--allocation",
            write(
                "lexicographic.toml",
                _toml(rack, [(f"n{i}", [f"r{i // 32}"]) for i in range(1024)], big),
            ),
            "--launcher-order",
            "lexicographic",
        ),
    }


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _measure(argv: tuple[str, ...], folder: Path, src: Path, timeout: float) -> dict[str, object]:
    timing = folder / "time.txt"
    timing.unlink(missing_ok=True)
    command = ["/usr/bin/time", "-v", "-o", str(timing), sys.executable, "-m", "topology._cli.main"]
    env = {**os.environ, "PYTHONPATH": str(src)}
    try:
        done = subprocess.run(
            [*command, *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env=env,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return {"cpu_seconds": None, "max_rss_mb": None, "exit": None, "message": "timeout"}
    report = timing.read_text() if timing.exists() else ""

    def field(name: str) -> float:
        match = re.search(rf"{re.escape(name)}: ([0-9.]+)", report)
        return float(match.group(1)) if match else float("nan")

    lines = done.stderr.strip().splitlines()
    return {
        "cpu_seconds": round(field("User time (seconds)") + field("System time (seconds)"), 2),
        "max_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024, 1),
        "exit": done.returncode,
        "message": lines[-1][:150] if done.returncode > 1 and lines else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--only", default="", help="run only the rows whose name holds this")
    parser.add_argument("--src", type=Path, default=Path(__file__).resolve().parents[1] / "src")
    parser.add_argument("--world", type=int, default=WORLD, help="ranks (a power of two >= 2**16)")
    parser.add_argument("--out", type=Path, default=RESULTS / "allocation_shapes.json")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for shape, source in _shapes(Path(folder), args.world).items():
            for layout, flags in LAYOUTS.items():
                for command in ("check", "place"):
                    name = f"{command} {shape}, {layout}"
                    if args.only not in name:
                        continue
                    argv = (command, *source, "--world-size", str(args.world), *flags)
                    row = {"case": name, **_measure(argv, Path(folder), args.src, args.timeout)}
                    rows.append(row)
                    cpu, rss = row["cpu_seconds"], row["max_rss_mb"]
                    shown = "timeout" if cpu is None else f"{cpu:6.2f} CPU-s {rss:7.1f} MB"
                    print(f"{name:40} {shown}  exit {row['exit']}", flush=True)
                    if row["message"]:
                        print(f"    {row['message']}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
