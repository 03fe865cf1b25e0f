"""broker stats STORE [--since 7d] [--html FILE]: what the log says about its questions.

examples:
  broker stats logs/sessions.sqlite                      every question the log holds
  broker stats logs/sessions.sqlite --since 7d           the last seven days (30m, 12h, 7d)
  broker stats postgresql://me@db/broker --html stats.html   the tables, and a page with charts

Questions by outcome and by source (rule, grant, answerer, deadline, ...), by tool; answer
time (asked to decided) percentiles per answerer and per person (answeredBy); grants given,
revoked and expired. Read-only: a snapshot of the store, as broker log show reads it; no
OpenTelemetry needed. --html writes one self-contained page (no script, nothing loaded) with
the same tables and two charts: outcomes over time, the answer-time distribution.

Exit status: 0 done; 2 the command could not run (a bad argument, a store that cannot be
read, a page that cannot be written).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import TYPE_CHECKING

from ..stats import read_stats, render_html, render_text, write_page
from ._errors import EXIT_OK, CliError
from ._numbers import duration
from ._store_args import store_url

if TYPE_CHECKING:
    _Sub = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["register"]


def _page_file(text: str) -> str:
    """Where the page goes: a file name, not a folder."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file name such as stats.html, got ''")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a folder: pass a file name inside it, such as {text.rstrip('/')}"
            "/stats.html"
        )
    return text


def register(sub: _Sub) -> None:
    """Add the ``stats`` command to the top-level sub-parsers *sub*."""
    parser = sub.add_parser(
        "stats",
        help="questions by outcome, source and tool, answer times, grants (--html: a page)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "store", type=store_url, help="the store: a file path, sqlite:///PATH or postgresql://…"
    )
    parser.add_argument(
        "--since",
        type=duration,
        metavar="DURATION",
        help="only events stored within this long before now (30m, 12h, 7d; default: all)",
    )
    parser.add_argument(
        "--html",
        type=_page_file,
        metavar="FILE",
        help="also write the tables and charts to FILE as one self-contained HTML page",
    )
    parser.set_defaults(func=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    """Run ``broker stats``; returns the exit status."""
    since_ms = None
    if args.since is not None:
        since_ms = time.time_ns() // 1_000_000 - round(args.since * 1000)
    stats = read_stats(args.store, since_ms=since_ms)
    sys.stdout.write(render_text(stats))
    if args.html is not None:
        try:
            write_page(args.html, render_html(stats))
        except OSError as exc:
            raise CliError(
                f"argument --html: cannot write {args.html!r}: {exc.strerror or exc}: check that "
                "its folder exists and is writable, or pass another FILE"
            ) from None
        print(f"wrote {args.html}", file=sys.stderr)
    return EXIT_OK
