"""The README's ``$ topology ...`` transcripts run: each command (``\\`` continuations joined,
``# ...`` comments dropped) runs in a scratch folder that sees the repository's ``tests/`` and
``src/``, in README order (a later command may read a file an earlier one wrote), and every
output line the README shows appears in the command's output, in that order (``...`` stands for
lines left out).
A comment ``exit N`` states the exit status; without one the command must succeed."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from topology._cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def _transcripts() -> list[tuple[list[str], int, list[str]]]:
    """``(argv, exit status, shown lines)`` of every ``$ topology`` command in the README."""
    found: list[tuple[list[str], int, list[str]]] = []
    inside = False
    current: tuple[list[str], int, list[str]] | None = None
    pending = ""
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            inside = not inside
            current = None
            continue
        if not inside:
            continue
        if pending or line.startswith("$ topology "):
            code, _, comment = (pending + " " + line.strip()).partition("#")
            if code.rstrip().endswith("\\"):
                pending = code.rstrip()[:-1]
                continue
            pending = ""
            status = re.search(r"exit (\d+)", comment)
            argv = shlex.split(code.strip().removeprefix("$ topology "))
            current = (argv, int(status.group(1)) if status else 0, [])
            found.append(current)
        elif current is not None and line.strip() and not line.lstrip().startswith("#"):
            current[2].append(" ".join(line.split()))
    return found


TRANSCRIPTS = _transcripts()


def test_the_readme_has_transcripts() -> None:
    """The parser finds the README's commands (a parser that finds none would pass below)."""
    assert len(TRANSCRIPTS) >= 6


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[int, str, list[str]]]:
    """Every transcript's exit status, stderr and output lines, run once in README order in a
    scratch folder that sees the repository's tests/ (on a 200-column terminal: the README shows
    unfolded lines)."""
    folder = tmp_path_factory.mktemp("readme")
    for name in ("tests", "src"):
        (folder / name).symlink_to(ROOT / name)
    found = []
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("COLUMNS", "200")
            for argv, _, _ in TRANSCRIPTS:
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(argv)
                lines = (out.getvalue() + err.getvalue()).splitlines()
                found.append((code, err.getvalue(), [" ".join(line.split()) for line in lines]))
    finally:
        os.chdir(cwd)
    return found


@pytest.mark.parametrize("index", range(len(TRANSCRIPTS)))
def test_each_transcript_prints_what_the_readme_shows(
    results: list[tuple[int, str, list[str]]], index: int
) -> None:
    argv, status, shown = TRANSCRIPTS[index]
    code, err, printed = results[index]
    assert code == status, (argv, err)
    at = 0
    for line in shown:
        if line == "...":
            continue
        assert line in printed[at:], (argv, line, printed)
        at = printed.index(line, at) + 1
