"""How the ``broker`` command reports a mistake a user can make: one line, a fitting exit status.

Every sub-command runs through :func:`run_command`. It catches the errors a user can cause — a
bad path, a damaged store, a full disk, a closed pipe, a bad config, a bad number — prints one
line on stderr (``broker <command>: <what is wrong>: <what to do>``) and returns

* :data:`EXIT_CHECK_FAILED` (1) when a check failed on the content (a verify violation, a bad
  import line, an import into an existing session);
* :data:`EXIT_USAGE` (2) when the command cannot run as asked (usage, input, environment).

Anything else is a bug and propagates with its traceback; ``broker --debug`` lets the known
errors propagate too. Containment is only for those listed here (house rule 8).
"""

from __future__ import annotations

import argparse
import errno
import os
import sqlite3
import sys
from collections.abc import Callable

from .._composition import CompositionError
from ..agent import ScenarioError
from ..hooks import HookSettingsError
from ..store import (
    AnswerRefusedError,
    ImportLineError,
    LogToolError,
    SessionExistsError,
    StoreError,
    StoreUrlError,
    VerifyError,
)
from ..tools import SandboxUnavailableError

__all__ = ["EXIT_CHECK_FAILED", "EXIT_OK", "EXIT_USAGE", "CliError", "run_command"]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2

#: Errors whose message already names the thing and the fix (the library's own wording).
_WORDED = (
    CompositionError,
    ScenarioError,
    HookSettingsError,
    SandboxUnavailableError,
    StoreError,
    LogToolError,
    StoreUrlError,
)
#: An answer refused (answered already, settled, unknown id) is a check that failed: exit 1.
_CHECK_FAILED = (VerifyError, ImportLineError, SessionExistsError, AnswerRefusedError)


class CliError(Exception):
    """A mistake the user can fix, worded for them; *status* is the exit status."""

    def __init__(self, message: str, *, status: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.status = status


def command_name(args: argparse.Namespace) -> str:
    """``broker log show`` for the parsed *args* (the prefix of every error line)."""
    words = ["broker", getattr(args, "command", None), getattr(args, "log_command", None)]
    return " ".join(word for word in words if word)


def _leaf(exc: BaseException) -> BaseException:
    # trio wraps a task's error in an ExceptionGroup; one failure is still one mistake.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _os_error(exc: OSError) -> str:
    what = exc.strerror or str(exc)
    where = f"cannot use '{exc.filename}'" if exc.filename is not None else "cannot write output"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{where}: {what}: free some space, or write somewhere else"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"{where}: {what}: check its permissions, or choose another path"
    if exc.errno == errno.ENOENT:
        return f"{where}: {what}: check the path"
    if exc.errno == errno.EISDIR:
        return f"{where}: {what}: pass a file name inside it"
    return f"{where}: {what}"


def database_error(exc: sqlite3.DatabaseError, args: argparse.Namespace) -> str:
    """The message for a store SQLite cannot read (corrupted pages, not a database)."""
    store = getattr(args, "store", None)
    thing = f"store '{store}'" if store is not None else "the store"
    return (
        f"{thing} is damaged or not a broker store (sqlite: {exc}): restore it from a copy, "
        "or pass another file"
    )


def describe(exc: BaseException, args: argparse.Namespace) -> tuple[str, int] | None:
    """The one-line message and exit status for a user error, or None for anything else."""
    if isinstance(exc, CliError):
        return str(exc), exc.status
    if isinstance(exc, _CHECK_FAILED):
        return str(exc), EXIT_CHECK_FAILED
    if isinstance(exc, _WORDED):
        return str(exc), EXIT_USAGE
    if isinstance(exc, sqlite3.DatabaseError):
        return database_error(exc, args), EXIT_USAGE
    if isinstance(exc, OSError):
        return _os_error(exc), EXIT_USAGE
    return None


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing to flush
        pass


def run_command(
    func: Callable[[argparse.Namespace], int], args: argparse.Namespace, *, debug: bool
) -> int:
    """Run one sub-command, turning the user errors above into one line and an exit status.

    A closed stdout (``broker log show … | head``) ends the command quietly with status 0.
    With *debug*, every error propagates with its traceback.
    """
    try:
        status = func(args)
        sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
    except Exception as raised:
        exc = _leaf(raised)
        if isinstance(exc, BrokenPipeError) and not debug:
            _silence_stdout()
            return EXIT_OK
        found = None if debug else describe(exc, args)
        if found is None:
            raise
        message, status = found
        if isinstance(exc, OSError) and exc.filename is None:
            _silence_stdout()  # the output may be what failed: drop what is still buffered
        print(f"{command_name(args)}: {message}", file=sys.stderr)
    return status
