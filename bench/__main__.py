"""The benchmark suite: ``python -m bench [--quick] [--only a,b] [--json F] [--plot F]``.

Every figure is a ratio to a baseline measured in the same run (absolute times on a shared
machine drift). Prints a results table; writes the results as JSON and a plot (SVG) of
throughput and latency against concurrency. A run without ``--quick`` also writes its figures
into ``bench/README.md`` (or ``--readme PATH``), between the markers ``<!-- figures:start -->``
and ``<!-- figures:end -->``: the rows of the benchmarks it ran are replaced, the rows of the
others and everything outside the markers are kept. ``--quick`` (CI) writes no README unless
``--readme`` names one; ``--no-readme`` writes none.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from bench._plot import svg_panels
from bench._suite import Figure, Result

# Run in this order; each module has ``measure(quick: bool) -> Result``.
BENCHES = (
    "latency",
    "cancel",
    "scale",
    "store",
    "runtime",
    "acp",
    "sandbox",
    "rules",
    "hook",
    "otel",
)

README = Path(__file__).resolve().parent / "README.md"
START = "<!-- figures:start -->"
END = "<!-- figures:end -->"
HEADER = ("figure", "value", "baseline", "ratio", "target", "command")
RUNS_INTRO = "Where and when each benchmark's rows were measured:"
# The benchmark a row belongs to, read from its command cell: `python -m bench --only NAME`
# (what this module writes) or `python -m bench.NAME ...` (the module run on its own).
_BENCH_OF = re.compile(r"python -m bench(?: --only (\w+)|\.(\w+))")
_RUN_LINE = re.compile(r"^- ([\w, ]+): (.+)$")


def _table(results: list[Result]) -> list[str]:
    rows = [("benchmark", "figure", "value", "baseline", "ratio", "target")]
    for result in results:
        for figure in result.figures:
            ratio = f"{figure.ratio:.2f}x" if figure.ratio is not None else ""
            target = ""
            if figure.target:
                target = f"{figure.target} {'met' if figure.met else 'NOT met'}"
            baseline = f"{figure.baseline:,.2f}" if figure.baseline is not None else ""
            rows.append(
                (
                    result.name,
                    figure.label,
                    f"{figure.value:,.2f} {figure.unit}",
                    baseline,
                    ratio,
                    target,
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]


def cpu_model() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (else what platform knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine(quick: bool) -> str:
    """One line naming where, with what and when a run measured."""
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, trio {trio.__version__}, "
        f"{datetime.date.today().isoformat()}, {'quick' if quick else 'full'} run"
    )


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _figure_row(result: Result, figure: Figure, command: str) -> str:
    unit = f" {figure.unit}" if figure.unit else ""
    baseline = ""
    if figure.baseline is not None:
        label = f"{figure.baseline_label}: " if figure.baseline_label else ""
        baseline = f"{label}{figure.baseline:,.2f}{unit}"
    ratio = f"{figure.ratio:.2f}×" if figure.ratio is not None else ""
    target = ""
    if figure.target:
        target = f"{figure.target}: {'met' if figure.met else '**not met**'}"
    cells = (
        f"{result.name}: {figure.label}",
        f"{figure.value:,.2f}{unit}",
        baseline,
        ratio,
        target,
        f"`{command}`",
    )
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _bench_of(row: str) -> str | None:
    cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip())[1:-1]]
    if not cells:
        return None
    match = _BENCH_OF.search(cells[-1])
    return (match.group(1) or match.group(2)) if match else None


def _order(bench: str | None) -> int:
    return BENCHES.index(bench) if bench in BENCHES else len(BENCHES)


def figures_block(old: str, ran: Sequence[tuple[str, Result]], run: str) -> str:
    """The text between the markers after a run: *old* is what was there; *ran* pairs each
    benchmark module's name with its result; *run* names the machine and the date."""
    names = [name for name, _ in ran]
    rows: list[str] = []
    runs: list[tuple[list[str], str]] = []
    for line in old.splitlines():
        if line.startswith("|"):
            if re.fullmatch(r"\|[\s|:-]*\|", line.strip()) or line.startswith("| figure |"):
                continue  # the separator or the header, written again below
            if _bench_of(line) not in names:
                rows.append(line)
        elif match := _RUN_LINE.match(line):
            kept = [n.strip() for n in match.group(1).split(",") if n.strip() not in names]
            if kept:
                runs.append((kept, match.group(2)))
    for name, result in ran:
        command = f"python -m bench --only {name}"
        rows.extend(_figure_row(result, figure, command) for figure in result.figures)
    if names:
        runs.append((names, run))
    rows.sort(key=lambda row: _order(_bench_of(row)))  # stable: a benchmark's rows keep order
    runs.sort(key=lambda entry: min(_order(n) for n in entry[0]))
    lines = [
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
        *rows,
        "",
        RUNS_INTRO,
        "",
        *(f"- {', '.join(n)}: {where}" for n, where in runs),
    ]
    return "\n".join(lines)


def write_figures(path: Path, ran: Sequence[tuple[str, Result]], run: str) -> None:
    """Write the run's figures between the markers of *path*, keeping everything else."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    if START in text and END in text and text.index(START) < text.index(END):
        head, rest = text.split(START, 1)
        old, tail = rest.split(END, 1)
    else:
        head, old, tail = text.rstrip("\n") + "\n\n", "", "\n"
    block = figures_block(old, ran, run)
    path.write_text(f"{head}{START}\n{block}\n{END}{tail}", encoding="utf-8")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (CI: under a minute)")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHES)}")
    parser.add_argument("--json", type=Path, default=Path("bench/results/results.json"))
    parser.add_argument("--plot", type=Path, default=Path("bench/results/plot.svg"))
    parser.add_argument(
        "--readme",
        type=Path,
        metavar="PATH",
        help=f"write the figures between its markers (default without --quick: {README})",
    )
    parser.add_argument("--no-readme", action="store_true", help="write no README")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(BENCHES)
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown:
        parser.error(f"--only names unknown benchmarks {unknown}: choose from {list(BENCHES)}")
    if args.readme is not None and args.no_readme:
        parser.error("--readme and --no-readme exclude each other")
    readme: Path | None = args.readme
    if readme is None and not args.quick and not args.no_readme:
        readme = README
    ran: list[tuple[str, Result]] = []
    started = time.perf_counter()
    for index, name in enumerate(chosen, 1):
        print(f"[{index}/{len(chosen)}] {name} ...", file=sys.stderr, flush=True)
        module = importlib.import_module(f"bench.{name}")
        step = time.perf_counter()
        ran.append((name, module.measure(args.quick)))
        print(f"      done in {time.perf_counter() - step:.1f}s", file=sys.stderr, flush=True)
    results = [result for _, result in ran]
    print("\n".join(_table(results)))
    elapsed = time.perf_counter() - started
    print(
        f"\n{'quick' if args.quick else 'full'} run, {elapsed:.0f}s, "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{platform.machine()}"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps(
            {
                "quick": args.quick,
                "elapsed_s": elapsed,
                "python": platform.python_version(),
                "results": [r.to_json() for r in results],
            },
            indent=2,
        )
        + "\n"
    )
    panels = [(title, lines) for r in results for title, lines in r.series.items()]
    if panels:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        args.plot.write_text(svg_panels(panels))
    print(f"wrote {args.json}" + (f" and {args.plot}" if panels else ""))
    if readme is not None:
        write_figures(readme, ran, machine(args.quick))
        print(f"wrote the figures into {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
