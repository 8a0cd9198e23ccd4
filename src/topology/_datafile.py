"""Reading a small JSON or TOML file a person hands us, safely (private).

Layout configs (``topology --config``) and model files (``topology.cost.load_model``) go through
:func:`read_data`: it never blocks on a FIFO or a device, never reads more than 1 MiB, and turns
every way a file can be hostile (invalid UTF-8, duplicate JSON keys, ``NaN``/``Infinity``,
integers of thousands of digits, nesting deeper than the recursion limit) into one
``TopologyError`` that names the file.
"""

from __future__ import annotations

import json
import os
import stat
import tomllib
from typing import Any, NoReturn

from ._args import show
from ._errors import TopologyError

__all__ = ["MAX_FILE_BYTES", "read_bytes", "read_data"]

MAX_FILE_BYTES = 1 << 20
"""The largest file read (1 MiB); a layout or model file is a few hundred bytes."""

_MAX_DIGITS = 30
"""The longest integer a file may spell (2**53, the largest count anywhere, has 16 digits)."""

_FILE_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def read_bytes(path: str, label: str) -> bytes:
    """The bytes of a regular file of at most 1 MiB; never blocks on a FIFO or a device.

    >>> read_bytes(None, "hostfile")
    Traceback (most recent call last):
    topology._errors.TopologyError: cannot read hostfile: a path is a string, got None (NoneType)
    """
    if not isinstance(path, str | bytes | os.PathLike):
        raise TopologyError(
            f"cannot read {label}: a path is a string, got {show(path)} ({type(path).__name__})"
        )
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except (OSError, ValueError) as error:  # ValueError: a path with a NUL byte
        reason = getattr(error, "strerror", None) or error
        raise TopologyError(f"cannot read {label}: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a file")
            raise TopologyError(f"{label} is {kind}, not a regular file; give a JSON or TOML file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_FILE_BYTES:
            chunk = os.read(fd, MAX_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise TopologyError(f"cannot read {label}: {error.strerror or error}") from None
    finally:
        os.close(fd)
    if size > MAX_FILE_BYTES:
        raise TopologyError(f"{label} is larger than 1 MiB; a layout or model file is a few kB")
    return b"".join(chunks)


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is out of range")
    return int(text)


def _json_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a number JSON allows; give a finite number")


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"key {show(key)} appears twice")
        data[key] = value
    return data


def read_data(path: str, label: str, *, toml: bool = False) -> Any:
    """The value in a JSON (or, with ``toml``, TOML) file, read safely.

    ``label`` names the file in messages, e.g. ``"--config 'x.json'"``.

    Raises:
        TopologyError: a file that cannot be read, is not a small regular file, or does not
            hold valid JSON/TOML within the limits above.

    >>> read_data("missing/m.json", "model file")
    Traceback (most recent call last):
    topology._errors.TopologyError: cannot read model file: No such file or directory
    """
    raw = read_bytes(path, label)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise TopologyError(
            f"{label} is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
    try:
        if toml:
            return tomllib.loads(text)
        return json.loads(
            text,
            parse_int=_json_int,
            parse_constant=_json_constant,
            object_pairs_hook=_json_object,
        )
    except RecursionError:
        raise TopologyError(f"{label} nests too deeply; it must be one flat table") from None
    except ValueError as error:  # JSONDecodeError, TOMLDecodeError and the hooks above
        kind = "TOML" if toml else "JSON"
        folded = " ".join(str(error).split())
        raise TopologyError(f"{label} is not valid {kind} ({folded})") from None
