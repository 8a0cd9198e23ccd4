"""Where the ``topology`` command's output goes: files that never block, a stdout that fails
cleanly, and text with its control characters escaped.

- :func:`check_output` checks an output path (``--svg``, ``--html``, ``--write-hostfile``)
  before a command does any work or prints anything: it must be a regular file or a new name in
  a writable folder, never a FIFO, a device, a socket or a folder (a FIFO with no reader would
  block the command forever).
- :func:`write_output` writes the file without ever blocking: it opens with ``O_NONBLOCK`` and
  refuses anything :func:`os.fstat` does not call a regular file, so a path swapped for a FIFO
  after the check is still refused.
- :class:`GuardedStdout` stands in for ``sys.stdout`` while a command runs: a write that fails
  (a full disk, a closed or unusable stdout) becomes a :class:`CliError` naming the cause (exit
  2, one line), and every control or format character a user's name may hold (``ESC``, ``CR``,
  a bidi override, a lone surrogate from a non-UTF-8 name) is printed escaped, as ``repr``
  spells it (``\\x1b``, ``\\r``, ``\\u202e``, ``\\udcff``).

(:func:`~topology._cli.text.escape_controls` does the escaping.)
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, TextIO

from .common import CliError, one_line, quoted_path
from .text import escape_controls

__all__ = ["GuardedStdout", "StdoutError", "check_output", "write_output"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _label(flag: str, path: str) -> str:
    return f"{flag} {escape_controls(quoted_path(path))}"


def _refuse(flag: str, path: str, kind: str) -> CliError:
    return CliError(
        f"{_label(flag, path)} is {kind}, not a regular file; give a file path (writing to "
        f"{kind} could block or fail)"
    )


def check_output(path: str, flag: str) -> None:
    """Check that ``path`` can take the output of ``flag``, before any work or output.

    Raises:
        CliError: an empty path, a NUL byte, an existing path that is not a regular file (a
            FIFO, a device, a socket, a folder), a file or a folder that cannot be written.
    """
    if not path or "\0" in path:
        raise CliError(f"{_label(flag, path)} is not a file path; give one like out.html")
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        folder = os.path.dirname(path) or "."
        if not os.path.isdir(folder):
            raise CliError(
                f"cannot write {_label(flag, path)}: the folder {escape_controls(repr(folder))} "
                "does not exist; create it or give another path"
            ) from None
        if not os.access(folder, os.W_OK):
            raise CliError(
                f"cannot write {_label(flag, path)}: the folder "
                f"{escape_controls(repr(folder))} is not writable; give another path"
            ) from None
        return
    except OSError as error:
        raise CliError(f"cannot write {_label(flag, path)}: {error.strerror or error}") from None
    if not stat.S_ISREG(mode):
        raise _refuse(flag, path, _kind(mode))
    if not os.access(path, os.W_OK):
        raise CliError(f"cannot write {_label(flag, path)}: Permission denied; give another path")


def write_output(path: str, flag: str, text: str) -> None:
    """Write ``text`` (UTF-8) to the regular file ``path``, replacing it; never blocks.

    Raises:
        CliError: as :func:`check_output`, or a failed write (a full disk), named with ``flag``.
    """
    check_output(path, flag)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as error:  # callers write only checked names; kept for safety
        raise CliError(
            f"cannot write {_label(flag, path)}: {escape_controls(repr(error.object[error.start]))}"
            " is not UTF-8 text"
        ) from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as error:
        if error.errno == errno.ENXIO:  # a FIFO with no reader, opened without blocking
            raise _refuse(flag, path, "a FIFO") from None
        raise CliError(f"cannot write {_label(flag, path)}: {error.strerror or error}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _refuse(flag, path, _kind(mode))
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as error:
        raise CliError(f"cannot write {_label(flag, path)}: {error.strerror or error}") from None
    finally:
        os.close(fd)


class StdoutError(CliError):
    """stdout cannot be written (a full disk, a closed stdout); exit 2 naming the cause."""


class GuardedStdout:
    """``sys.stdout`` while a command runs: control characters escaped, failures a CliError.

    A reader that went away (``BrokenPipeError``) is passed on for ``main`` to end quietly; any
    other failed write or flush (``ENOSPC`` on a full disk, ``EBADF``/``EIO``, no stdout at all)
    raises :class:`StdoutError` naming the cause. Colour sequences survive only on a terminal.
    """

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._keep_sgr = _isatty(stream)

    def _fail(self, cause: str, fix: str = "free space or redirect it elsewhere") -> StdoutError:
        return StdoutError(f"cannot write to stdout: {one_line(cause)}; {fix}")

    def write(self, text: str) -> int:
        """Write ``text`` escaped; return its length, as ``TextIO.write`` does."""
        if self._stream is None:
            raise self._fail("it is closed", "run with stdout open (e.g. > FILE)")
        safe = escape_controls(text, keep_sgr=self._keep_sgr)
        try:
            try:
                self._stream.write(safe)
            except UnicodeEncodeError:  # a terminal that is not UTF-8
                encoding = getattr(self._stream, "encoding", None) or "ascii"
                self._stream.write(
                    safe.encode(encoding, "backslashreplace").decode(encoding, "replace")
                )
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as error:  # ValueError: write to a closed file
            raise self._fail(getattr(error, "strerror", None) or str(error)) from None
        return len(text)

    def flush(self) -> None:
        """Flush the stream; a failure is a :class:`CliError` naming the cause."""
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except (OSError, ValueError) as error:
            raise self._fail(getattr(error, "strerror", None) or str(error)) from None

    def isatty(self) -> bool:
        """Whether the stream is a terminal (False without one)."""
        return _isatty(self._stream)

    def __getattr__(self, name: str) -> Any:
        if self._stream is None:
            raise AttributeError(name)
        return getattr(self._stream, name)


def _isatty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and bool(stream.isatty())
    except (OSError, ValueError, AttributeError):
        return False
