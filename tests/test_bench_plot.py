"""The perf plot (``bench/_plot.py``): labelled axes, a log y axis where values span decades,
and whiskers for the spread of a measurement."""

from __future__ import annotations

import pathlib
import re

from bench._plot import Point, axis_labels, main, svg_panels, uses_log_y

ROOT = pathlib.Path(__file__).resolve().parent.parent
DURABLE: dict[str, list[Point]] = {
    "durable asks/s through the broker": [(1.0, 720.0), (16.0, 2899.0), (256.0, 3827.0)],
    "raw batched sqlite3": [(1.0, 2157.0), (16.0, 13253.0), (256.0, 52824.0)],
}
LATENCY: dict[str, list[Point]] = {
    "broker.request()": [(1.0, 43.7, 40.1, 52.0), (10.0, 40.6, 39.0, 49.5)]
}


def polylines(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [(float(x), float(y)) for x, y in re.findall(r"([\d.]+),([\d.]+)", points)]
        for points in re.findall(r'<polyline [^>]*points="([^"]*)"', svg)
    ]


def test_axes_are_labelled_from_the_title() -> None:
    assert axis_labels("durable asks/s vs concurrent sessions") == (
        "concurrent sessions",
        "durable asks/s",
    )
    svg = svg_panels([("durable asks/s vs concurrent sessions", DURABLE)])
    assert re.search(r'class="x-label"[^>]*>concurrent sessions \(log scale\)</text>', svg)
    assert re.search(r'class="y-label"[^>]*>durable asks/s \(log scale\)</text>', svg)


def test_values_spanning_decades_get_a_log_axis_that_does_not_flatten_the_low_line() -> None:
    assert uses_log_y(DURABLE)
    broker, _raw = polylines(svg_panels([("durable asks/s vs concurrent sessions", DURABLE)]))
    ys = [y for _, y in broker]
    # The plotting area is 258 px high; on a linear axis the broker's line spans ~11 px.
    assert max(ys) - min(ys) > 0.2 * 258
    assert ">1,000<" in svg_panels([("a vs b", DURABLE)])


def test_a_narrow_range_stays_linear_from_zero() -> None:
    assert not uses_log_y(LATENCY)
    svg = svg_panels([("ask latency p50 (µs) vs live sessions", LATENCY)])
    assert 'text-anchor="end" font-size="11">0</text>' in svg
    assert "µs) (log scale)" not in svg


def test_spread_is_drawn_as_whiskers() -> None:
    svg = svg_panels([("ask latency p50 (µs) vs live sessions", LATENCY)])
    assert svg.count('class="spread"') == 2
    assert "broker.request() (whiskers: p10-p90)" in svg
    assert 'class="spread"' not in svg_panels([("a vs b", DURABLE)])


def test_the_committed_plot_is_rendered_from_the_committed_results(
    tmp_path: pathlib.Path,
) -> None:
    out = tmp_path / "plot.svg"
    assert main([str(ROOT / "design" / "perf" / "results.json"), str(out)]) == 0
    assert out.read_text(encoding="utf-8") == (ROOT / "design" / "perf" / "plot.svg").read_text(
        encoding="utf-8"
    )
