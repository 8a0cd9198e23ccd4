"""Entry point of the ``topology`` command: build the parser, dispatch, map errors to exit codes.

Commands live in sibling modules named in :data:`COMMANDS`; each exposes
``register(subparsers) -> None``, which adds its subparser and sets ``func`` to a callable
``func(args) -> int`` (the exit code). A module that does not exist is skipped.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

from .._errors import TopologyError
from .common import EXIT_INVALID, CliError, Parser, one_line

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = ("show", "groups", "rank", "check", "simulate", "plan")
"""Command modules, in the order ``--help`` lists them."""


def build_parser() -> Parser:
    """The ``topology`` parser with every command module that is present."""
    parser = Parser(
        prog="topology",
        description="Which global ranks form which parallel group; checked before launch.",
        epilog="exit codes: 0 ok, 1 an error-level finding, 2 invalid input",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__package__}.{name}":
                raise
            continue
        module.register(subparsers)
    return parser


def _version() -> str:
    from .. import __version__

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``topology`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except (CliError, TopologyError) as error:
        sys.stderr.write(f"topology {args.command}: error: {one_line(error)}\n")
        return EXIT_INVALID
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
