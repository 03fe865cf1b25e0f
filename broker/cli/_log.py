"""``broker log``: show, verify, export and import a SQLite event store.

Exit status: 0 on success; 1 when the content is at fault (a verify violation or a damaged
store, a bad import line, an import into an existing session); 2 when the command cannot run
(the store cannot be opened, an unknown session, an unreadable file). Errors go to stderr, one
line each (see ``_errors.py``).
"""

from __future__ import annotations

import argparse
import functools
import os
import sqlite3
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TextIO

import trio

from .._display import printable
from .._private_files import create_private_file
from ..store import (
    ImportLineError,
    LogToolError,
    SessionExistsError,
    StoreError,
    VerifyError,
    describe_entry,
    export_all,
    import_file,
    list_sessions,
    seconds,
    session_lines,
    show_session,
    verify_store,
)
from ._errors import database_error
from ._store_args import store_url

if TYPE_CHECKING:
    from ..store import SessionSummary, Timeline

    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]

EXIT_OK = 0
EXIT_BAD_CONTENT = 1
EXIT_CANNOT_RUN = 2


# broker log reads and writes SQLite files (a PostgreSQL URL: issue 22 step 5).
_READ_ONLY = "the store: a file path, sqlite:///PATH or postgresql://… (read-only)"


DESCRIPTION = """\
Show, verify, export and import a session log (a SQLite event store).

examples:
  broker log show logs/sessions.sqlite                 list the sessions
  broker log show logs/sessions.sqlite SESSION         one session's timeline
  broker log verify logs/sessions.sqlite               check hash chains and pairing
  broker log export logs/sessions.sqlite --out DIR     every session as JSON lines
  broker log import new.sqlite session.jsonl           a JSON-lines file as a new session

Exit status: 0 success; 1 the content is at fault (a verify violation, a damaged store, a bad
import line); 2 the command cannot run (the store cannot be opened, an unknown session).
"""


def register(sub: _Sub) -> None:
    """Add the ``log`` command and its actions to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "log",
        help="show, verify, export or import a SQLite event store",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="log_command", required=True, metavar="ACTION")

    show = actions.add_parser(
        "show", help="list the sessions, or show one session's events as a timeline"
    )
    show.add_argument(
        "store",
        type=store_url,
        help=_READ_ONLY,
    )
    show.add_argument("session", nargs="?", help="the session to show (default: list sessions)")
    show.set_defaults(func=run_show)

    verify = actions.add_parser(
        "verify",
        help="check hash chains, turn and pairing invariants and checkpoints",
        description="Exit 0 with a one-line summary, or 1 naming the first violation.",
    )
    verify.add_argument(
        "store",
        type=store_url,
        help=_READ_ONLY,
    )
    verify.add_argument(
        "--allow-pending",
        action="store_true",
        help="accept asks without a decision (a live store, or one not yet recovered)",
    )
    verify.set_defaults(func=run_verify)

    export = actions.add_parser(
        "export",
        help="write sessions as seed-compatible JSON lines",
        description=(
            "With --session: that session's JSON lines to --out FILE (default: stdout). "
            "Without: every session into --out DIR, one <id>.jsonl per session (the id "
            "percent-encoded) plus index.json."
        ),
    )
    export.add_argument(
        "store",
        type=store_url,
        help=_READ_ONLY,
    )
    export.add_argument("--session", help="export only this session")
    export.add_argument("--out", help="output file (with --session) or directory (without)")
    export.add_argument(
        "--with-time",
        action="store_true",
        help='put each event\'s commit time (UTC) in front of it, as "time": '
        '"2026-01-02T03:04:05.000Z" (default: seed-compatible lines, no times; import reads '
        "only those)",
    )
    export.set_defaults(func=run_export)

    imp = actions.add_parser(
        "import",
        help="import a JSON-lines file as a new session, in one transaction",
    )
    imp.add_argument(
        "store",
        type=store_url,
        help="the store: a file path (created if missing), sqlite:///PATH or postgresql://…",
    )
    imp.add_argument("file", help="the JSON-lines file, one event per line")
    imp.add_argument("--session", help="the new session's id (default: from the file name)")
    imp.add_argument("--parent", help="the new session's parent session id")
    imp.set_defaults(func=run_import)


def _stdout_closed() -> int:
    """The reader of stdout went away (``broker log show … | head``): stop quietly."""
    # Point stdout at /dev/null so the interpreter's final flush does not fail again.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_OK


def _fail(args: argparse.Namespace, message: str, status: int) -> int:
    print(f"broker log {args.log_command}: {message}", file=sys.stderr)
    return status


def _clock(ts_ms: int, *, date: bool = False) -> str:
    moment = datetime.fromtimestamp(ts_ms // 1000, tz=UTC)
    text = moment.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S")
    return f"{text}.{ts_ms % 1000:03d}" + ("Z" if date else "")


def format_sessions(sessions: list[SessionSummary], out: TextIO) -> None:
    """Write the session listing of ``broker log show STORE``."""
    if not sessions:
        print("no sessions", file=out)
        return
    width = max(len("SESSION"), *(len(s.session_id) for s in sessions))
    pwidth = max(len("PARENT"), *(len(s.parent_id or "-") for s in sessions))
    print(
        f"{'SESSION':<{width}}  {'PARENT':<{pwidth}}  {'EVENTS':>6}  {'CREATED':<24}  HEAD",
        file=out,
    )
    for s in sessions:
        print(
            f"{s.session_id:<{width}}  {s.parent_id or '-':<{pwidth}}  {s.events:>6}  "
            f"{_clock(s.created_ms, date=True):<24}  {s.head_hash[:16]}",
            file=out,
        )


def format_timeline(timeline: Timeline, out: TextIO) -> None:
    """Write the timeline of ``broker log show STORE SESSION``."""
    s = timeline.session
    print(
        f"session {s.session_id!r} (parent {s.parent_id or 'none'}), {s.events} events, "
        f"created {_clock(s.created_ms, date=True)}, head {s.head_hash[:16]}",
        file=out,
    )
    if not timeline.entries:
        return
    start = timeline.entries[0].ts_ms
    print(f"{'SEQ':>6}  {'TIME (UTC)':<12}  {'ELAPSED':>9}  EVENT", file=out)
    for entry in timeline.entries:
        line = printable(describe_entry(entry, aligned=True))
        print(
            f"{entry.seq:>6}  {_clock(entry.ts_ms):<12}  "
            f"{'+' + seconds(entry.ts_ms - start):>9}  {line}",
            file=out,
        )


def run_show(args: argparse.Namespace) -> int:
    """``broker log show STORE [SESSION]``."""
    try:
        if args.session is None:
            format_sessions(list_sessions(args.store), sys.stdout)
        else:
            format_timeline(show_session(args.store, args.session), sys.stdout)
        sys.stdout.flush()
    except BrokenPipeError:
        return _stdout_closed()
    except (StoreError, LogToolError) as exc:
        return _fail(args, str(exc), EXIT_CANNOT_RUN)
    return EXIT_OK


def run_verify(args: argparse.Namespace) -> int:
    """``broker log verify STORE [--allow-pending]``."""
    try:
        summary = verify_store(args.store, allow_pending=args.allow_pending)
    except VerifyError as exc:
        return _fail(args, str(exc), EXIT_BAD_CONTENT)
    except sqlite3.DatabaseError as exc:
        # Verifying found the file damaged: a failed check, not a command that could not run.
        return _fail(args, database_error(exc, args), EXIT_BAD_CONTENT)
    except (StoreError, LogToolError) as exc:
        return _fail(args, str(exc), EXIT_CANNOT_RUN)
    print(summary.summary())
    return EXIT_OK


def run_export(args: argparse.Namespace) -> int:
    """``broker log export STORE [--session ID] [--out FILE|DIR] [--with-time]``."""
    try:
        if args.session is None:
            if args.out is None:
                return _fail(
                    args,
                    "exporting every session needs --out DIR (one <id>.jsonl per session): "
                    "pass --out, or --session ID for one session",
                    EXIT_CANNOT_RUN,
                )
            summary = export_all(args.store, args.out, with_time=args.with_time)
            print(
                f"exported {len(summary.files)} sessions, {summary.events} events "
                f"to {summary.directory}",
                file=sys.stderr,
            )
            return EXIT_OK
        lines = session_lines(args.store, args.session, with_time=args.with_time)
        text = "".join(line + "\n" for line in lines)
        if args.out is None:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            create_private_file(args.out)  # a new file: 0600 (an existing one stays as it is)
            with open(args.out, "w", encoding="utf-8", newline="") as out:
                out.write(text)
    except BrokenPipeError:
        return _stdout_closed()
    except OSError as exc:
        return _fail(args, f"cannot write '{args.out}': {exc.strerror or exc}", EXIT_CANNOT_RUN)
    except (StoreError, LogToolError) as exc:
        return _fail(args, str(exc), EXIT_CANNOT_RUN)
    return EXIT_OK


def run_import(args: argparse.Namespace) -> int:
    """``broker log import STORE FILE [--session ID] [--parent ID]``."""
    job = functools.partial(
        import_file, args.store, args.file, session_id=args.session, parent_id=args.parent
    )
    try:
        summary = trio.run(job)
    except (ImportLineError, SessionExistsError) as exc:
        return _fail(args, str(exc), EXIT_BAD_CONTENT)
    except (StoreError, LogToolError) as exc:
        return _fail(args, str(exc), EXIT_CANNOT_RUN)
    if not summary.recovery.clean:
        print(summary.recovery.summary(), file=sys.stderr)
    print(f"imported {summary.events} events as session {summary.session_id!r}")
    return EXIT_OK
