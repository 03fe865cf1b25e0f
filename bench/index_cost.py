"""What the events table's ``(session_id, seq)`` index costs the SQLite writer, in raw sqlite3.

    python -m bench.index_cost [--sessions 256] [--groups 200]

Each group is one transaction (``synchronous=FULL``, WAL, the store's autocheckpoint) holding an
ask's two rows for every session, as the store's writer commits them, plus the sessions' head
updates. Two layouts of the same rows:

- ``indexed``: the store's schema version 1, a rowid table with ``PRIMARY KEY (session_id,
  seq)``: each session's tail of the index is a page of its own, so a group dirties about one
  index page per session.
- ``chained``: a rowid table with no index on the session; each row names the previous row of
  its session (``prev_row``), the session its head row: a group appends to the table's last
  pages only, and a session's rows are read back by following the chain (schema version 2).
- ``linked``: the same links kept in a table of their own beside version 1's six columns
  (rejected: a second table to append to costs more than the column).

Prints CPU and wall time per group for each, alternating, so drift hits both alike. The
evidence for issue 37's lever "a new SQLite schema version"; nothing here is the store.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

LINE = '{"type":"approval/asked","data":{"id":"' + "x" * 36 + '","toolName":"bash"}}'


def run(layout: str, path: Path, sessions: int, groups: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per group of *layout*."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA wal_autocheckpoint=10000")
    conn.execute(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY NOT NULL, head_seq INTEGER NOT NULL, "
        "head_hash BLOB NOT NULL, head_row INTEGER)"
    )
    if layout == "indexed":
        conn.execute(
            "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "ts_ms INTEGER NOT NULL, line TEXT NOT NULL, prev_hash BLOB NOT NULL, "
            "hash BLOB NOT NULL, PRIMARY KEY (session_id, seq))"
        )
        insert = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)"
    elif layout == "linked":
        conn.execute(
            "CREATE TABLE events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "ts_ms INTEGER NOT NULL, line TEXT NOT NULL, prev_hash BLOB NOT NULL, "
            "hash BLOB NOT NULL)"
        )
        conn.execute("CREATE TABLE links (row INTEGER PRIMARY KEY, prev_row INTEGER)")
        insert = (
            "INSERT INTO events (rowid, session_id, seq, ts_ms, line, prev_hash, hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)"
        )
    else:
        conn.execute(
            "CREATE TABLE events (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, "
            "seq INTEGER NOT NULL, ts_ms INTEGER NOT NULL, line TEXT NOT NULL, "
            "prev_hash BLOB NOT NULL, hash BLOB NOT NULL, prev_row INTEGER)"
        )
        insert = "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    ids = [str(random.Random(n).getrandbits(128)) for n in range(sessions)]
    conn.executemany("INSERT INTO sessions VALUES (?, 0, x'00', NULL)", [(i,) for i in ids])
    digest = hashlib.sha256(b"x").digest()
    seq = dict.fromkeys(ids, 0)
    last = dict.fromkeys(ids, 0)
    row = 0
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(groups):
        rows: list[tuple[object, ...]] = []
        for i in ids:
            for _ in range(2):
                seq[i] += 1
                if layout == "indexed":
                    rows.append((i, seq[i], 0, LINE, digest, digest))
                else:
                    row += 1
                    rows.append((row, i, seq[i], 0, LINE, digest, digest, last[i]))
                    last[i] = row
        conn.execute("BEGIN IMMEDIATE")
        if layout == "linked":
            conn.executemany(insert, [r[:7] for r in rows])
            conn.executemany("INSERT INTO links VALUES (?, ?)", [(r[0], r[7]) for r in rows])
        else:
            conn.executemany(insert, rows)
        conn.executemany(
            "UPDATE sessions SET head_seq = ?, head_hash = ?, head_row = ? WHERE id = ?",
            [(seq[i], digest, last[i], i) for i in ids],
        )
        conn.execute("COMMIT")
    cpu_ms = (time.process_time() - cpu) / groups * 1000
    wall_ms = (time.perf_counter() - wall) / groups * 1000
    conn.close()
    return cpu_ms, wall_ms


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.index_cost", description=__doc__)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"one group = {args.sessions} sessions x 2 rows, synchronous=FULL; per group:")
    with tempfile.TemporaryDirectory(prefix="bench-index-") as tmp:
        for round_ in range(args.rounds):
            for layout in ("indexed", "chained", "linked"):
                path = Path(tmp) / f"{layout}-{round_}.sqlite"
                cpu_ms, wall_ms = run(layout, path, args.sessions, args.groups)
                print(f"  {layout:>8}: {cpu_ms:6.2f} ms CPU, {wall_ms:6.2f} ms wall", flush=True)
                os.remove(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
