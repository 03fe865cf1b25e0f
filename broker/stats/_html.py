""":class:`~broker.stats.Stats` as one self-contained HTML page, and its atomic write.

Synopsis::

    page = render_html(stats)          # str: tables + inline SVG charts, no script
    write_page("stats.html", page)     # temp file + rename: whole or not at all

The page loads nothing (no script, font, stylesheet or image from anywhere; its Content
Security Policy forbids them too) and runs no JavaScript. Every string taken from the log (tool
names, answerers, people, the store's name) is made printable and HTML-escaped: the log is
written by what models asked for, so ``<script>`` in a tool name is shown as text.
"""

from __future__ import annotations

import contextlib
import html
import math
import os
import tempfile
from collections.abc import Sequence
from datetime import UTC, datetime

from .._display import printable
from .._vocabulary import Outcome
from ._collect import DAY_MS, HOUR_MS, AnswerTimes, HistogramBin, Stats
from ._text import duration_text, window_text

__all__ = ["render_html", "write_page"]

COLOURS = {
    Outcome.ALLOWED_ONCE: "#2e7d32",
    Outcome.REJECTED: "#c62828",
    Outcome.CANCELLED: "#757575",
    Outcome.UNAVAILABLE: "#ef6c00",
}
WIDTH, HEIGHT = 760, 260
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 16, 44
MAX_LABELS = 8

CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 800px;
  color: #1b1b1b; background: #fff; padding: 0 12px; }
h1 { font-size: 20px; margin-bottom: 4px; }
h2 { font-size: 16px; margin: 28px 0 8px; }
p.window { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 4px 0 8px; }
th, td { border-bottom: 1px solid #ddd; padding: 3px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { font-weight: 600; background: #f4f4f4; }
td:first-child { font-family: ui-monospace, monospace; word-break: break-all; }
.none { color: #777; font-style: italic; }
svg { display: block; max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.legend span { display: inline-block; margin-right: 14px; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
"""
#: The page's Content-Security-Policy (its meta tag, and the inbox's header when it serves it):
#: nothing loads, nothing runs; only its own inline style.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _esc(text: str) -> str:
    """*text* from the log, safe as HTML text or an attribute value."""
    return html.escape(printable(text), quote=True)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], name: str) -> str:
    if not rows:
        return f'<p class="none" data-table="{name}">none</p>'
    head = "".join(f"<th>{_esc(cell)}</th>" for cell in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{_esc(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f'<table data-table="{name}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _times_rows(times: Sequence[AnswerTimes]) -> list[list[str]]:
    return [
        [
            row.key,
            str(row.count),
            duration_text(row.p50_ms),
            duration_text(row.p90_ms),
            duration_text(row.p99_ms),
            duration_text(row.max_ms),
        ]
        for row in times
    ]


def _bucket_label(start_ms: int, bucket_ms: int) -> str:
    moment = datetime.fromtimestamp(start_ms // 1000, tz=UTC)
    if bucket_ms < DAY_MS:
        return moment.strftime("%m-%d %H:00")
    return moment.strftime("%Y-%m-%d")


def _y_axis(top: int) -> str:
    """Grid lines and labels at 0, half and *top*."""
    parts = []
    plot_h = HEIGHT - TOP - BOTTOM
    for value in sorted({0, math.ceil(top / 2), top}):
        y = TOP + plot_h - plot_h * value / top
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value}</text>'
        )
    return "".join(parts)


def _bars(
    chart_id: str,
    title: str,
    columns: Sequence[tuple[str, Sequence[tuple[str, int, str]]]],
    max_labels: int = MAX_LABELS,
) -> str:
    """An SVG bar chart: one column per ``(label, segments)``, each segment ``(what, count,
    colour)`` stacked from the bottom; at most *max_labels* columns labelled, evenly spread."""
    top = max([1, *(sum(count for _, count, _ in segments) for _, segments in columns)])
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    step = plot_w / max(1, len(columns))
    bar_w = max(1.0, step * 0.8)
    every = math.ceil(len(columns) / max_labels) if columns else 1
    parts = [
        f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}">',
        f"<title>{_esc(title)}</title>",
        _y_axis(top),
    ]
    for index, (label, segments) in enumerate(columns):
        x = LEFT + index * step + (step - bar_w) / 2
        y = float(TOP + plot_h)
        for what, count, colour in segments:
            if count == 0:
                continue
            height = plot_h * count / top
            y -= height
            parts.append(
                f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
                f'height="{height:.1f}" fill="{colour}">'
                f"<title>{_esc(label)}: {count} {_esc(what)}</title></rect>"
            )
        if index % every == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{HEIGHT - BOTTOM + 16}" '
                f'text-anchor="middle">{_esc(label)}</text>'
            )
    parts.append(
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" '
        'stroke="#888"/></svg>'
    )
    return "".join(parts)


def _outcomes_chart(stats: Stats) -> str:
    columns = [
        (
            _bucket_label(bucket.start_ms, stats.bucket_ms),
            [(str(outcome), count, COLOURS[outcome]) for outcome, count in bucket.outcomes],
        )
        for bucket in stats.over_time
    ]
    size = "hour" if stats.bucket_ms == HOUR_MS else duration_text(stats.bucket_ms)
    if stats.bucket_ms == DAY_MS:
        size = "day"
    elif stats.bucket_ms == 7 * DAY_MS:
        size = "week"
    legend = "".join(
        f'<span><i style="background:{COLOURS[o]}"></i>{_esc(str(o))}</span>' for o in Outcome
    )
    title = f"decisions per {size} (UTC), by outcome"
    return (
        f"<h2>Outcomes over time</h2><p>{_esc(title)}</p>"
        + _bars("outcomes-chart", title, columns)
        + f'<p class="legend">{legend}</p>'
    )


def _bin_label(bin_: HistogramBin) -> str:
    def short(ms: int) -> str:
        if ms < 60_000:
            return f"{ms // 1000}s"
        return f"{ms // 60_000}m" if ms < HOUR_MS else f"{ms // HOUR_MS}h"

    if bin_.low_ms == 0 and bin_.high_ms is not None:
        return f"<{short(bin_.high_ms)}"
    if bin_.high_ms is None:
        return f"≥{short(bin_.low_ms)}"
    return f"{short(bin_.low_ms)}–{short(bin_.high_ms)}"


def _histogram_chart(stats: Stats) -> str:
    columns = [(_bin_label(bin_), [("answers", bin_.count, "#1565c0")]) for bin_ in stats.histogram]
    total = sum(bin_.count for bin_ in stats.histogram)
    title = f"time from asked to decided, {total} decisions by answerers"
    return f"<h2>Answer time</h2><p>{_esc(title)}</p>" + _bars(
        "answer-time-chart", title, columns, max_labels=len(columns)
    )


def render_html(stats: Stats) -> str:
    """The page: the tables of ``broker stats`` and two charts (outcomes over time, the
    answer-time distribution), as one HTML document with nothing to load."""
    store = stats.store if stats.store is not None else "the log"
    sections = [
        f"<h1>broker stats: {_esc(store)}</h1>",
        f'<p class="window">{_esc(window_text(stats))}</p>',
        f'<p id="summary">{stats.asked} asked, {stats.decided} decided, {stats.pending} '
        f"pending, in {stats.sessions} sessions</p>",
        "<h2>Questions by outcome</h2>",
        _table(
            ["outcome", "questions"], [[str(o), str(n)] for o, n in stats.by_outcome], "outcome"
        ),
        "<h2>Questions by source</h2>",
        _table(
            ["source", "total", *(str(o) for o in Outcome)],
            [
                [row.source, str(row.total), *(str(row.count(o)) for o in Outcome)]
                for row in stats.by_source
            ],
            "source",
        ),
        "<h2>Questions by tool</h2>",
        _table(["tool", "asked"], [[tool, str(n)] for tool, n in stats.by_tool], "tool"),
        _outcomes_chart(stats),
        _histogram_chart(stats),
        "<h2>Answer time by answerer</h2>",
        "<p>The answerer's name, or the source that decided without one.</p>",
        _table(
            ["answerer", "count", "p50", "p90", "p99", "max"],
            _times_rows(stats.by_answerer),
            "answerer",
        ),
        "<h2>Answer time by person</h2>",
        _table(
            ["person", "count", "p50", "p90", "p99", "max"], _times_rows(stats.by_person), "person"
        ),
        "<h2>Grants</h2>",
        f'<p id="grants">{stats.grants_given} given, {stats.grants_revoked} revoked, '
        f"{stats.grants_expired} expired</p>",
        _table(
            ["tool", "given", "revoked", "expired"],
            [
                [row.tool_name, str(row.given), str(row.revoked), str(row.expired)]
                for row in stats.grants_by_tool
            ],
            "grants",
        ),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>broker stats: {_esc(store)}</title>"
        '<link rel="icon" href="data:,">'
        f"<style>{CSS}</style></head><body>\n" + "\n".join(sections) + "\n</body></html>\n"
    )


def write_page(path: str | os.PathLike[str], page: str) -> None:
    """Write *page* to *path* atomically: a temporary file beside it (owner-only), flushed to
    disk, then renamed over *path* — a reader sees the old file or the whole new one. Raises
    ``OSError`` (the folder is missing or not writable, *path* is a folder...); the temporary
    file is removed then."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    fd, temporary = tempfile.mkstemp(
        dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(page)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
