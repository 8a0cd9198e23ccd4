"""docs/cli.md covers every command: its synopsis lists each command the parser registers, with
flags that command has, and each command has a section of its own (``### `name` ``)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from topology._cli.allocation_args import add_allocation_arguments
from topology._cli.common import (
    add_cluster_arguments,
    add_layout_arguments,
    add_output_arguments,
)
from topology._cli.main import build_parser

DOCS = Path(__file__).parents[1] / "docs" / "cli.md"


def _commands() -> dict[str, argparse.ArgumentParser]:
    """Each command the parser registers, with its subparser."""
    action = build_parser()._subparsers._group_actions[0]  # type: ignore[union-attr]
    return dict(action.choices)  # type: ignore[arg-type]


def _synopsis() -> dict[str, set[str]]:
    """The commands of docs/cli.md's first code block, each with the flags its lines name."""
    block = DOCS.read_text(encoding="utf-8").split("```\n", 2)[1]
    found: dict[str, set[str]] = {}
    command = ""
    for line in block.splitlines():
        if line.startswith("topology "):
            command = line.split()[1]
            found.setdefault(command, set())
        found[command] |= set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", line))
    return found


def test_synopsis_lists_every_command() -> None:
    """The synopsis names exactly the parser's commands."""
    assert set(_synopsis()) == set(_commands())


def test_synopsis_flags_exist() -> None:
    """Every flag a command's synopsis lines show is one of that command's options."""
    commands = _commands()
    unknown = {
        name: sorted(flags - set(commands[name]._option_string_actions))
        for name, flags in _synopsis().items()
    }
    assert {name: flags for name, flags in unknown.items() if flags} == {}


def _options(add: object) -> set[str]:
    """The option strings a shared ``add_..._arguments`` function adds."""
    parser = argparse.ArgumentParser(add_help=False)
    add(parser)  # type: ignore[operator]
    return set(parser._option_string_actions)


PLACEHOLDERS = {
    "layout": _options(add_layout_arguments),
    "cluster": _options(add_cluster_arguments),
    "allocation": _options(add_allocation_arguments),
    "--json": _options(add_output_arguments),
}
"""The words of the synopsis that stand for a group of flags (``[--json]``: the output flags)."""


def test_synopsis_shows_every_flag() -> None:
    """Each option of a command is in its synopsis lines, or in a group a placeholder word
    (``layout``, ``cluster``, ``allocation``, ``--json``) stands for there."""
    block = DOCS.read_text(encoding="utf-8").split("```\n", 2)[1]
    shown = _synopsis()
    missing = {}
    for name, parser in _commands().items():
        text = " ".join(
            line for line in ("\n" + block).split("\ntopology ")[1:] if line.split()[0] == name
        )
        covered = set(shown[name]) | {"-h", "--help"}
        covered |= {flag for word, flags in PLACEHOLDERS.items() if word in text for flag in flags}
        if "--gpus-per-node" in text:
            covered |= PLACEHOLDERS["cluster"]
        left = {
            action.option_strings[0]
            for action in parser._actions
            if action.option_strings and not covered & set(action.option_strings)
        }
        if left:
            missing[name] = sorted(left)
    assert missing == {}


def test_every_command_has_a_section() -> None:
    """Each command has a ``### `name ...` `` heading."""
    headings = re.findall(r"^### `(\w+)", DOCS.read_text(encoding="utf-8"), re.M)
    assert set(_commands()) <= set(headings)
