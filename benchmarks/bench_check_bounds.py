"""CPU time and peak memory of ``check``, ``show`` and ``place`` on large allocations (issue 22).

Each case runs the CLI in a fresh process under ``/usr/bin/time -v`` and reads its user + system
CPU seconds and maximum resident set size; the goal is under 2 CPU-s and 200 MB for ``check`` of
65,536 hosts x 8 GPUs at tp 8 and of 2**26 ranks on 1,024 hosts. Cases that end in an error
(bounds on the readers' input) are listed with their exit code. A benchmark, not a test: the
numbers depend on the machine.

Run: ``python benchmarks/bench_check_bounds.py``; prints a table and writes
``benchmarks/results/check_bounds.json``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

BIG_HOSTS = ("--hosts", "n[0-65535]", "--gpus-per-host", "8", "--tp", "8")
HUGE_HOSTS = ("--hosts", "n[0-1023]", "--gpus-per-host", "65536", "--tp", "8")


def _files(folder: Path) -> dict[str, Path]:
    """Input files of the reader cases (hostile sizes, written once)."""
    chain = folder / "chain.conf"
    lines = ["SwitchName=s0 Nodes=n[0-3]"]
    lines += [f"SwitchName=s{i} Switches=s{i - 1}" for i in range(1, 3000)]
    chain.write_text("\n".join(lines) + "\n")
    hostfile = folder / "hosts.txt"
    hostfile.write_text(
        "".join(f"n[{i << 20}-{(i << 20) + (1 << 20) - 1}] slots=8\n" for i in range(26))
    )
    ragged = folder / "ragged.toml"
    racks = "".join(
        f'[[hosts]]\nnames = "r{r}n[1-{18 if r % 4 < 2 else 17}]"\ndomains = {{ rack = "r{r}" }}\n'
        for r in range(512)
    )
    ragged.write_text(f'gpus_per_host = 4\n[[tiers]]\nname = "rack"\nnvlink = true\n{racks}')
    scattered = folder / "scattered.toml"
    hosts = "".join(
        f'[[hosts]]\nname = "n{i}"\ndomains = {{ rack = "r{i % 512}" }}\n' for i in range(8192)
    )
    scattered.write_text(f'gpus_per_host = 4\n[[tiers]]\nname = "rack"\nnvlink = true\n{hosts}')
    return {"chain": chain, "hostfile": hostfile, "ragged": ragged, "scattered": scattered}


def _cases(files: dict[str, Path]) -> list[tuple[str, tuple[str, ...]]]:
    bracket = ",".join(f"{i << 20}-{(i << 20) + (1 << 20) - 1}" for i in range(40))
    chain = ("--slurm-topology", str(files["chain"]), "--hosts", "n[0-3]", "--gpus-per-host", "8")
    return [
        ("check 65,536 hosts x 8, tp 8", ("check", *BIG_HOSTS)),
        ("show 65,536 hosts x 8, tp 8", ("show", *BIG_HOSTS)),
        ("place 65,536 hosts x 8, tp 8", ("place", *BIG_HOSTS)),
        ("check 2**26 ranks on 1,024 hosts", ("check", *HUGE_HOSTS)),
        ("show 2**26 ranks on 1,024 hosts", ("show", *HUGE_HOSTS)),
        ("place 2**26 ranks on 1,024 hosts, pp 4", ("place", *HUGE_HOSTS, "--pp", "4")),
        (
            "check 512 ragged racks, 35,840 GPUs",
            ("check", "--allocation", str(files["ragged"]), "--tp", "8"),
        ),
        (
            "check 8,192 hosts, racks scattered",
            ("check", "--allocation", str(files["scattered"]), "--tp", "8"),
        ),
        (
            "hosts: 40 ranges of 2**20 in a bracket",
            ("check", "--hosts", f"n[{bracket}]", "--gpus-per-host", "8"),
        ),
        ("hostfile: 26 lists of 2**20 hosts", ("check", "--hostfile", str(files["hostfile"]))),
        ("topology.conf: switch chain of 3,000", ("check", *chain)),
        (
            "hosts: a 5,000-digit bracket",
            ("check", "--hosts", f"n[{'9' * 5000}]", "--gpus-per-host", "8"),
        ),
    ]


def _measure(argv: tuple[str, ...], folder: Path) -> dict[str, object]:
    timing = folder / "time.txt"
    command = ["/usr/bin/time", "-v", "-o", str(timing), sys.executable, "-m", "topology._cli.main"]
    done = subprocess.run(
        [*command, *argv], capture_output=True, text=True, timeout=600, check=False
    )
    report = timing.read_text()

    def field(name: str) -> float:
        match = re.search(rf"{re.escape(name)}: ([0-9.]+)", report)
        return float(match.group(1)) if match else float("nan")

    cpu = field("User time (seconds)") + field("System time (seconds)")
    lines = done.stderr.strip().splitlines()
    return {
        "cpu_seconds": round(cpu, 2),
        "max_rss_mb": round(field("Maximum resident set size (kbytes)") / 1024, 1),
        "exit": done.returncode,
        "message": lines[-1][:150] if done.returncode and lines else "",
    }


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, argv in _cases(_files(Path(folder))):
            row = {"case": name, **_measure(argv, Path(folder))}
            rows.append(row)
            cpu, rss = row["cpu_seconds"], row["max_rss_mb"]
            print(f"{name:42} {cpu:6.2f} CPU-s {rss:7.1f} MB  exit {row['exit']}")
            if row["message"]:
                print(f"    {row['message']}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "check_bounds.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
