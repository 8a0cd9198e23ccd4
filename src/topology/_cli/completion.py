"""Shell completion: ``topology completion bash|zsh|fish`` prints the script to load.

Completion is argcomplete's (extra ``cli``): the shell calls ``topology`` itself with
``_ARGCOMPLETE`` set, :func:`complete` answers from the real parser (commands, flags, choices,
presets, kind names) and exits before any command runs. Without argcomplete installed the
``completion`` command says which extra to install, and a completion request answers nothing.

Load it once per shell (or from the shell's startup file)::

    eval "$(topology completion bash)"          # bash
    eval "$(topology completion zsh)"           # zsh
    topology completion fish | source           # fish
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterable

from .._megatron.kinds import ALIASES, TABLE
from .common import CliError, Parser

__all__ = ["SHELLS", "complete", "kind_names", "register", "with_completer"]

SHELLS = ("bash", "zsh", "fish")
"""Shells ``topology completion`` writes a script for."""

_INSTALL = "shell completion needs argcomplete: pip install 'rank-topology[cli]'"


def kind_names() -> list[str]:
    """Every kind a command accepts: canonical names then Megatron's, without level templates.

    >>> names = kind_names()
    >>> "tp-dp" in names and "mp" in names and "embedding" in names
    True
    """
    canonical = [spec.name for spec in TABLE if "<" not in spec.name]
    return canonical + sorted(set(ALIASES) - set(canonical))


def with_completer(action: argparse.Action, values: Callable[[], Iterable[str]]) -> None:
    """Let argcomplete offer ``values()`` (computed at completion time) for ``action``."""

    def completer(prefix: str, **_: object) -> list[str]:
        return [value for value in values() if value.startswith(prefix)]

    action.completer = completer  # type: ignore[attr-defined]  # argcomplete's protocol


def complete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request from the shell and exit; do nothing for a normal run."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:  # no extra "cli": offer nothing rather than a traceback in the shell
        sys.exit(0)
    argcomplete.autocomplete(parser, always_complete_options=False)  # flags after a "-"


def register(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Add ``topology completion SHELL``."""
    parser = subparsers.add_parser(
        "completion",
        help="print the shell completion script (bash, zsh or fish)",
        description='Print the completion script for SHELL. Load it with: eval "$(topology '
        'completion bash)" (or zsh); fish: topology completion fish | source.',
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the script for ``args.shell``."""
    try:
        from argcomplete import shell_integration
    except ImportError as missing:
        raise CliError(_INSTALL) from missing
    sys.stdout.write(shell_integration.shellcode(["topology"], shell=args.shell))
    return 0
