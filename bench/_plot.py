"""A dependency-free SVG line chart (log-scaled x) for the suite's series."""

from __future__ import annotations

import math
from collections.abc import Sequence
from xml.sax.saxutils import escape

__all__ = ["svg_panels"]

_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e")


def _panel(
    title: str,
    lines: dict[str, list[tuple[float, float]]],
    x0: int,
    y0: int,
    width: int,
    height: int,
) -> list[str]:
    points = [p for series in lines.values() for p in series if p[0] > 0]
    if not points:
        return []
    xs = [math.log10(x) for x, _ in points]
    lo_x, hi_x = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    hi_y = max(y for _, y in points) * 1.1 or 1.0
    left, right, top, bottom = x0 + 60, x0 + width - 20, y0 + 30, y0 + height - 40

    def px(x: float) -> float:
        return left + (math.log10(x) - lo_x) / (hi_x - lo_x) * (right - left)

    def py(y: float) -> float:
        return bottom - y / hi_y * (bottom - top)

    out = [
        f'<text x="{x0 + width / 2}" y="{y0 + 18}" text-anchor="middle" '
        f'font-weight="bold">{escape(title)}</text>',
        f'<line x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom}" stroke="black"/>',
    ]
    for exponent in range(math.floor(lo_x), math.ceil(hi_x) + 1):
        value = 10.0**exponent
        if lo_x - 1e-9 <= exponent <= hi_x + 1e-9:
            out.append(
                f'<text x="{px(value):.1f}" y="{bottom + 16}" text-anchor="middle" '
                f'font-size="11">{value:g}</text>'
            )
    for i in range(5):
        value = hi_y * i / 4
        out.append(
            f'<text x="{left - 6}" y="{py(value) + 4:.1f}" text-anchor="end" '
            f'font-size="11">{value:,.0f}</text>'
        )
    for index, (name, series) in enumerate(lines.items()):
        colour = _COLOURS[index % len(_COLOURS)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in series if x > 0)
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{path}"/>')
        for x, y in series:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"/>')
        out.append(
            f'<text x="{left + 10}" y="{top + 14 + 14 * index}" fill="{colour}" '
            f'font-size="12">{escape(name)}</text>'
        )
    return out


def svg_panels(panels: Sequence[tuple[str, dict[str, list[tuple[float, float]]]]]) -> str:
    """One SVG with a panel per (title, {series name: [(x, y), ...]}), x on a log scale."""
    width, height = 560, 320
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
