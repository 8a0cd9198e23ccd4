"""Text that fits the terminal: its width, prose wrapped between words, and one table renderer.

Every command prints through these three, so a line never exceeds the terminal (80 columns or
wider) and never breaks inside a word. The width is the terminal's (``COLUMNS`` wins, as
:func:`shutil.get_terminal_size` reads it), never below :data:`MIN_WIDTH`.
"""

from __future__ import annotations

import re
import shutil
import textwrap
from collections.abc import Sequence

__all__ = [
    "LONG_WORD",
    "MIN_WIDTH",
    "breakable",
    "escape_controls",
    "fold",
    "table",
    "terminal_width",
    "wrap",
]

MIN_WIDTH = 40
"""The narrowest width text is laid out for, whatever the terminal says."""

_GAP = "  "
"""Between two table columns."""


def terminal_width() -> int:
    """The terminal's width in columns (``COLUMNS`` first; 80 when unknown), at least 40.

    >>> terminal_width() >= MIN_WIDTH
    True
    """
    return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)


LONG_WORD = 24
"""A word longer than this (a host list, rank ranges) is written with a space after each comma,
at every width, so that it wraps at its commas and reads the same in any terminal."""


def breakable(text: str) -> str:
    """``text`` with a space after each comma of any word longer than :data:`LONG_WORD`.

    >>> breakable("hosts node[1-2,9-10,19-20,27-28] n[1,2]")
    'hosts node[1-2, 9-10, 19-20, 27-28] n[1,2]'
    """
    return " ".join(
        word.replace(",", ", ") if len(word) > LONG_WORD else word for word in text.split(" ")
    )


def wrap(text: str, width: int, indent: str = "", hang: str = "") -> list[str]:
    """``text`` wrapped between words into lines of at most ``width`` columns.

    The first line starts with ``indent``, the others with ``hang``; runs of spaces inside a
    line are kept. A long comma list is written with spaces after its commas
    (:func:`breakable`), so it wraps there; any other word stays whole (it is never split).
    Control characters are escaped first (:func:`escape_controls`).

    >>> wrap("ERROR world-size-mismatch: world_size 16 does not match", 30, hang="      ")
    ['ERROR world-size-mismatch:', '      world_size 16 does not', '      match']
    """
    text = breakable(escape_controls(text))
    lines = textwrap.wrap(
        text,
        width,
        initial_indent=indent,
        subsequent_indent=hang,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return lines or [indent.rstrip()]


def fold(text: str, width: int, hang: int = 4) -> str:
    """Every line of ``text`` longer than ``width`` wrapped, continuing ``hang`` columns deeper.

    A line keeps its own leading spaces; its continuation lines start ``hang`` spaces further
    in. Lines that fit are left exactly as they are.

    >>> print(fold("  beats #2 by 0.016 s: less dp comm", 20))
      beats #2 by 0.016
          s: less dp
          comm
    """
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip(" "))]
        out += wrap(line.lstrip(" "), width, lead, lead + " " * hang)
    return "\n".join(out)


def _shrink(
    natural: list[int], floor: list[int], wrappable: Sequence[bool], room: int
) -> list[int]:
    """Column widths that fit ``room``: narrow the widest wrappable column, one column at a time."""
    widths = list(natural)
    while sum(widths) > room:
        candidates = [i for i, ok in enumerate(wrappable) if ok and widths[i] > floor[i]]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        widths[widest] -= 1
    return widths


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    width: int,
    *,
    align: str = "",
    wrap_columns: Sequence[int] | None = None,
    indent: str = "",
    labels: int = 0,
) -> list[str]:
    """``rows`` under ``header`` as aligned lines of at most ``width`` columns (where possible).

    Columns are separated by two spaces. When the table is too wide, the wrappable columns
    (``wrap_columns``, default all) narrow, widest first, and their cells wrap between words
    onto extra lines of the row; no column becomes narrower than its longest word. Control
    characters in a cell are escaped first (:func:`escape_controls`), so widths count what the
    terminal shows.

    Args:
        header: the column titles (an empty string for an untitled column).
        rows: one sequence of cells per row; cells are shown with ``str``.
        width: the widest a line may be.
        align: one character per column, ``<`` (left, the default) or ``>`` (right).
        wrap_columns: indices of the columns that may wrap.
        indent: put in front of every line.
        labels: how many leading columns name a row. A table that cannot fit even with
            every wrappable column narrowed is split: its other columns go into several
            tables, one after another with a blank line between, each repeating these.

    >>> for line in table(("kind", "size"), [("tp", 8), ("dp-cp", 128)], 80, align="<>"):
    ...     print(line)
    kind   size
    tp        8
    dp-cp   128
    >>> table(("layout", "why"), [("tp8", "less dp comm than #2")], 18)
    ['layout  why', 'tp8     less dp', '        comm than', '        #2']
    >>> for line in table(("kind", "rack-switch", "spine-switch"), [("tp", 0, 2)], 24, labels=1):
    ...     print(line)
    kind  rack-switch
    tp              0
    <BLANKLINE>
    kind  spine-switch
    tp               2
    """
    columns = len(header)
    cells = [[escape_controls(str(cell)) for cell in row] for row in rows]
    aligns = [align[i] if i < len(align) else "<" for i in range(columns)]
    allowed = set(range(columns) if wrap_columns is None else wrap_columns)
    wrappable = [i in allowed for i in range(columns)]
    everything = [list(header), *[[breakable(cell) for cell in row] for row in cells]]
    natural = [max(len(row[i]) for row in everything) for i in range(columns)]
    floor = [
        max(max((len(w) for w in row[i].split()), default=0) for row in everything)
        for i in range(columns)
    ]
    room = width - len(indent) - len(_GAP) * (columns - 1)
    widths = _shrink(natural, floor, wrappable, room)
    if sum(widths) > room and 0 < labels < columns - 1:
        return _split(header, cells, width, aligns, wrap_columns, indent, labels, widths)
    out = []
    for row in everything:
        pieces = [
            wrap(cell, widths[i]) if len(cell) > widths[i] else [cell] for i, cell in enumerate(row)
        ]
        for depth in range(max(len(piece) for piece in pieces)):
            parts = []
            for i, piece in enumerate(pieces):
                text = piece[depth] if depth < len(piece) else ""
                parts.append(text.rjust(widths[i]) if aligns[i] == ">" else text.ljust(widths[i]))
            out.append((indent + _GAP.join(parts)).rstrip())
    return out


def _split(
    header: Sequence[str],
    cells: list[list[str]],
    width: int,
    aligns: list[str],
    wrap_columns: Sequence[int] | None,
    indent: str,
    labels: int,
    widths: list[int],
) -> list[str]:
    """:func:`table` split into tables of the label columns and as many others as fit."""
    room = width - len(indent) - sum(widths[:labels]) - len(_GAP) * labels
    pieces: list[list[int]] = [[]]
    used = 0
    for i in range(labels, len(header)):
        if pieces[-1] and used + widths[i] > room:
            pieces.append([])
            used = 0
        pieces[-1].append(i)
        used += widths[i] + len(_GAP)
    out: list[str] = []
    for piece in pieces:
        keep = [*range(labels), *piece]
        out += [""] if out else []
        out += table(
            [header[i] for i in keep],
            [[row[i] for i in keep] for row in cells],
            width,
            align="".join(aligns[i] for i in keep),
            wrap_columns=None
            if wrap_columns is None
            else [n for n, i in enumerate(keep) if i in wrap_columns],
            indent=indent,
        )
    return out


_SGR = re.compile(r"\x1b\[[0-9;]*m")
"""A colour sequence (Select Graphic Rendition): the only escape sequence our colour output
writes; kept on a terminal, where colour may be on. It changes colours, never moves the cursor,
sets a title or reaches the clipboard."""


def _escape_char(char: str) -> str:
    return char if char in "\n\t" or char.isprintable() else repr(char)[1:-1]


def escape_controls(text: str, *, keep_sgr: bool = False, escape_newlines: bool = False) -> str:
    """``text`` with every control or format character but newline and tab escaped as ``repr``
    spells it; with ``keep_sgr``, colour sequences (``ESC [ ... m``) stay; with ``escape_newlines``,
    newlines are escaped too (an error line quoting what a user typed stays one line).

    >>> escape_controls("rack\\u202e1\\ttab")
    'rack\\\\u202e1\\ttab'
    >>> escape_controls("\\x1b[1;31merror\\x1b[0m", keep_sgr=True) == "\\x1b[1;31merror\\x1b[0m"
    True
    >>> escape_controls("--bogus\\nx", escape_newlines=True)
    '--bogus\\\\nx'
    """
    if escape_newlines:
        text = text.replace("\n", "\\n")
    if text.replace("\n", "").replace("\t", "").isprintable():
        return text
    if not keep_sgr:
        return "".join(map(_escape_char, text))
    parts: list[str] = []
    start = 0
    for match in _SGR.finditer(text):
        parts += map(_escape_char, text[start : match.start()])
        parts.append(match.group())
        start = match.end()
    parts += map(_escape_char, text[start:])
    return "".join(parts)
