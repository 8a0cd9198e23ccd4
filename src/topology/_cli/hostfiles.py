"""Hostfiles a launcher reads and the commands that launch on them (shared by the commands that
hand a launcher its hosts; the hosts, their order and their slots come from the core).

Formats (:data:`HOSTFILE_FORMATS`), from hosts in node order with the ranks each runs:

- ``hostfile``: ``host slots=N``, one line per host (Open MPI's and DeepSpeed's hostfile;
  ``topology.read_hostfile`` and ``--hostfile`` read it back);
- ``slurm``: one line per task, each host repeated for its ranks, as ``SLURM_HOSTFILE`` with
  ``srun --distribution=arbitrary`` needs (task ``i`` runs on line ``i``'s host);
- ``order``: one host name per line, what ``--host-order`` of ``check``, ``show`` and ``place``
  reads (``place``'s default).

>>> print(hostfile_text([("node1", 2), ("node3", 1)], "hostfile"), end="")
node1 slots=2
node3 slots=1
>>> print(hostfile_text([("node1", 2), ("node3", 1)], "slurm"), end="")
node1
node1
node3
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable, Iterable, Sequence

from .common import Once

__all__ = [
    "HOSTFILE_FORMATS",
    "MASTER_PORT",
    "add_hostfile_arguments",
    "command_lines",
    "hostfile_text",
    "srun_command",
    "torchrun_command",
]

HOSTFILE_FORMATS: dict[str, Callable[[str, int], str]] = {
    "hostfile": lambda host, slots: f"{host} slots={slots}\n",
    "slurm": lambda host, slots: f"{host}\n" * slots,
    "order": lambda host, slots: f"{host}\n",
}
"""Each format's lines for one host running ``slots`` ranks (see the module docstring)."""

MASTER_PORT = 29500
"""The rendezvous port the launch commands name (torchrun's default)."""

_TASK = (
    "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID\n"
    "export WORLD_SIZE=$SLURM_NTASKS\n"
    "exec python train.py"
)
"""What each srun task runs: its ranks from Slurm's (docs/launch.md), then the script; one
statement a line, so that the script fits 80 columns."""


def hostfile_text(hosts: Iterable[tuple[str, int]], form: str) -> str:
    """``(host, slots)`` pairs in node order as a file of format ``form``."""
    line = HOSTFILE_FORMATS[form]
    return "".join(line(host, slots) for host, slots in hosts)


_FORMAT_HELP = {
    "hostfile": "'host slots=N' a line",
    "slurm": "one line per task, for SLURM_HOSTFILE with srun --distribution=arbitrary",
    "order": "one host name per line, what --host-order reads",
}
"""Each format in ``--format``'s help."""


def add_hostfile_arguments(
    parser: argparse.ArgumentParser, what: str, default: str = "hostfile"
) -> None:
    """Add ``--write-hostfile FILE`` (``what`` says which hosts) and ``--format`` (``default``
    when not given)."""
    parser.add_argument(
        "--write-hostfile",
        dest="write_hostfile",
        action=Once,
        metavar="FILE",
        help=f"also write {what} to FILE, in node order (node rank = line)",
    )
    forms = "; ".join(
        f"{name} ({text}{', the default' if name == default else ''})"
        for name, text in _FORMAT_HELP.items()
    )
    parser.add_argument(
        "--format",
        dest="hostfile_format",
        choices=tuple(HOSTFILE_FORMATS),
        action=Once,
        default=default,
        help=f"--write-hostfile's format: {forms}",
    )


def torchrun_command(nnodes: int, nproc_per_node: int | None, master: str) -> str:
    """The torchrun line every host runs, ``$NODE_RANK`` being its line in the hostfile (and
    ``$SLOTS`` its ``slots=`` where hosts run different numbers of ranks).

    >>> torchrun_command(2, 8, "node1")
    'torchrun --nnodes=2 --nproc-per-node=8 --node-rank=$NODE_RANK --master-addr=node1 \
--master-port=29500 train.py'
    """
    nproc = "$SLOTS" if nproc_per_node is None else str(nproc_per_node)
    return (
        f"torchrun --nnodes={nnodes} --nproc-per-node={nproc} --node-rank=$NODE_RANK "
        f"--master-addr={shlex.quote(master)} --master-port={MASTER_PORT} train.py"
    )


def srun_command(nnodes: int, ntasks: int, master: str, hostfile: str) -> str:
    """The srun line that starts one task per rank on the hosts of a ``slurm`` ``hostfile``
    (task ``i`` on line ``i``), each task taking its ranks from Slurm's.

    >>> srun_command(2, 16, "node1", "new.slurm")[:60]
    'MASTER_ADDR=node1 MASTER_PORT=29500 SLURM_HOSTFILE=new.slurm'
    """
    return (
        f"MASTER_ADDR={shlex.quote(master)} MASTER_PORT={MASTER_PORT} "
        f"SLURM_HOSTFILE={shlex.quote(hostfile)} srun --nodes={nnodes} --ntasks={ntasks} "
        f"--distribution=arbitrary --kill-on-bad-exit=1 bash -c {shlex.quote(_TASK)}"
    )


def command_lines(command: str, width: int, indent: str = "  ") -> list[str]:
    """``command`` as shell lines of at most ``width`` columns where its words allow, each
    continued line ending in `` \\`` (a word is never split; a quoted argument holding newlines,
    a script, goes on its own lines, its later lines indented, which the shell ignores).

    >>> command_lines("srun --nodes=2 --ntasks=16 train.py", 24)
    ['  srun --nodes=2 \\\\', '      --ntasks=16 \\\\', '      train.py']
    """
    words: Sequence[str] = shlex.split(command)
    quoted = [w if _plain(w) else shlex.quote(w) for w in words]
    hang = indent + "    "
    lines: list[str] = []
    current = indent + quoted[0]
    for word in quoted[1:]:
        first, *rest = word.split("\n")
        if len(current) + 1 + len(first) + 2 > width:
            lines.append(current + " \\")
            current = hang + first
        else:
            current += " " + first
        for part in rest:  # inside quotes: no continuation mark, the indent is the script's
            lines.append(current)
            current = hang + "  " + part
    lines.append(current)
    return lines


def _plain(word: str) -> bool:
    """True for a word shlex would not quote, or a ``$VAR`` the shell should expand."""
    return shlex.quote(word) == word or (word.startswith("--") and "=$" in word)
