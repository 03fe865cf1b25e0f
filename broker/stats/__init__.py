"""What a store's log says about its questions: ``broker stats``, as a library.

Synopsis::

    from broker.stats import read_stats, render_html, render_text, write_page

    stats = read_stats("logs/sessions.sqlite", since_ms=now_ms - 7 * 86_400_000)
    print(render_text(stats))               # questions by outcome, source, tool; answer times
    write_page("stats.html", render_html(stats))   # one self-contained page with charts

    page = await stats_page(store, limiter=limiter)   # the same page, read in a worker thread

The log is read through a read-only snapshot (SQLite file or PostgreSQL, like ``broker log``),
without OpenTelemetry; :func:`collect` is the pure count behind it. What is counted and how:
``design/stats.md``.
"""

from ._collect import AnswerTimes as AnswerTimes
from ._collect import Bucket as Bucket
from ._collect import GrantCount as GrantCount
from ._collect import HistogramBin as HistogramBin
from ._collect import LoggedEvent as LoggedEvent
from ._collect import SourceCount as SourceCount
from ._collect import Stats as Stats
from ._collect import collect as collect
from ._collect import percentile as percentile
from ._html import CSP as CSP
from ._html import render_html as render_html
from ._html import write_page as write_page
from ._read import logged_events as logged_events
from ._read import read_stats as read_stats
from ._read import reader_stats as reader_stats
from ._read import stats_page as stats_page
from ._text import duration_text as duration_text
from ._text import render_text as render_text

__all__ = [
    "CSP",
    "AnswerTimes",
    "Bucket",
    "GrantCount",
    "HistogramBin",
    "LoggedEvent",
    "SourceCount",
    "Stats",
    "collect",
    "duration_text",
    "logged_events",
    "percentile",
    "read_stats",
    "reader_stats",
    "render_html",
    "render_text",
    "stats_page",
    "write_page",
]

from .._module_metadata import fixup_module_metadata

fixup_module_metadata(__name__, globals())
