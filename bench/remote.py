"""Answers from another process on PostgreSQL: latency against its physical floor, and idle cost.

    python -m bench.remote [--dsn postgresql://…] [--rounds N] [--quick]

Three figures, measured in one run on one server (a fresh database, dropped after):

1. **floor** — bare psycopg, no broker: process B commits one INSERT together with a NOTIFY;
   process A receives the notification and commits one INSERT. Two durable commits and one
   notification: what any cross-process answer must pay at least.
2. **notify** — the NOTIFY-only one-way trip (B's ``NOTIFY`` in autocommit → A wakes).
3. **broker** — asked in A (a broker on a PostgreSQL store with ``broker.remote_answerer()``),
   answered from B with ``answer_board(DSN).answer(...)``: from B's call until A's
   ``request()`` returns with ``approval/decided`` durable.

Times are ``time.monotonic()`` stamps taken in the two processes (one host, one clock). The
target is broker p50 ≤ 1.5 × floor p50. Floor and broker are measured twice: one after the
other (as before), then **interleaved** — one floor round, one broker round, in turn, both A
sides running all along — so that both see the same moment of a shared machine (its fsync
latency alone swings several-fold between seconds, and with it the floor). Then the idle
cost: the CPU a broker with 1 000 open sessions and a remote answerer uses per second of wall
time while nothing is pending.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

from bench._postgres import SERVER, fresh_database, reachable


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the two sides of each measurement, run as `python -m bench.remote SIDE DSN N` -----------


def _floor_a(dsn: str, rounds: int) -> None:
    """A: LISTEN; per notification, commit one INSERT and print the latency."""
    import psycopg

    listen = psycopg.connect(dsn, autocommit=True)
    write = psycopg.connect(dsn)
    listen.execute("LISTEN bench_floor")
    print("ready", flush=True)
    for seen, notify in enumerate(listen.notifies(), start=1):
        started = float(notify.payload)
        write.execute("INSERT INTO bench_a (t) VALUES (%s)", (started,))
        write.commit()
        print(time.monotonic() - started, flush=True)
        if seen == rounds:
            break
    listen.close()
    write.close()


def _notify_a(dsn: str, rounds: int) -> None:
    """A: LISTEN; print each notification's one-way latency."""
    import psycopg

    listen = psycopg.connect(dsn, autocommit=True)
    listen.execute("LISTEN bench_notify")
    print("ready", flush=True)
    for seen, notify in enumerate(listen.notifies(), start=1):
        print(time.monotonic() - float(notify.payload), flush=True)
        if seen == rounds:
            break
    listen.close()


def _broker_a(dsn: str, rounds: int) -> None:
    """A: a broker asking *rounds* questions one after another through its remote answerer;
    prints each question id when it is put up, then the latency from B's stamp."""
    import trio

    from broker import ApprovalRequest, open_broker

    async def main() -> None:
        async with open_broker(store=dsn, policy="ask") as broker:
            async with broker.answerer(broker.remote_answerer()), broker.open_session() as s:
                print("ready", flush=True)
                for _ in range(rounds):
                    async with s.turn():
                        decision = await broker.request_decision(
                            ApprovalRequest(agent=s.agent, tool_name="bash")
                        )
                        # request() returned with its decided durable; the turn's end is not
                        # part of the answer's trip.
                        done = time.monotonic()
                    assert decision.answered_by is not None
                    print(done - float(decision.answered_by), flush=True)

    trio.run(main)


def _idle(dsn: str, sessions: int) -> None:
    """A broker with *sessions* open sessions and a remote answerer, nothing pending: print
    the CPU seconds it uses per wall second over a few seconds."""
    import trio

    from broker import open_broker

    async def main() -> None:
        async with open_broker(store=dsn) as broker, broker.answerer(broker.remote_answerer()):
            opened = [await broker.start_session() for _ in range(sessions)]
            await trio.sleep(0.5)
            usage0, wall0 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            await trio.sleep(3.0)
            usage1, wall1 = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
            cpu = (usage1.ru_utime + usage1.ru_stime) - (usage0.ru_utime + usage0.ru_stime)
            print(cpu / (wall1 - wall0), flush=True)
            for session in opened:
                await session.aclose()

    trio.run(main)


# -- the driver -----------------------------------------------------------------------------


def _side(name: str, dsn: str, n: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.remote", name, dsn, str(n)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != "ready":
        process.kill()
        raise SystemExit(f"bench.remote: side {name} did not start (said {line!r})")
    return process


def _collect(process: subprocess.Popen[str]) -> list[float]:
    out, _ = process.communicate(timeout=120)
    return [float(line) for line in out.split()]


def _floor(dsn: str, rounds: int) -> list[float]:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_a (t double precision)")
        conn.execute("CREATE TABLE bench_b (t double precision)")
    a = _side("floor-a", dsn, rounds)
    with psycopg.connect(dsn) as b:
        for _ in range(rounds):
            started = time.monotonic()
            b.execute("INSERT INTO bench_b (t) VALUES (%s)", (started,))
            b.execute("SELECT pg_notify('bench_floor', %s)", (repr(started),))
            b.commit()
            time.sleep(0.01)
    return _collect(a)


def _notify(dsn: str, rounds: int) -> list[float]:
    import psycopg

    a = _side("notify-a", dsn, rounds)
    with psycopg.connect(dsn, autocommit=True) as b:
        for _ in range(rounds):
            b.execute("SELECT pg_notify('bench_notify', %s)", (repr(time.monotonic()),))
            time.sleep(0.01)
    return _collect(a)


def _through_broker(dsn: str, rounds: int) -> list[float]:
    import trio

    from broker import Outcome, answer_board

    a = _side("broker-a", dsn, rounds)
    assert a.stdout is not None
    stdout = a.stdout
    latencies: list[float] = []

    async def answer_all() -> None:
        board = answer_board(dsn)
        for _ in range(rounds):
            pending = await board.pending()
            while not pending:
                # Outside the timed window; slow enough not to compete with A for the CPU.
                await trio.sleep(0.01)
                pending = await board.pending()
            # The stamp travels as the answerer's name: A computes the latency from it.
            await board.answer(pending[0].id, Outcome.ALLOWED_ONCE, repr(time.monotonic()))
            # A prints the round's latency once request() returned: the next round waits.
            line = await trio.to_thread.run_sync(stdout.readline)
            latencies.append(float(line))
        await board.aclose()

    trio.run(answer_all)
    a.wait(120)
    stdout.close()
    return latencies


def _interleaved(dsn: str, rounds: int) -> tuple[list[float], list[float]]:
    """The floor and the broker, one round of each in turn (both A sides run all along), so
    the two see the same moment of a shared machine: (floor latencies, broker latencies)."""
    import psycopg
    import trio

    from broker import Outcome, answer_board

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS bench_a (t double precision)")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_b (t double precision)")
    floor_a = _side("floor-a", dsn, rounds)
    broker_a = _side("broker-a", dsn, rounds)
    assert floor_a.stdout is not None
    assert broker_a.stdout is not None
    floor_out, broker_out = floor_a.stdout, broker_a.stdout
    floor: list[float] = []
    broker: list[float] = []

    async def run() -> None:
        board = answer_board(dsn)
        with psycopg.connect(dsn) as b:
            for _ in range(rounds):
                # The floor's round, as _floor's (B blocks: nothing else runs in B meanwhile).
                started = time.monotonic()
                b.execute("INSERT INTO bench_b (t) VALUES (%s)", (started,))
                b.execute("SELECT pg_notify('bench_floor', %s)", (repr(started),))
                b.commit()
                floor.append(float(await trio.to_thread.run_sync(floor_out.readline)))
                # The broker's round, as _through_broker's.
                pending = await board.pending()
                while not pending:
                    await trio.sleep(0.01)
                    pending = await board.pending()
                await board.answer(pending[0].id, Outcome.ALLOWED_ONCE, repr(time.monotonic()))
                broker.append(float(await trio.to_thread.run_sync(broker_out.readline)))
                await trio.sleep(0.01)
        await board.aclose()

    trio.run(run)
    for process in (floor_a, broker_a):
        process.wait(120)
        assert process.stdout is not None
        process.stdout.close()
    return floor, broker


def _idle_cost(dsn: str, sessions: int) -> float:
    done = subprocess.run(
        [sys.executable, "-m", "bench.remote", "idle", dsn, str(sessions)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return float(done.stdout.split()[-1])


def _line(label: str, values: list[float]) -> dict[str, Any]:
    p50, p99 = _pct(values, 0.5) * 1000, _pct(values, 0.99) * 1000
    print(f"  {label:<42} p50 {p50:7.3f} ms   p99 {p99:7.3f} ms   (n={len(values)})")
    return {"p50_ms": p50, "p99_ms": p99, "n": len(values)}


def main() -> int:
    sides = {"floor-a": _floor_a, "notify-a": _notify_a, "broker-a": _broker_a, "idle": _idle}
    if len(sys.argv) == 4 and sys.argv[1] in sides:
        sides[sys.argv[1]](sys.argv[2], int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.remote", description=__doc__)
    parser.add_argument("--dsn", default=SERVER)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and sessions")
    args = parser.parse_args()
    rounds, sessions = (40, 200) if args.quick else (args.rounds, args.sessions)
    why = reachable(args.dsn)
    if why is not None:
        print(f"bench.remote: skipped, no PostgreSQL server at the DSN: {why}")
        return 0
    with fresh_database(args.dsn, "bench_remote") as dsn:
        print(f"answers from another process, PostgreSQL, {rounds} rounds each:")
        floor = _line("floor (INSERT+NOTIFY commit -> INSERT commit)", _floor(dsn, rounds))
        notify = _line("NOTIFY one-way", _notify(dsn, rounds))
        broker = _line(
            "broker (answer() in B -> request() returns in A)", _through_broker(dsn, rounds)
        )
        ratio = broker["p50_ms"] / floor["p50_ms"]
        verdict = "met" if ratio <= 1.5 else "NOT met"
        print(f"  broker p50 / floor p50 = {ratio:.2f}x (target <= 1.5x: {verdict})")
        floors, brokers = _interleaved(dsn, rounds)
        floor_i = _line("interleaved: floor", floors)
        broker_i = _line("interleaved: broker", brokers)
        ratio_i = broker_i["p50_ms"] / floor_i["p50_ms"]
        verdict = "met" if ratio_i <= 1.5 else "NOT met"
        print(f"  interleaved: broker p50 / floor p50 = {ratio_i:.2f}x (target <= 1.5x: {verdict})")
        idle = _idle_cost(dsn, sessions)
        print(
            f"  idle: {sessions} open sessions with a remote answerer, nothing pending: "
            f"{idle * 100:.2f} % of one core"
        )
        result = {"floor": floor, "notify": notify, "broker": broker, "ratio": ratio,
                  "interleaved": {"floor": floor_i, "broker": broker_i, "ratio": ratio_i},
                  "idle_cpu_per_s": idle, "sessions": sessions}  # fmt: skip
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
