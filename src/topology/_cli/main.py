"""Entry point of the ``topology`` command: build the parser, dispatch, map errors to exit codes.

Commands live in sibling modules named in :data:`COMMANDS`; each exposes
``register(subparsers) -> None``, which adds its subparser and sets ``func`` to a callable
``func(args) -> int`` (the exit code).

Exit codes: 0 ok, 1 an error-level finding, 2 invalid input, 3 an internal error. Nothing
prints a traceback unless the environment sets ``TOPOLOGY_DEBUG=1``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from .. import __version__
from .._errors import TopologyError
from . import check, completion, groups, place, plan, rank, reshape, show, simulate, transfer
from .common import EXIT_INTERNAL, EXIT_INVALID, EXIT_OK, CliError, Parser, one_line, shorten
from .output import GuardedStdout, StdoutError
from .text import escape_controls

__all__ = ["COMMANDS", "EPILOG", "build_parser", "main"]

COMMANDS = (show, groups, rank, check, place, simulate, plan, transfer, reshape, completion)
"""Command modules, in the order ``--help`` lists them."""

EPILOG = (
    "exit codes: 0 ok; 1 an error-level finding (check); 2 invalid input (one line on stderr); "
    "3 internal error (a bug: please report it with the command line; TOPOLOGY_DEBUG=1 shows "
    "the traceback)"
)


def build_parser() -> Parser:
    """The ``topology`` parser with every command of :data:`COMMANDS`."""
    parser = Parser(
        prog="topology",
        description="Which global ranks form which parallel group; checked before launch.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(subparsers)
    return parser


def _command_parser(parser: Parser, command: str) -> Parser:
    """The subparser of ``command`` (``parser`` itself if there is none)."""
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        choices = getattr(action, "choices", None) or {}
        if command in choices:
            found: Parser = choices[command]
            return found
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (e.g. captured in tests)
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``topology`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.

    Invalid input (``CliError``, ``TopologyError``, a usage error) returns 2 after one line on
    stderr; so does a stdout that cannot be written (a full disk, a closed stdout), naming the
    cause. A reader that went away (a broken pipe) ends quietly. Any other exception returns 3
    after one line inviting a report (the traceback only with ``TOPOLOGY_DEBUG=1``). While the
    command runs, ``sys.stdout`` is a :class:`GuardedStdout`: control characters in names are
    printed escaped.
    """
    stdout = sys.stdout
    sys.stdout = GuardedStdout(stdout)
    try:
        return _run(argv)
    finally:
        sys.stdout = stdout


def _run(argv: Sequence[str] | None) -> int:
    name = "topology"
    try:
        parser = build_parser()
        completion.complete(parser)  # a shell asking for completions: answer and exit
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the command's own parser, under its name, with a suggestion
            _command_parser(parser, args.command).error(
                f"unrecognized arguments: {' '.join(map(shorten, extra))}"
            )
        name = f"topology {args.command}"
        code: int = args.func(args)
        sys.stdout.flush()  # a full disk shows here, while an error can still be reported
    except SystemExit as done:  # argparse: --help, --version and usage errors
        return done.code if isinstance(done.code, int) else EXIT_OK
    except (CliError, TopologyError) as error:
        if isinstance(error, StdoutError):
            _silence_stdout()
        sys.stderr.write(f"{name}: error: {escape_controls(one_line(error))}\n")
        return EXIT_INVALID
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        return 130
    except Exception as error:
        if os.environ.get("TOPOLOGY_DEBUG") == "1":
            raise
        sys.stderr.write(
            f"{name}: internal error: {type(error).__name__}: "
            f"{escape_controls(one_line(error, 500))}; please report this with the command line\n"
        )
        return EXIT_INTERNAL
    return code


if __name__ == "__main__":
    sys.exit(main())
