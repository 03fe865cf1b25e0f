"""Instructions per ask, per thread, counted by callgrind: what a durable ask costs on the trio
thread and on the store writer's thread, against an in-memory ask.

    python -m bench.instructions [--sessions 256] [--asks 5,20] [--keep DIR]

Wall-clock ratios on a shared VM move by tens of per cent between runs; instruction counts do
not. Each store (SQLite, in memory) runs ``bench.store``'s broker workload (S sessions, each
inside a turn, asking back to back with policy ``never``) under
``valgrind --tool=callgrind --separate-threads=yes`` twice, with A and B asks per session; the
difference divided by ``S * (B - A)`` is the cost of one ask, start-up and imports cancelled
out. Needs valgrind (``apt-get install valgrind``); takes a few minutes.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_SUMMARY = re.compile(r"^summary: (\d+)$", re.MULTILINE)

# Run in the child, under callgrind: the workload alone.
_CHILD = """
import sys, tempfile, trio
from pathlib import Path
from bench.store import broker_asks
kind, sessions, asks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    with tempfile.TemporaryDirectory() as folder:
        path = None if kind == "memory" else Path(folder) / "store.sqlite"
        await broker_asks(path, sessions, asks)
trio.run(main)
"""


def per_thread(kind: str, sessions: int, asks: int, folder: Path) -> list[int]:
    """Instructions of each thread (in the order callgrind numbers them) for one run."""
    out = folder / f"{kind}.{asks}.out"
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--separate-threads=yes",
            f"--callgrind-out-file={out}",
            sys.executable,
            "-c",
            _CHILD,
            kind,
            str(sessions),
            str(asks),
        ],
        check=True,
        capture_output=True,
    )
    counts = []
    for part in sorted(folder.glob(f"{out.name}-*")):
        found = _SUMMARY.search(part.read_text(errors="replace"))
        counts.append(int(found.group(1)) if found else 0)
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    parser.add_argument("--sessions", type=int, default=256, help="sessions asking at once")
    parser.add_argument("--asks", default="5,20", help="A,B: asks per session of the two runs")
    parser.add_argument("--keep", type=Path, help="keep callgrind's files in this folder")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is missing: apt-get install valgrind", file=sys.stderr)
        return 2
    few, many = (int(n) for n in args.asks.split(","))
    if not 0 < few < many:
        print(f"--asks must be A,B with 0 < A < B, got {args.asks!r}", file=sys.stderr)
        return 2
    asks = args.sessions * (many - few)
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        print(f"instructions per ask ({args.sessions} sessions, {few} and {many} asks each):")
        for kind in ("sqlite", "memory"):
            before = per_thread(kind, args.sessions, few, folder)
            after = per_thread(kind, args.sessions, many, folder)
            # Thread 1 is the trio thread; in a SQLite run, the one that did most besides it
            # is the store writer's (the others are trio's helper threads).
            each = [(b - a) / asks for a, b in zip(before, after, strict=False)]
            trio_thread = each[0]
            others = sorted(each[1:], reverse=True)
            line = f"  {kind:>6}: trio thread {trio_thread:>10,.0f}"
            if kind == "sqlite" and others:
                line += f"   writer thread {others[0]:>10,.0f}   all {sum(each):>10,.0f}"
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
