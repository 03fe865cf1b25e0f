"""broker hooks check FILE: report what a Claude Code settings file would not run.

examples:
  broker hooks check .claude/settings.json
  broker hooks check settings.json --tool bash --tool edit

Exit status: 0 when every hook in the file can run here; 1 when something would silently run
fewer hooks than the file says (an unknown event key, an event or hook type this broker does
not run, a matcher that matches no registered tool); 2 when the file cannot be used at all
(unreadable, not JSON, a malformed hook). Problems go to stdout, one per line; a fatal error
goes to stderr.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from .._display import printable
from ..hooks import PROJECT_TOOLS, HookSettings, HookSettingsError

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_CANNOT_RUN = 2


def register(sub: _Sub) -> None:
    """Add the ``hooks`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "hooks",
        help="check a Claude Code settings file's hooks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="hooks_command", required=True, metavar="ACTION")
    check = actions.add_parser("check", help="report hooks that would never run")
    check.add_argument("file", help="the settings file (e.g. .claude/settings.json)")
    check.add_argument(
        "--tool",
        action="append",
        dest="tools",
        help=f"a registered tool name (repeatable; default: {', '.join(PROJECT_TOOLS)})",
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Run ``broker hooks check FILE``; returns the exit status."""
    # The same problems are logged as warnings at load; here they are the output, once.
    quiet = logging.NullHandler()
    logger = logging.getLogger("broker.hooks")
    logger.addHandler(quiet)
    try:
        settings = HookSettings.from_file(args.file)
    except HookSettingsError as exc:
        print(f"broker hooks check: {printable(str(exc))}", file=sys.stderr)
        return EXIT_CANNOT_RUN
    finally:
        logger.removeHandler(quiet)
    problems = settings.check(tuple(args.tools or PROJECT_TOOLS))
    for problem in problems:
        print(printable(problem))
    if problems:
        return EXIT_PROBLEMS
    hooks = sum(len(group.hooks) for group in settings.pre_tool_use)
    print(f"{printable(args.file)}: ok ({hooks} PreToolUse command hooks)")
    return EXIT_OK
