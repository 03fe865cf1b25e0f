"""The benchmark suite: ``python -m bench [--quick] [--only a,b] [--json F] [--plot F]``.

Every figure is a ratio to a baseline measured in the same run (absolute times on a shared
machine drift). Prints a results table; writes the results as JSON and a plot (SVG) of
throughput and latency against concurrency.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import sys
import time
from pathlib import Path

from bench._plot import svg_panels
from bench._suite import Result

# Run in this order; each module has ``measure(quick: bool) -> Result``.
BENCHES = ("latency", "cancel", "scale", "store", "runtime", "acp", "sandbox", "rules")


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs (CI: under a minute)")
    parser.add_argument("--only", help=f"comma-separated subset of {','.join(BENCHES)}")
    parser.add_argument("--json", type=Path, default=Path("bench/results/results.json"))
    parser.add_argument("--plot", type=Path, default=Path("bench/results/plot.svg"))
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(BENCHES)
    unknown = sorted(set(chosen) - set(BENCHES))
    if unknown:
        parser.error(f"--only names unknown benchmarks {unknown}: choose from {list(BENCHES)}")
    results: list[Result] = []
    started = time.perf_counter()
    for index, name in enumerate(chosen, 1):
        print(f"[{index}/{len(chosen)}] {name} ...", file=sys.stderr, flush=True)
        module = importlib.import_module(f"bench.{name}")
        step = time.perf_counter()
        results.append(module.measure(args.quick))
        print(f"      done in {time.perf_counter() - step:.1f}s", file=sys.stderr, flush=True)
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
