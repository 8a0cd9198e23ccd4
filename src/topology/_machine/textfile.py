"""Reading a small text file a person hands us, safely, and the choice of hosts (private).

Hostfiles and Slurm ``topology.conf`` files go through :func:`read_text`, which takes the bytes
from :mod:`topology._datafile` (no FIFOs or devices, at most 1 MiB) and requires UTF-8 without a
byte-order mark. No launcher strips one: Slurm's ``SLURM_HOSTFILE`` and ``topology.conf``
parsers, Open MPI's and DeepSpeed's hostfile readers take ``EF BB BF`` as part of the first
host name (or key), and torchrun reads no hostfile at all (its rendezvous sorts the machines'
own names, which hold no mark). So a file with one is refused, naming the fix, rather than
stripped here and broken at launch.

:func:`check_host_name` is the one rule for a host name written to or read from a hostfile or
a host order: what ``place --write-hostfile`` writes, ``--host-order`` and ``--hostfile`` read
back as the same names.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._args import show
from .._datafile import read_bytes
from .._errors import TopologyError
from .hostlist import expand_hostlist

__all__ = [
    "BOM",
    "check_host_name",
    "host_name_problem",
    "host_names",
    "lines",
    "read_text",
    "selected_hosts",
]

BOM = b"\xef\xbb\xbf"
"""The UTF-8 byte-order mark a few editors put first in a text file."""

_SYNTAX = {
    " ": "a blank, which ends the name on a hostfile line",
    "#": "'#', which starts a comment on a hostfile line",
    ",": "',', which a host list reads as two hosts",
    "[": "'[', which a host list reads as a range",
    "]": "']', which a host list reads as a range",
    "=": "'=', which a hostfile line reads as an option like slots=N",
}


def read_text(path: str, label: str) -> str:
    """The text of a small regular UTF-8 file; ``label`` names it in messages.

    >>> read_text("missing/hosts", "hostfile")
    Traceback (most recent call last):
    topology._errors.TopologyError: cannot read hostfile: No such file or directory
    """
    raw = read_bytes(path, label)
    if raw.startswith(BOM):
        raise TopologyError(
            f"{label} starts with a UTF-8 byte-order mark (EF BB BF), which Slurm and hostfile "
            "launchers (mpirun, DeepSpeed) read as part of the first name; save the file as "
            "UTF-8 without it, e.g. sed -i '1s/^\\xEF\\xBB\\xBF//' FILE"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TopologyError(
            f"{label} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None


def host_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be one line of a hostfile that reads back as itself; None if it can.

    A host name is a word of printable characters without blanks or hostfile and host-list
    syntax (``#``, ``,``, ``[``, ``]``, ``=``): no control or format character (``ESC``, a
    byte-order mark, a bidi override), no surrogate from a name that was not UTF-8.

    >>> host_name_problem("gpu-node07.cluster") is None
    True
    >>> host_name_problem("node 7")
    'holds a blank, which ends the name on a hostfile line'
    >>> host_name_problem("rack[1]")
    "holds '[', which a host list reads as a range"
    """
    if not name:
        return "is empty"
    if not name.isprintable():
        char = next(c for c in name if not c.isprintable())
        return f"holds {char!r}, a control, format or blank character"
    for char, meaning in _SYNTAX.items():
        if char in name:
            return f"holds {meaning}"
    return None


def check_host_name(name: str, where: str) -> None:
    """Raise unless ``name`` passes :func:`host_name_problem`; ``where`` names the source.

    Raises:
        TopologyError: naming the host, what it holds and the rule.
    """
    problem = host_name_problem(name)
    if problem is not None:
        raise TopologyError(
            f"{where}: host {show(name)} {problem}; a host name is a word of printable "
            "characters without blanks, '#', ',', '[', ']' or '=', as hostfiles and launchers "
            "read it; rename the host"
        )


def lines(text: str) -> list[tuple[int, str]]:
    """``(line number, content)`` of each line with a ``#`` comment and blanks removed,
    empty lines dropped."""
    kept = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.partition("#")[0].strip()
        if content:
            kept.append((number, content))
    return kept


def host_names(value: object, label: str) -> tuple[str, ...]:
    """``value`` as a tuple of host names if it is a list or tuple of strings, else raise.

    A string is refused rather than read letter by letter (``"ab"`` is not hosts ``a`` and
    ``b``); ``label`` names the argument.

    >>> host_names(["n1", "n2"], "hosts")
    ('n1', 'n2')
    >>> host_names("n1", "hosts")
    Traceback (most recent call last):
    topology._errors.TopologyError: hosts must be a list or tuple of host names, got 'n1' (str)
    """
    if not isinstance(value, list | tuple):
        raise TopologyError(
            f"{label} must be a list or tuple of host names, got {show(value)} "
            f"({type(value).__name__})"
        )
    for name in value:
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(f"{label}: host names must be non-empty strings, got {show(name)}")
    return tuple(value)


def selected_hosts(hosts: str | Sequence[str] | None, label: str) -> tuple[str, ...] | None:
    """Host names from a Slurm host list string or a sequence of names; None stays None.

    Raises:
        TopologyError: a host named twice, a non-string name, neither a string nor a list or
            tuple, or an empty selection.
    """
    if hosts is None:
        return None
    if isinstance(hosts, str):
        names = expand_hostlist(hosts)
    elif isinstance(hosts, list | tuple):
        names = host_names(hosts, label)
    else:
        raise TopologyError(
            f"{label}: hosts must be a Slurm host list such as 'n[1-4]' or a list of names, "
            f"got {show(hosts)} ({type(hosts).__name__})"
        )
    if not names:
        raise TopologyError(f"{label}: the host list is empty; name the job's hosts")
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise TopologyError(f"{label}: host {show(name)} is listed twice; list each host once")
        seen.add(name)
    return names
