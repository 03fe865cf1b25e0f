"""What ``broker mcp-gate`` adds to an allow-listed ``tools/call``, against calling the server
directly.

    python -m bench.mcp_gate [--calls N] [--rounds R] [--quick]

The official MCP Python SDK's client (in this process, under trio) calls the test server's
``read_note`` (``tests/mcp/upstream.py``, the SDK's ``MCPServer`` over stdio) *N* times per
round, one call at a time, in alternating rounds: directly, through the gate with the log in
memory, and through the gate with the log in a SQLite file (every call is an audit pair, made
durable before the call is forwarded). Each call is timed from ``call_tool`` to its result;
the table gives p50 and p99 per path and the overhead against the direct path measured in the
same run. Target: p50 overhead ≤ 1 ms (issue 25).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile
import time
from collections.abc import Sequence

import trio
from mcp import ClientSession, StdioServerParameters, stdio_client

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _round(argv: list[str], calls: int) -> list[float]:
    params = StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(ROOT))
    times = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("read_note", {"name": "warm-up"})
        for n in range(calls):
            start = time.perf_counter()
            result = await session.call_tool("read_note", {"name": f"note {n}"})
            times.append(time.perf_counter() - start)
            assert not result.is_error, result
    return times


async def _main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        (work / "rules.toml").write_text('allow = ["read_*"]\n')
        upstream = [sys.executable, "-m", "tests.mcp.upstream", str(work / "record.jsonl")]
        gate = [sys.executable, "-m", "broker.cli", "mcp-gate", "--rules", str(work / "rules.toml")]
        paths = {
            "direct": upstream,
            "gate, log in memory": [*gate, "--store", ":memory:", "--", *upstream],
            "gate, SQLite log": [*gate, "--store", str(work / "log.sqlite"), "--", *upstream],
        }
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, argv in paths.items():
                samples[name] += await _round(argv, calls)
    direct50, direct99 = _pct(samples["direct"], 0.5), _pct(samples["direct"], 0.99)
    print(f"{calls} calls x {rounds} rounds per path, alternating; times in ms")
    print(f"{'path':24} {'p50':>8} {'p99':>8} {'p50 overhead':>14} {'p99 overhead':>14}")
    for name, values in samples.items():
        p50, p99 = _pct(values, 0.5), _pct(values, 0.99)
        print(
            f"{name:24} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} "
            f"{(p50 - direct50) * 1e3:14.3f} {(p99 - direct99) * 1e3:14.3f}"
        )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_gate", description=__doc__)
    parser.add_argument("--calls", type=int, default=500, help="calls per round (default 500)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per path (default 3)")
    parser.add_argument("--quick", action="store_true", help="100 calls, 1 round")
    args = parser.parse_args(argv)
    calls, rounds = (100, 1) if args.quick else (args.calls, args.rounds)
    trio.run(_main, calls, rounds)


if __name__ == "__main__":
    main()
