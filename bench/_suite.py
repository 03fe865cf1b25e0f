"""What every benchmark returns, and the progress line long runs print."""

from __future__ import annotations

import sys
from typing import Any

import attrs

__all__ = ["Figure", "Progress", "Result"]


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
    """A benchmark's figures, plus series for the plot (x -> y) and free-form notes."""

    name: str
    figures: tuple[Figure, ...]
    series: dict[str, list[tuple[float, float]]] = attrs.field(factory=dict)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        for figure, raw in zip(self.figures, data["figures"], strict=True):
            raw["ratio"] = figure.ratio
        return data


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
