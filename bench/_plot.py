"""A dependency-free SVG line chart for the suite's series: labelled axes, log scales, spread.

A panel is ``(title, {line name: [point, ...]})``. A title of the form ``"<y> vs <x>"`` names
the axes: ``<x>`` is written under the x axis, ``<y>`` along the y axis. A point is ``(x, y)``
or ``(x, y, low, high)``: the second form draws a whisker from *low* to *high* (the spread of
the measurement, e.g. p10-p90). x is on a log scale; y is on a log scale when the panel's
values span a decade or more (a linear axis would flatten the lower lines against zero), else
linear from 0.

Re-render a plot from a results file (no measuring)::

    python -m bench._plot design/perf/results.json design/perf/plot.svg
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from xml.sax.saxutils import escape

__all__ = ["Point", "axis_labels", "svg_panels", "uses_log_y"]

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")

#: ``(x, y)`` or ``(x, y, low, high)``.
Point = tuple[float, ...]


def axis_labels(title: str) -> tuple[str, str]:
    """``(x label, y label)`` from a ``"<y> vs <x>"`` title; empty strings otherwise."""
    y, sep, x = title.partition(" vs ")
    return (x, y) if sep else ("", "")


def _values(lines: dict[str, list[Point]]) -> list[float]:
    return [v for series in lines.values() for p in series for v in p[1:] if v > 0]


def uses_log_y(lines: dict[str, list[Point]]) -> bool:
    """True when the panel's positive y values (spread included) span a decade or more."""
    values = _values(lines)
    return bool(values) and max(values) / min(values) >= 10


def _ticks(lo: float, hi: float) -> list[float]:
    return [
        10.0**e for e in range(math.floor(lo), math.ceil(hi) + 1) if lo - 1e-9 <= e <= hi + 1e-9
    ]


def _panel(
    title: str,
    lines: dict[str, list[Point]],
    x0: int,
    y0: int,
    width: int,
    height: int,
) -> list[str]:
    points = [p for series in lines.values() for p in series if p[0] > 0]
    if not points:
        return []
    xs = [math.log10(p[0]) for p in points]
    lo_x, hi_x = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    log_y = uses_log_y(lines)
    lo_y: float
    hi_y: float
    if log_y:
        ys = [math.log10(v) for v in _values(lines)]
        lo_y, hi_y = math.floor(min(ys)), math.ceil(max(ys))
    else:
        lo_y, hi_y = 0.0, max(max(p[1:]) for p in points) * 1.1 or 1.0
    left, right, top, bottom = x0 + 78, x0 + width - 20, y0 + 30, y0 + height - 52

    def px(x: float) -> float:
        return left + (math.log10(x) - lo_x) / (hi_x - lo_x) * (right - left)

    def py(y: float) -> float:
        value = math.log10(y) if log_y else y
        return bottom - (value - lo_y) / (hi_y - lo_y) * (bottom - top)

    x_label, y_label = axis_labels(title)
    out = [
        f'<text x="{x0 + width / 2}" y="{y0 + 18}" text-anchor="middle" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>',
        f'<text class="x-label" x="{(left + right) / 2}" y="{bottom + 36}" '
        f'text-anchor="middle" font-size="12">{escape(x_label)} (log scale)</text>',
        f'<text class="y-label" x="{x0 + 16}" y="{(top + bottom) / 2}" text-anchor="middle" '
        f'font-size="12" transform="rotate(-90 {x0 + 16} {(top + bottom) / 2})">'
        f"{escape(y_label)}{' (log scale)' if log_y else ''}</text>",
    ]
    for value in _ticks(lo_x, hi_x):
        out.append(
            f'<text x="{px(value):.1f}" y="{bottom + 16}" text-anchor="middle" '
            f'font-size="11">{value:g}</text>'
        )
    y_ticks = _ticks(lo_y, hi_y) if log_y else [hi_y * i / 4 for i in range(5)]
    for value in y_ticks:
        out.append(
            f'<text x="{left - 6}" y="{py(value) + 4:.1f}" text-anchor="end" '
            f'font-size="11">{value:,.0f}</text>'
        )
    for index, (name, series) in enumerate(lines.items()):
        colour = _COLOURS[index % len(_COLOURS)]
        shown = [p for p in series if p[0] > 0]
        path = " ".join(f"{px(p[0]):.1f},{py(p[1]):.1f}" for p in shown)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for p in shown:
            x, y = px(p[0]), py(p[1])
            if len(p) == 4 and 0 < p[2] <= p[3]:
                low, high = py(p[2]), py(p[3])
                out.append(
                    f'<path class="spread" stroke="{colour}" fill="none" d="M{x:.1f},{low:.1f} '
                    f'V{high:.1f} M{x - 4:.1f},{low:.1f} h8 M{x - 4:.1f},{high:.1f} h8"/>'
                )
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>')
        spread = " (whiskers: p10-p90)" if any(len(p) == 4 for p in shown) else ""
        out.append(
            f'<text x="{left + 10}" y="{top + 14 + 14 * index}" fill="{colour}" '
            f'font-size="12">{escape(name + spread)}</text>'
        )
    return out


def svg_panels(panels: Sequence[tuple[str, dict[str, list[Point]]]]) -> str:
    """One SVG with a panel per (title, {series name: [point, ...]}), x on a log scale."""
    width, height = 560, 340
    body: list[str] = []
    for index, (title, lines) in enumerate(panels):
        body += _panel(title, lines, index * width, 0, width, height)
    total = width * max(len(panels), 1)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{total}" height="{height}" '
        f'font-family="sans-serif"><rect width="100%" height="100%" fill="white"/>'
        + "".join(body)
        + "</svg>\n"
    )


def main(argv: Sequence[str]) -> int:
    """``python -m bench._plot RESULTS.json PLOT.svg``: re-render the plot of a results file."""
    if len(argv) != 2:
        print("usage: python -m bench._plot RESULTS.json PLOT.svg", file=sys.stderr)
        return 2
    results = json.loads(Path(argv[0]).read_text(encoding="utf-8"))["results"]
    panels = [
        (title, {name: [tuple(p) for p in points] for name, points in lines.items()})
        for result in results
        for title, lines in result["series"].items()
    ]
    Path(argv[1]).write_text(svg_panels(panels), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
