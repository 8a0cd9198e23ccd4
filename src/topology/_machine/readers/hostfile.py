"""A plain hostfile as an :class:`~.allocation.Allocation` (private).

Format: one host per line, in the order the launcher takes them, optionally followed by
``slots=N`` (the GPUs, i.e. ranks, it runs; Open MPI's and DeepSpeed's spelling); ``#`` starts a
comment; blank lines are skipped; a file that starts with a UTF-8 byte-order mark is refused
(launchers would read it as part of the first host name). A line may name several hosts in
Slurm's host-list syntax (``node[01-04] slots=4``). Hosts without ``slots`` run
``gpus_per_host`` ranks. A hostfile says nothing about the network, so the allocation has no
tiers::

    # job 4711
    node7  slots=4
    node66 slots=4
    node[70-71]      # gpus_per_host each

>>> alloc = parse_hostfile("a slots=2\\nb  # spare\\n", gpus_per_host=4)
>>> [(h.name, h.gpus) for h in alloc.hosts]
[('a', 2), ('b', 4)]
"""

from __future__ import annotations

from ..._args import show
from ..._errors import TopologyError
from ..allocation import Allocation, Host
from ..hostlist import HostCount
from ..hosts import check_gpus
from ..textfile import check_host_name, lines, read_text

__all__ = ["parse_hostfile", "read_hostfile"]


def _slots(option: str, where: str) -> int:
    key, equals, value = option.partition("=")
    if key.strip().lower() != "slots" or not equals:
        raise TopologyError(
            f"{where} has {show(option)}; after the host only slots=N may follow, "
            "e.g. node1 slots=8"
        )
    value = value.strip()
    shown = show(value)[1:-1]
    if not value.isascii() or not value.isdecimal():
        raise TopologyError(
            f"{where} has slots={shown}; slots must be a positive int in plain digits 0-9"
        )
    number = value.lstrip("0") or "0"
    # int() stops at 4,300 digits; past that, a number of as many digits stands in (the
    # message shows a huge int by its size only)
    count = int(number) if len(number) <= 4000 else 10 ** (len(number) - 1)
    try:
        return check_gpus("slots", count)
    except TopologyError as error:
        raise TopologyError(f"{where} has slots={shown}; {error}") from None


def parse_hostfile(
    text: str, *, gpus_per_host: int | None = None, label: str = "hostfile"
) -> Allocation:
    """The hosts of a hostfile's text, in file order (see the module docstring).

    Raises:
        TopologyError: an empty file, anything but one ``slots=N`` after a host, a host listed
            twice, a host name with a control or format character, or a host without
            ``slots`` when ``gpus_per_host`` is not given.
    """
    if gpus_per_host is not None:
        check_gpus("gpus_per_host", gpus_per_host)
    hosts: list[Host] = []
    first_line: dict[str, int] = {}
    count = HostCount(label)
    for number, content in lines(text):
        where = f"{label} line {number}"
        head, *options = content.split()
        if "=" in head:
            raise TopologyError(f"{where} starts with {show(head)}; give the host name first")
        slots = [_slots(option, where) for option in options]
        if len(slots) > 1:
            raise TopologyError(
                f"{where} gives slots twice ({show(options[0])} and {show(options[1])}); "
                "give one slots=N per host, e.g. node1 slots=8"
            )
        gpus = slots[0] if slots else gpus_per_host
        if gpus is None:
            raise TopologyError(
                f"{where}: host {show(head)} has no slots=N and no gpus_per_host was given; "
                "add slots=N or pass gpus_per_host"
            )
        for name in count.expand(head):
            check_host_name(name, where)
            if name in first_line:
                raise TopologyError(
                    f"{where} lists host {show(name)} again (first on line {first_line[name]}); "
                    "list each host once with its slots"
                )
            first_line[name] = number
            hosts.append(Host(name, gpus))
    if not hosts:
        raise TopologyError(f"{label} names no hosts; write one host per line")
    return Allocation(tuple(hosts))


def read_hostfile(path: str, *, gpus_per_host: int | None = None) -> Allocation:
    """:func:`parse_hostfile` on the file at ``path``."""
    label = f"hostfile {show(path)}"
    return parse_hostfile(read_text(path, label), gpus_per_host=gpus_per_host, label=label)
