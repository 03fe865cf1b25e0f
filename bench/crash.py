"""The crash loop: kill -9 a broker workload at random points, then prove nothing was lost.

    python -m bench.crash [--kills N] [--seed S] [--quick] [--store PATH | --store DSN]

Each round starts ``bench.crash_workload`` (a real broker on a real SQLite file — or, with
``--store postgresql://…``, on that database — several sessions asking questions) on the same
store, SIGKILLs it after a random delay, then:

1. ``verify`` the store as it was left (chain, pairing allowing the crash tail, checkpoints);
2. reopen it for writing — recovery closes each dangling ask (``cancelled``, ``recovered``)
   and each open turn (``interrupted``); on PostgreSQL another process takes each session
   over (``claim``, once the killed workload's 1 s leases have expired), which recovers it;
3. ``verify`` again, strictly: every ask now paired, every question turn-enclosed;
4. check that every question the workload had reported as answered (its ``request()`` had
   returned) is in the log with that exact outcome.

Prints the figures; exits 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

from broker.store import (
    SessionOwnedError,
    open_postgres_store,
    open_sqlite_store,
    parse_store_url,
)
from broker.store._logtools import VerifyError, open_reader, verify_store
from broker.store._url import PostgresUrl


def _round(path: str, seed: int, delay: float) -> list[tuple[str, str, str]]:
    """Run the workload for *delay* seconds, SIGKILL it, return its acknowledgements."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.crash_workload", path, str(seed)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=30)
    acks = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == "ack":
            acks.append((parts[1], parts[2], parts[3]))
    return acks


async def _prepare(path: str) -> None:
    """Create the store (a kill may come before the workload got to it: verify reads it)."""
    where = parse_store_url(path)
    if isinstance(where, PostgresUrl):
        async with open_postgres_store(where.dsn):
            pass
    else:
        async with open_sqlite_store(where.path):
            pass


async def _recover(path: str) -> tuple[int, int]:
    where = parse_store_url(path)
    if not isinstance(where, PostgresUrl):
        async with open_sqlite_store(where.path) as store:
            report = store.recovery
        return report.cancelled_asks, report.interrupted_turns
    with open_reader(path) as reader:
        session_ids = [info.session_id for info in reader.sessions()]
    async with open_postgres_store(where.dsn) as postgres:
        with trio.fail_after(60):
            for session_id in session_ids:
                while True:  # the killed workload's leases expire first
                    try:
                        await postgres.claim(session_id)
                    except SessionOwnedError:
                        await trio.sleep(0.1)
                    else:
                        break
        report = postgres.recovery
    return report.cancelled_asks, report.interrupted_turns


def _logged_outcomes(path: str) -> dict[str, str]:
    """call id -> outcome of every decided question in the store."""
    outcomes: dict[str, str] = {}
    with open_reader(path) as reader:
        for info in reader.sessions():
            call_of: dict[str, str] = {}
            for row in reader.rows(info.session_id):
                record = json.loads(row.line)
                data = record["data"]
                if record["type"] == "approval/asked" and "callId" in data:
                    call_of[data["id"]] = data["callId"]
                elif record["type"] == "approval/decided" and data["id"] in call_of:
                    outcomes[call_of[data["id"]]] = data["outcome"]
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="3 kills, for CI")
    parser.add_argument(
        "--store",
        help="store file or postgresql:// URL (default: a temporary file); a database is used "
        "as it is: pass one of its own",
    )
    args = parser.parse_args()
    kills = 3 if args.quick else args.kills
    rng = random.Random(args.seed)
    violations: list[str] = []
    acked_total = recovered_asks = interrupted = 0
    with tempfile.TemporaryDirectory(prefix="broker-crash-") as tmp:
        path = args.store or str(Path(tmp) / "crash.sqlite")
        trio.run(_prepare, path)
        acked: dict[str, str] = {}
        for round_no in range(kills):
            acks = _round(path, args.seed * 1000 + round_no, rng.uniform(0.3, 1.2))
            acked_total += len(acks)
            for _session, call_id, outcome in acks:
                acked[call_id] = outcome
            try:
                verify_store(path, allow_pending=True)
            except VerifyError as exc:
                violations.append(f"round {round_no}: as left by the kill: {exc}")
            asks, turns = trio.run(_recover, path)
            recovered_asks += asks
            interrupted += turns
            try:
                verify_store(path)
            except VerifyError as exc:
                violations.append(f"round {round_no}: after recovery: {exc}")
            logged = _logged_outcomes(path)
            for call_id, outcome in acked.items():
                if logged.get(call_id) != outcome:
                    violations.append(
                        f"round {round_no}: {call_id} was acknowledged {outcome} but the log "
                        f"says {logged.get(call_id)}"
                    )
        events = 0
        with open_reader(path) as reader:
            for info in reader.sessions():
                events += info.head_seq
    print(f"crash loop: {kills} kills (SIGKILL), seed {args.seed}")
    print(
        f"questions acknowledged by request(): {acked_total}, all found with their outcome: "
        f"{'yes' if not violations else 'no'}"
    )
    print(f"events in the log: {events}")
    print(
        f"recovered: {recovered_asks} dangling asks closed as cancelled, "
        f"{interrupted} open turns ended as interrupted"
    )
    print(f"violations: {len(violations)}")
    for violation in violations[:20]:
        print(f"  - {violation}")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
