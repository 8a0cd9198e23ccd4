"""Reading a small text file a person hands us, safely, and the choice of hosts (private).

Hostfiles and Slurm ``topology.conf`` files go through :func:`read_text`, which takes the bytes
from :mod:`topology._datafile` (no FIFOs or devices, at most 1 MiB) and requires UTF-8.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..._args import show
from ..._datafile import _read_bytes
from ..._errors import TopologyError
from .hostlist import expand_hostlist

__all__ = ["lines", "read_text", "selected_hosts"]


def read_text(path: str, label: str) -> str:
    """The text of a small regular UTF-8 file; ``label`` names it in messages.

    >>> read_text("missing/hosts", "hostfile")
    Traceback (most recent call last):
    topology._errors.TopologyError: cannot read hostfile: No such file or directory
    """
    raw = _read_bytes(path, label)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TopologyError(
            f"{label} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None


def lines(text: str) -> list[tuple[int, str]]:
    """``(line number, content)`` of each line with a ``#`` comment and blanks removed,
    empty lines dropped."""
    kept = []
    for number, line in enumerate(text.splitlines(), start=1):
        content = line.partition("#")[0].strip()
        if content:
            kept.append((number, content))
    return kept


def selected_hosts(hosts: str | Sequence[str] | None, label: str) -> tuple[str, ...] | None:
    """Host names from a Slurm host list string or a sequence of names; None stays None.

    Raises:
        TopologyError: a host named twice, a non-string name, or an empty selection.
    """
    if hosts is None:
        return None
    names = expand_hostlist(hosts) if isinstance(hosts, str) else tuple(hosts)
    if not names:
        raise TopologyError(f"{label}: the host list is empty; name the job's hosts")
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(f"{label}: host names must be non-empty strings, got {show(name)}")
        if name in seen:
            raise TopologyError(f"{label}: host {show(name)} is listed twice; list each host once")
        seen.add(name)
    return names
