"""Slurm's compressed host lists (``node[01-18,20]``) and the host orders launchers use (private).

Syntax, as Slurm's hostlist parser reads it (``src/common/hostlist.c``; ``topology.conf(5)``:
"Nodes=tux[0-3,12,18-20]"): entries are separated by commas or whitespace outside brackets; a
bracket holds comma-separated numbers and ``lo-hi`` ranges, and every number of a range is
printed as wide as ``lo`` is written (``[08-10]`` gives ``08 09 10``, ``[8-10]`` gives
``8 9 10``). An entry may hold several bracket groups and text after the last one
(``rack[1-2]-n[1-2]-ib``); the first group varies slowest, as in Slurm: ``rack1-n1-ib
rack1-n2-ib rack2-n1-ib rack2-n2-ib``. Order and repeats are kept as written.

:func:`compress_hostlist` writes hosts back in that syntax without reordering them, so
``expand_hostlist(compress_hostlist(hosts)) == hosts`` for any names free of ``[],`` and blanks.

Host orders: :func:`natural_key` (``node7 < node66``), :func:`slurm_key` (Slurm's
``hostlist_sort``: the name without its trailing number compared naturally, then that number).

>>> expand_hostlist("node[01-03,07],gpu9")
('node01', 'node02', 'node03', 'node07', 'gpu9')
>>> compress_hostlist(["node01", "node02", "node03", "node07", "gpu9"])
'node[01-03,07],gpu9'
>>> sorted(["node66", "node7", "node70"], key=natural_key)
['node7', 'node66', 'node70']
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence, Set

from .._args import show
from .._errors import TopologyError

__all__ = [
    "MAX_DIGITS",
    "MAX_HOSTS",
    "HostCount",
    "compress_hostlist",
    "expand_hostlist",
    "host_list",
    "natural_key",
    "slurm_key",
]

MAX_HOSTS = 1 << 20
"""The most hosts one host list may expand to, and all the host lists of one input together
(a hostfile, an allocation file, a ``topology.conf``, a Topograph file): Slurm itself stops at
256 Ki ranges."""

MAX_DIGITS = 64
"""The most digits of a number in a host-list bracket (Slurm reads them as 64-bit integers,
at most 20 digits, plus zero padding); longer ones are refused before any is converted."""

_SEPARATORS = ", \t\r\n"
_FORBIDDEN = re.compile(r"[\[\],\s]")
_DIGITS = re.compile(r"[0-9]+")
_LAST_NUMBER = re.compile(r"^(.*?)([0-9]+)([^0-9]*)$", re.DOTALL)
_CHUNKS = re.compile(r"[0-9]+|[^0-9]+")


def _entries(text: str) -> list[str]:
    """Split at separators outside brackets; brackets must pair and never nest."""
    entries: list[str] = []
    current: list[str] = []
    inside = False
    for char in text:
        if char == "[":
            if inside:
                raise TopologyError(f"host list {show(text)} nests brackets; write node[1-4]")
            inside = True
        elif char == "]":
            if not inside:
                raise TopologyError(f"host list {show(text)} has ']' without '['")
            inside = False
        elif char in _SEPARATORS and not inside:
            if current:
                entries.append("".join(current))
                current = []
            continue
        current.append(char)
    if inside:
        raise TopologyError(f"host list {show(text)} has '[' without ']'")
    if current:
        entries.append("".join(current))
    return entries


def _numbers(body: str, text: str, limit: int) -> list[str]:
    """The numbers of one bracket body, ``"01-03,7"`` -> ``["01", "02", "03", "7"]``; more
    than ``limit`` of them is refused before any is listed."""
    ranges: list[tuple[int, int, int]] = []
    count = 0
    for part in body.split(","):
        lo, dash, hi = part.partition("-")
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)):
            raise TopologyError(
                f"host list {show(text)} has range {show(part)}; a range is a number or lo-hi "
                "with digits only, e.g. [1-4,7]"
            )
        longest = max(len(lo), len(hi))
        if longest > MAX_DIGITS:
            raise TopologyError(
                f"host list {show(text)} has a number of {longest} digits; numbers in brackets "
                f"have at most {MAX_DIGITS}"
            )
        first, last = int(lo), int(hi) if dash else int(lo)
        if first > last:
            raise TopologyError(
                f"host list {show(text)} has range {show(part)} with {first} > {last}; "
                f"write {last}-{first}"
            )
        count += last - first + 1
        if count > limit:
            raise _TooMany(count)
        ranges.append((first, last, len(lo)))
    return [f"{n:0{width}d}" for first, last, width in ranges for n in range(first, last + 1)]


class _TooMany(Exception):
    """A host list names more hosts than allowed (the caller words the message)."""


def _expand_entry(entry: str, text: str, limit: int) -> list[str]:
    names = [""]
    rest = entry
    while "[" in rest:
        head, _, tail = rest.partition("[")
        body, _, rest = tail.partition("]")
        numbers = _numbers(body, text, limit // len(names))
        if len(names) * len(numbers) > limit:
            raise _TooMany(len(names) * len(numbers))
        names = [f"{name}{head}{number}" for name in names for number in numbers]
    return [name + rest for name in names]


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Every host a Slurm host list names, in the order written (repeats kept).

    Raises:
        TopologyError: unpaired or nested brackets, a range that is not ``lo-hi`` with
            ``lo <= hi``, a number of more than :data:`MAX_DIGITS` digits, or more than
            :data:`MAX_HOSTS` hosts (refused before they are listed).

    >>> expand_hostlist("a[1-2]b[3-4]")
    ('a1b3', 'a1b4', 'a2b3', 'a2b4')
    >>> expand_hostlist("node[3-1]")
    Traceback (most recent call last):
    topology._errors.TopologyError: host list 'node[3-1]' has range '3-1' with 3 > 1; write 1-3
    """
    return HostCount("").expand(text)


class HostCount:
    """The hosts the host lists of one input have named so far, at most :data:`MAX_HOSTS` in
    all: each list is refused before it is expanded past the rest of that budget.

    >>> count = HostCount("hostfile 'h'")
    >>> count.expand("n[1-3]"), count.named
    (('n1', 'n2', 'n3'), 3)
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.named = 0

    def expand(self, text: str) -> tuple[str, ...]:
        """:func:`expand_hostlist` of ``text``, counted against the input's budget."""
        if not isinstance(text, str):
            raise TopologyError(f"a host list must be a string, got {show(text)}")
        limit = MAX_HOSTS - self.named
        hosts: list[str] = []
        try:
            for entry in _entries(text):
                hosts.extend(_expand_entry(entry, text, limit - len(hosts)))
                if len(hosts) > limit:
                    raise _TooMany(len(hosts))
        except _TooMany:
            if self.label:
                raise TopologyError(
                    f"{self.label} names more than {MAX_HOSTS} hosts in all its host lists "
                    f"({self.named} before {show(text)}); give the job's hosts only"
                ) from None
            raise TopologyError(f"host list {show(text)} has more than {MAX_HOSTS} hosts") from None
        self.named += len(hosts)
        return tuple(hosts)


def _split(host: str) -> tuple[str, str, str] | None:
    """``(prefix, number, suffix)`` at the last run of digits, or None without digits or
    when that run is longer than :data:`MAX_DIGITS` (such a name is written as it is)."""
    match = _LAST_NUMBER.match(host)
    if match is None or len(match.group(2)) > MAX_DIGITS:
        return None
    prefix, number, suffix = match.groups()
    return prefix, number, suffix


def _ranges(numbers: list[str]) -> str:
    """``["01", "02", "03", "07"]`` -> ``"01-03,07"`` (runs that re-expand exactly)."""
    parts: list[str] = []
    start = 0
    while start < len(numbers):
        lo = numbers[start]
        width, value = len(lo), int(lo)
        end = start + 1
        while end < len(numbers) and numbers[end] == f"{value + end - start:0{width}d}":
            end += 1
        parts.append(lo if end == start + 1 else f"{lo}-{numbers[end - 1]}")
        start = end
    return ",".join(parts)


def compress_hostlist(hosts: Iterable[str]) -> str:
    """Hosts in Slurm's compressed syntax, in the same order (neighbours sharing all but their
    last number share a bracket).

    Names whose last number is longer than :data:`MAX_DIGITS` digits are written as they are.

    Raises:
        TopologyError: ``hosts`` a string, a mapping, a set (no order) or not iterable, or a
            name that is empty or holds ``[``, ``]``, ``,`` or a blank.

    >>> compress_hostlist(["n8", "n9", "n10", "n2", "ib-n1-x"])
    'n[8-10,2],ib-n1-x'
    """
    if isinstance(hosts, str | Mapping | Set) or not isinstance(hosts, Iterable):
        hint = f"; for one name write [{show(hosts)}]" if isinstance(hosts, str) else ""
        raise TopologyError(
            f"compress_hostlist takes host names (a list), got {show(hosts)} "
            f"({type(hosts).__name__}){hint}"
        )
    groups: list[tuple[tuple[str, str] | None, list[str]]] = []
    for host in hosts:
        if not isinstance(host, str) or not host or _FORBIDDEN.search(host):
            raise TopologyError(
                f"host name {show(host)} cannot be written in a host list; names must be "
                "non-empty and hold no '[', ']', ',' or blanks"
            )
        parts = _split(host)
        key = None if parts is None else (parts[0], parts[2])
        if parts is not None and groups and groups[-1][0] == key:
            groups[-1][1].append(parts[1])
        else:
            groups.append((key, [host if parts is None else parts[1]]))
    written = []
    for key, numbers in groups:
        if key is None:
            written.append(numbers[0])
        elif len(numbers) == 1:
            written.append(f"{key[0]}{numbers[0]}{key[1]}")
        else:
            written.append(f"{key[0]}[{_ranges(numbers)}]{key[1]}")
    return ",".join(written)


def _number(digits: str) -> tuple[int, str]:
    """A run of digits as a key that orders like its value, for any length (no int())."""
    value = digits.lstrip("0")
    return len(value), value


def natural_key(host: str) -> tuple[tuple[int, tuple[int, str], str], ...]:
    """Sort key of natural order: runs of digits compare as numbers (``node7 < node66``).

    A total order: equal keys mean equal names (``node07`` and ``node7`` tie on the number and
    are then told apart by the digits as written). Digit runs sort before text at the same place.
    Numbers of any length compare by value, without converting them.

    >>> sorted(["b2", "a10", "a9", "a09"], key=natural_key)
    ['a09', 'a9', 'a10', 'b2']
    """
    return tuple(
        (0, _number(chunk), chunk) if _DIGITS.fullmatch(chunk) else (1, (0, ""), chunk)
        for chunk in _CHUNKS.findall(host)
    )


def slurm_key(host: str) -> tuple[object, ...]:
    """Sort key of Slurm's ``hostlist_sort``: the name without its trailing number compared
    naturally, names without a trailing number first, then the number, then its width.

    >>> sorted(["node10", "node9", "node", "login1"], key=slurm_key)
    ['login1', 'node', 'node9', 'node10']
    """
    prefix = host.rstrip("0123456789")
    number = host[len(prefix) :]
    if not number:
        return (natural_key(prefix), 0, (0, ""), 0, host)
    return (natural_key(prefix), 1, _number(number), len(number), host)


def host_list(names: Sequence[str]) -> str:
    """Host names for a person to read: a Slurm host list, or joined by commas where a name
    cannot be written in one.

    >>> host_list(["node1", "node2", "node3", "node10"]), host_list(["a b", "c"])
    ('node[1-3,10]', 'a b,c')
    """
    try:
        return compress_hostlist(names)
    except TopologyError:
        return ",".join(names)
