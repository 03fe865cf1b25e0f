"""bench.store's CPU line: durable ÷ memory split into what each ask costs and the cores each
path got (a path's rate is its cores over its CPU per ask)."""

from __future__ import annotations

import trio

from bench.store import _cpu_line, broker_asks


def test_the_cpu_line_splits_the_ratio_into_cost_and_cores() -> None:
    # 1 000 asks: durable 3 s of CPU over 2 s (30 us an ask on 1.5 cores), in memory 1 s over
    # 1 s (10 us on 1.0): durable runs at 500 asks/s, memory at 1 000: 0.5 = 0.33 x 1.5.
    line = _cpu_line(
        {"broker": [3.0, 3.3, 2.7], "memory": [1.0, 1.2, 0.9]},
        {"broker": [2.0, 2.2, 1.8], "memory": [1.0, 1.2, 0.9]},
        1_000,
    )
    assert line.split(": ", 1)[1] == (
        "durable 3000.0 us on 1.50 cores, in memory 1000.0 us on 1.00 cores: "
        "ratio = 0.33 (CPU) x 1.50 (cores)"
    )


def test_broker_asks_reports_the_cpu_of_its_timed_part() -> None:
    cpu: list[float] = []

    async def main() -> tuple[float, int]:
        with trio.fail_after(30):
            return await broker_asks(None, 4, 200, cpu)

    seconds, _ = trio.run(main)
    [spent] = cpu
    # One thread asking back to back: busy nearly all the time it was timed, never more than
    # the wall clock allows one thread (plus the clock's granularity).
    assert 0 < spent <= seconds + 0.02
