"""docs/launch.md's commands are run: each ``$ topology ...`` line (a trailing backslash
continues it) of its ``console`` blocks, in a temporary folder (the files one command writes,
the next reads), at 80 columns; the lines shown under it must appear in its output in order
(``...`` stands for lines left out), and an ``# exit N`` comment gives the exit status (else 0)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from topology._cli.main import main

REPO = Path(__file__).parents[1]
DOC = REPO / "docs" / "launch.md"


def _examples() -> list[tuple[str, list[str], int]]:
    """``(command line, lines shown under it, exit status)`` of every console block, in order."""
    blocks = re.findall(r"```console\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    found: list[tuple[str, list[str], int]] = []
    for block in blocks:
        lines = iter(block.splitlines())
        for line in lines:
            if line.startswith("$ "):
                while line.endswith(" \\"):  # a command continued on the next line
                    line = line[:-1] + next(lines).strip()
                command, _, comment = line[2:].partition("  # ")
                status = re.fullmatch(r"exit (\d+).*", comment.strip())
                found.append((command.strip(), [], int(status[1]) if status else 0))
            else:
                found[-1][1].append(line)
    return found


EXAMPLES = _examples()


def _repo_paths(argv: list[str]) -> list[str]:
    """``argv`` with the repository's files (``tests/data/...``) made absolute: the commands run
    in a scratch folder, where the files the doc's commands write are read back."""
    return [str(REPO / word) if word.startswith("tests/data/") else word for word in argv]


def _in_order(shown: list[str], output: list[str]) -> bool:
    """Every shown line appears in ``output``, in order; ``...`` skips any lines, and without
    one the next shown line must be the next line of the output."""
    position, gap = 0, True
    for line in shown:
        if line == "...":
            gap = True
            continue
        if gap:
            while position < len(output) and output[position] != line:
                position += 1
        if position >= len(output) or output[position] != line:
            return False
        position, gap = position + 1, False
    return True


def test_the_doc_has_the_recipe() -> None:
    """The recipe runs check, place (every format), and reshape with and without a spare."""
    commands = [shlex.split(command)[1] for command, _, _ in EXAMPLES]
    assert commands.count("check") >= 1 and commands.count("reshape") >= 2
    assert any("--format slurm" in command for command, _, _ in EXAMPLES)


def test_in_order_skips_only_where_told() -> None:
    """The matcher: ``...`` allows a gap, adjacent shown lines must be adjacent."""
    assert _in_order(["a", "...", "c"], ["a", "b", "c"])
    assert not _in_order(["a", "c"], ["a", "b", "c"])
    assert not _in_order(["c", "...", "a"], ["a", "b", "c"])


def test_every_command_runs_as_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command, in the doc's order in one folder: its exit status and its shown lines."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    for command, shown, status in EXAMPLES:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = main(_repo_paths(shlex.split(command)[1:]))
            except SystemExit as stop:  # argparse's exit 2
                code = stop.code
        lines = out.getvalue().splitlines()
        assert code == status, f"{command}: exit {code}\n{out.getvalue()}"
        assert _in_order(shown, lines), f"{command}: shown lines not in\n{out.getvalue()}"
        assert all(len(line) <= 80 for line in lines), command
