"""What every benchmark returns, and the progress line long runs print."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["Figure", "Progress", "Result", "print_figures", "standalone"]


@attrs.frozen(kw_only=True)
class Figure:
    """One measured figure against its baseline (measured in the same run) and target."""

    label: str
    value: float
    unit: str
    baseline: float | None = None
    baseline_label: str | None = None
    target: str | None = None
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline


@attrs.frozen(kw_only=True)
class Result:
    """A benchmark's figures, plus plot panels (``"<y> vs <x>"`` title -> line name ->
    [(x, y) or (x, y, low, high)], see ``bench/_plot.py``) and notes."""

    name: str
    figures: tuple[Figure, ...]
    series: dict[str, dict[str, list[tuple[float, ...]]]] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        for figure, raw in zip(self.figures, data["figures"], strict=True):
            raw["ratio"] = figure.ratio
        return data


def print_figures(result: Result) -> None:
    """A benchmark's figures, one line each, for running it on its own."""
    for figure in result.figures:
        line = f"{figure.label}: {figure.value:,.2f} {figure.unit}"
        if figure.baseline is not None and figure.ratio is not None:
            line += f"  ({figure.baseline_label}: {figure.baseline:,.2f}, {figure.ratio:.2f}x)"
        if figure.target:
            line += f"  target {figure.target}: {'met' if figure.met else 'NOT met'}"
        print(line)
    for title, lines in result.series.items():
        print(title)
        for name, points in lines.items():
            print(f"  {name}: " + ", ".join(f"{p[0]:,.0f} -> {p[1]:,.1f}" for p in points))


def standalone(measure: Callable[[bool], Result], doc: str | None) -> int:
    """``python -m bench.<name> [--quick]``: measure and print the figures."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (for CI)")
    print_figures(measure(parser.parse_args().quick))
    return 0


@attrs.define
class Progress:
    """``[#####.....] label 5/10`` on stderr, rewritten in place; silent when not a TTY."""

    label: str
    total: int
    done: int = 0
    width: int = 30

    def step(self, n: int = 1) -> None:
        self.done += n
        if not sys.stderr.isatty():
            return
        filled = int(self.width * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        end = "\n" if self.done >= self.total else ""
        sys.stderr.write(f"\r[{bar}] {self.label} {self.done}/{self.total}{end}")
        sys.stderr.flush()
