"""The ``broker`` command line. Nothing in the library imports this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from .. import __version__
from . import (
    _acp,
    _answers,
    _chaos,
    _demo,
    _grants,
    _hooks,
    _inbox,
    _log,
    _mcp,
    _people,
    _rules,
    _serve,
    _stats,
)
from ._errors import EXIT_USAGE, run_command

__all__ = ["main"]

DESCRIPTION = """\
A fail-closed approval broker for AI agents: every question gets exactly one outcome
(allowed-once, rejected, cancelled or unavailable) and an audit pair in the session log.

examples:
  broker demo                          watch a sandbox escalation be asked and answered
  broker acp --config broker.toml      serve an editor (Zed, ...) over the Agent Client Protocol
  broker log show logs/sessions.sqlite list the sessions of a session log
  broker chaos --seed 1 --seeds 5      run seeded faults and check the invariants
  broker pending logs/sessions.sqlite  the questions waiting for an answer from elsewhere
  broker answer STORE ID allow --by me answer one of them
  broker rules check rules.toml        load a rules file and check its examples
  broker grants list STORE             the grants sessions hold; broker grants revoke STORE ID

Exit status: 0 success; 1 a check failed (a verify violation, a chaos violation, a bad import
line); 2 the command could not run as asked (usage, a bad path or file, a full disk).
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line (``broker chaos: argument --seeds: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one sub-command per feature module."""
    parser: argparse.ArgumentParser = _Parser(
        prog="broker",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"broker {__version__}")
    parser.add_argument(
        "--debug",
        action="store_true",
        help="show the full traceback of an error instead of one line",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _demo.register(sub)
    _acp.register(sub)
    _chaos.register(sub)
    _log.register(sub)
    _hooks.register(sub)
    _answers.register(sub)
    _inbox.register(sub)
    _mcp.register(sub)
    _rules.register(sub)
    _grants.register(sub)
    _serve.register(sub)
    _people.register(sub)
    _stats.register(sub)
    hook = sub.add_parser(
        "hook",
        help="answer a Claude Code or Codex hook by asking broker serve (never fails open)",
        add_help=False,
    )
    hook.add_argument("rest", nargs=argparse.REMAINDER, help="claude-code|codex [--socket …]")
    _accept_debug_anywhere(parser)
    return parser


def _accept_debug_anywhere(parser: argparse.ArgumentParser) -> None:
    """Let ``--debug`` follow the sub-command too (``broker log show STORE --debug``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.add_argument(
                    "--debug",
                    action="store_true",
                    default=argparse.SUPPRESS,
                    help="show the full traceback of an error instead of one line",
                )
                _accept_debug_anywhere(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sub-command; returns the process exit status.

    A mistake the user can fix prints one line on stderr and returns 2 (or 1 when a check
    failed); ``--debug`` shows the traceback instead (see ``broker/cli/_errors.py``).
    """
    given = list(sys.argv[1:] if argv is None else argv)
    if given[:1] == ["hook"]:
        import broker_hook  # stdlib only: what the console script runs without this package

        return broker_hook.run(given[1:])
    parser = build_parser()
    args = parser.parse_args(given)
    return run_command(args.func, args, debug=args.debug)


if __name__ == "__main__":
    sys.exit(main())
