"""Durable asks through the broker on PostgreSQL, SQLite and in memory, in one run; the raw
psycopg floor; and resuming a long session against reading its rows raw.

    python -m bench.pgstore [--dsn postgresql://…] [--sessions 256] [--asks N] [--quick]
                            [--resume-events 10000] [--rounds 3]

- **broker**: ``open_broker(policy="never", store=…)``, S sessions each inside a turn, each
  awaiting ``broker.request(...)`` back to back (one request = the asked and the decided
  append). Stores: a fresh PostgreSQL database, a fresh SQLite file, the in-memory store.
  Rounds alternate the three so drift hits them alike; the best round of each is reported.
- **raw psycopg**: the same rows (pre-encoded lines, 32-byte hashes) inserted with ``COPY``,
  one transaction per round of S rows, ``synchronous_commit=on`` — the floor of any store on
  this server, with none of the broker's encoding, hashing, folding or hand-offs.
- **resume**: a session of N events on PostgreSQL; ``open_session(resume=ID)`` in a new broker
  (the claim, the fold check, the log read) against a bare ``SELECT`` of its rows.

Target (issue 22): broker on PostgreSQL ≥ 0.5 × broker on SQLite, in every round (each round
runs the three stores back to back, so its ratio is the one least bent by this VM's drift).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import trio

from bench import store as store_bench
from bench._postgres import SERVER, fresh_database, reachable
from broker import (
    Event,
    MemoryStore,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    UserMessage,
    open_broker,
)
from broker.store import open_store


async def broker_asks(store: str | Path | MemoryStore, sessions: int, asks: int) -> float:
    """Asks per second through the broker on *store* (a URL, a path, or a MemoryStore): the
    workload of :func:`bench.store.broker_asks`."""
    elapsed, _ = await store_bench.broker_asks(store, sessions, asks)
    return sessions * asks / elapsed


def raw_copy(dsn: str, sessions: int, asks: int) -> float:
    """Asks per second of bare psycopg: 2 rows per ask, a COPY of S rows per transaction."""
    import psycopg

    line = '{"type":"approval/asked","data":{"id":"' + "0" * 36 + '","toolName":"bash"}}'
    digest = b"\x00" * 32
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "CREATE TABLE raw_events (session_id text, seq bigint, ts_ms bigint, line text, "
            "prev_hash bytea, hash bytea, PRIMARY KEY (session_id, seq))"
        )
        conn.execute("SET synchronous_commit = on")
        conn.commit()
        start = time.perf_counter()
        for seq in range(1, 2 * asks + 1):
            with conn.cursor().copy(
                "COPY raw_events (session_id, seq, ts_ms, line, prev_hash, hash) FROM STDIN"
            ) as copy:
                for session in range(sessions):
                    copy.write_row((f"s{session}", seq, 0, line, digest, digest))
            conn.commit()
        elapsed = time.perf_counter() - start
    return sessions * asks / elapsed


async def resume_times(dsn: str, events: int) -> tuple[float, float]:
    """(seconds to resume a session of *events* events, seconds to SELECT its rows raw)."""
    import psycopg

    async with open_store(dsn) as store:
        await store.create_session("long", None)
        batch: list[Event] = []
        turn = 0
        while len(batch) < events:
            turn += 1
            batch.append(TurnStart(turn=turn))
            batch += [UserMessage(text=f"message {turn}.{i}") for i in range(8)]
            batch.append(TurnEnd(turn=turn, reason=TurnEndReason(kind="completed")))
        for start in range(0, len(batch), 500):
            await store.append("long", batch[start : start + 500])
    begin = time.perf_counter()
    async with open_broker(store=dsn) as broker, broker.open_session(resume="long"):
        resumed = time.perf_counter() - begin
    begin = time.perf_counter()
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT seq, line FROM broker.events WHERE session_id = %s ORDER BY seq", ("long",)
        ).fetchall()
    raw = time.perf_counter() - begin
    assert len(rows) >= events
    return resumed, raw


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pgstore", description=__doc__)
    parser.add_argument("--dsn", default=SERVER)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--asks", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--resume-events", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true", help="small figures (CI)")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.asks, args.rounds, args.resume_events = 32, 10, 1, 1000
    why = reachable(args.dsn)
    if why is not None:
        print(f"bench.pgstore: skipped, no PostgreSQL server at the DSN: {why}")
        return 0
    best = {"postgres": 0.0, "sqlite": 0.0, "memory": 0.0}
    ratios: list[float] = []
    print(f"durable asks/s through the broker, {args.sessions} sessions x {args.asks} asks:")
    for round_ in range(args.rounds):
        with fresh_database(args.dsn, "bench_pg") as dsn, tempfile.TemporaryDirectory() as tmp:
            rates = {
                "postgres": trio.run(broker_asks, dsn, args.sessions, args.asks),
                "sqlite": trio.run(broker_asks, Path(tmp) / "s.sqlite", args.sessions, args.asks),
                "memory": trio.run(broker_asks, MemoryStore(), args.sessions, args.asks),
            }
        shown = "  ".join(f"{k} {v:,.0f}/s" for k, v in rates.items())
        ratios.append(rates["postgres"] / rates["sqlite"])
        print(f"  round {round_ + 1}: {shown}  postgres/sqlite {ratios[-1]:.2f}x")
        for key, value in rates.items():
            best[key] = max(best[key], value)
    with fresh_database(args.dsn, "bench_pg") as dsn:
        raw = raw_copy(dsn, args.sessions, args.asks)
    with fresh_database(args.dsn, "bench_pg") as dsn:
        resumed, read = trio.run(resume_times, dsn, args.resume_events)
    ratio = best["postgres"] / best["sqlite"]
    print(f"  best: postgres {best['postgres']:,.0f}/s, sqlite {best['sqlite']:,.0f}/s, "
          f"memory {best['memory']:,.0f}/s; raw psycopg COPY {raw:,.0f} asks/s")  # fmt: skip
    verdict = "met in every round" if min(ratios) >= 0.5 else "NOT met in every round"
    print(
        f"  postgres / sqlite through the broker = {ratio:.2f}x best to best, "
        f"{min(ratios):.2f}-{max(ratios):.2f}x round by round (target >= 0.5x: {verdict})"
    )
    print(
        f"resume a session of {args.resume_events} events: {resumed * 1000:.1f} ms; its rows "
        f"read raw: {read * 1000:.1f} ms ({resumed / read:.1f}x)"
    )
    print(json.dumps({"best_asks_per_s": best, "raw_copy_asks_per_s": raw, "ratio": ratio,
                      "round_ratios": ratios, "resume_ms": resumed * 1000,
                      "raw_read_ms": read * 1000}))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
