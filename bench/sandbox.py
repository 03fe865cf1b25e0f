"""Sandbox start-up cost per command: ``true`` under bubblewrap (read-only) vs a plain subprocess.

    python -m bench.sandbox [--quick] [--runs N]

Both sides go through the same executor code path (spawn, drain both pipes, kill/reap,
build the result), so the ratio isolates what bwrap adds: namespaces, mounts and the
extra fork of the sandbox init. They run interleaved in alternating blocks so drift on a
shared machine hits both alike.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import trio

from bench._stats import percentile
from bench._suite import Figure, Result
from broker.tools import BubblewrapExecutor, PlainExecutor, SandboxMode

BLOCK = 10


async def sample(runs: int) -> tuple[list[float], list[float]]:
    """Per-command wall time in milliseconds: (bwrap read-only, plain)."""
    sandbox = await BubblewrapExecutor.probe()
    plain = PlainExecutor()
    bwrap_ms: list[float] = []
    plain_ms: list[float] = []
    with tempfile.TemporaryDirectory() as name:
        workspace = Path(name)
        # One warm-up each so page cache and the first fork do not skew the first block.
        await sandbox.run("true", mode=SandboxMode.READ_ONLY, workspace=workspace)
        await plain.run("true", mode=SandboxMode.DANGER_FULL_ACCESS, workspace=workspace)
        while len(bwrap_ms) < runs:
            for _ in range(min(BLOCK, runs - len(bwrap_ms))):
                start = time.perf_counter()
                result = await sandbox.run("true", mode=SandboxMode.READ_ONLY, workspace=workspace)
                bwrap_ms.append((time.perf_counter() - start) * 1000)
                assert result.exit_code == 0, result
                start = time.perf_counter()
                result = await plain.run(
                    "true", mode=SandboxMode.DANGER_FULL_ACCESS, workspace=workspace
                )
                plain_ms.append((time.perf_counter() - start) * 1000)
                assert result.exit_code == 0, result
    return bwrap_ms, plain_ms


def measure(quick: bool) -> Result:
    """The suite's entry: 20 (quick) or 200 commands per side."""
    bwrap_ms, plain_ms = trio.run(sample, 20 if quick else 200)
    return Result(
        name="sandbox",
        figures=(
            Figure(
                label="bubblewrap start-up per command (read-only), p50",
                value=percentile(bwrap_ms, 50),
                unit="ms",
                baseline=percentile(plain_ms, 50),
                baseline_label="plain subprocess p50",
            ),
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 runs per side")
    parser.add_argument("--runs", type=int, default=200, help="runs per side (default 200)")
    args = parser.parse_args()
    runs = 20 if args.quick else args.runs
    if runs <= 0:
        parser.error(f"--runs must be positive, got {runs}")
    bwrap_ms, plain_ms = trio.run(sample, runs)
    print(f"`true` x{runs} per side, milliseconds per command")
    print(f"{'':>22} {'p50':>8} {'p90':>8}")
    for label, samples in (("bwrap read-only", bwrap_ms), ("plain subprocess", plain_ms)):
        print(f"{label:>22} {percentile(samples, 50):8.2f} {percentile(samples, 90):8.2f}")
    print(
        f"{'ratio bwrap/plain':>22} "
        f"{percentile(bwrap_ms, 50) / percentile(plain_ms, 50):8.2f} "
        f"{percentile(bwrap_ms, 90) / percentile(plain_ms, 90):8.2f}"
    )


if __name__ == "__main__":
    main()
