""":class:`~broker.stats.Stats` as the console tables ``broker stats`` prints.

Synopsis::

    text = render_text(stats)      # lines ending in "\\n"; names from the log made printable

Every name taken from the log (tools, answerers, people) goes through
:func:`broker._display.printable`, so a control character or a bidi override in a tool name
cannot rewrite the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from .._display import printable
from .._vocabulary import Outcome
from ._collect import AnswerTimes, Stats

__all__ = ["duration_text", "moment_text", "render_text", "window_text"]


def duration_text(ms: int) -> str:
    """*ms* for a person: ``4.000s`` under a minute, ``2m05s`` under an hour, else ``1h02m``."""
    if ms < 60_000:
        return f"{ms / 1000:.3f}s"
    if ms < 3_600_000:
        minutes, rest = divmod(ms // 1000, 60)
        return f"{minutes}m{rest:02d}s"
    hours, rest = divmod(ms // 60_000, 60)
    return f"{hours}h{rest:02d}m"


def moment_text(ms: int) -> str:
    """*ms* since the epoch as UTC to the second: ``2026-01-02 03:04:05Z``."""
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned columns, two spaces apart: the first left-aligned, the others right."""
    if not rows:
        return ["  none"]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for row in (header, *rows):
        cells = [row[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)
        ]
        lines.append(("  " + "  ".join(cells)).rstrip())
    return lines


def _times_rows(times: Sequence[AnswerTimes]) -> list[list[str]]:
    return [
        [
            printable(row.key),
            str(row.count),
            duration_text(row.p50_ms),
            duration_text(row.p90_ms),
            duration_text(row.p99_ms),
            duration_text(row.max_ms),
        ]
        for row in times
    ]


def window_text(stats: Stats) -> str:
    """The window the stats cover, in words."""
    since = "all events" if stats.since_ms is None else f"since {moment_text(stats.since_ms)}"
    if stats.first_ms is None or stats.last_ms is None:
        return f"{since} (none in the log)"
    return f"{since} ({moment_text(stats.first_ms)} to {moment_text(stats.last_ms)})"


def render_text(stats: Stats) -> str:
    """The tables of ``broker stats``: questions by outcome, by source (and outcome), by tool;
    answer-time percentiles by answerer and by person; grants."""
    store = printable(stats.store) if stats.store is not None else "the log"
    lines = [
        f"{store}, {window_text(stats)}",
        f"questions: {stats.asked} asked, {stats.decided} decided, {stats.pending} pending, "
        f"in {stats.sessions} sessions",
        "",
        "by outcome",
        *_table(["OUTCOME", "QUESTIONS"], [[str(o), str(n)] for o, n in stats.by_outcome]),
        "",
        "by source",
        *_table(
            ["SOURCE", "TOTAL", *(str(o).upper() for o in Outcome)],
            [
                [printable(row.source), str(row.total), *(str(row.count(o)) for o in Outcome)]
                for row in stats.by_source
            ],
        ),
        "",
        "by tool",
        *_table(["TOOL", "ASKED"], [[printable(tool), str(n)] for tool, n in stats.by_tool]),
        "",
        "answer time by answerer (the answerer's name, or the source that decided)",
        *_table(["ANSWERER", "COUNT", "P50", "P90", "P99", "MAX"], _times_rows(stats.by_answerer)),
        "",
        "answer time by person (answeredBy)",
        *_table(["PERSON", "COUNT", "P50", "P90", "P99", "MAX"], _times_rows(stats.by_person)),
        "",
        f"grants: {stats.grants_given} given, {stats.grants_revoked} revoked, "
        f"{stats.grants_expired} expired",
        *_table(
            ["TOOL", "GIVEN", "REVOKED", "EXPIRED"],
            [
                [printable(row.tool_name), str(row.given), str(row.revoked), str(row.expired)]
                for row in stats.grants_by_tool
            ],
        ),
    ]
    return "".join(line + "\n" for line in lines)
