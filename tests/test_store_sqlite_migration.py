"""A store file of schema version 1 is migrated to version 2 by the first writer that opens it:
in place, in one transaction (a crash leaves version 1 whole), with every guarantee kept (the
hash chain, checkpoints, recovery of a crash tail, ``broker log verify``, the export).

``tests/fixtures/store/v1.sqlite`` was written by broker at c0749af, the last version-1 writer
(tests/fixtures/store/make_v1.py): three sessions (one a child), checkpoints, a grant and its
revocation, a question answered on the board, and a question pending when the process died.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

from broker import ApprovalRequest, Outcome, open_broker
from broker.store import StoreOpenError, open_sqlite_reader, open_sqlite_store
from broker.store._chain import GENESIS, chain_hash
from broker.store._logtools import export_all, verify_store
from broker.store.sqlite import _schema

FIXTURE = Path(__file__).parent / "fixtures" / "store" / "v1.sqlite"
_ROWS = "SELECT session_id, seq, ts_ms, line, prev_hash, hash FROM events ORDER BY session_id, seq"


def _query(path: Path, sql: str) -> list[tuple[object, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def _version(path: Path) -> int:
    (version,) = _query(path, "PRAGMA user_version")[0]
    assert isinstance(version, int)
    return version


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    path = tmp_path / "v1.sqlite"
    shutil.copyfile(FIXTURE, path)
    path.chmod(0o600)
    return path


def _links_are_whole(path: Path) -> None:
    """Every row links to its session's previous row (seq 1 to none), every session to its last
    row, and each link goes to a smaller id."""
    rows = _query(
        path,
        "SELECT e.session_id, e.seq, e.id, e.prev_row, p.session_id, p.seq FROM events AS e "
        "LEFT JOIN events AS p ON p.id = e.prev_row",
    )
    assert rows
    for session_id, seq, row_id, prev_row, linked_id, linked_seq in rows:
        assert isinstance(seq, int)
        if seq == 1:
            assert prev_row is None, (session_id, seq)
        else:
            assert (linked_id, linked_seq) == (session_id, seq - 1)
            assert isinstance(prev_row, int)
            assert isinstance(row_id, int)
            assert prev_row < row_id
    heads = _query(
        path,
        "SELECT s.id, s.head_seq, h.session_id, h.seq FROM sessions AS s "
        "LEFT JOIN events AS h ON h.id = s.head_row",
    )
    for session_id, head_seq, linked_id, linked_seq in heads:
        assert (linked_id, linked_seq) == (session_id, head_seq)


def test_the_fixture_is_a_version_1_store_with_a_crash_tail() -> None:
    assert FIXTURE.is_file()  # committed (an exception to .gitignore's *.sqlite)
    assert _version(FIXTURE) == 1
    assert "prev_row" not in {row[1] for row in _query(FIXTURE, "PRAGMA table_info(events)")}
    summary = verify_store(FIXTURE, allow_pending=True)
    assert (summary.sessions, summary.events, summary.pending) == (3, 23, 1)


def test_a_reader_reads_version_1_as_it_is_and_changes_nothing(v1: Path, tmp_path: Path) -> None:
    before = v1.read_bytes()
    with open_sqlite_reader(v1) as reader:
        sessions = reader.sessions()
        assert [len(list(reader.rows(info.session_id))) for info in sessions] == [14, 5, 4]
        # One session's read (broker log show) takes version 1's key: the same rows.
        for info in sessions:
            assert list(reader.linked_rows(info.session_id)) == list(reader.rows(info.session_id))
        assert reader.broken_links() == []
    export_all(v1, tmp_path / "export")
    assert v1.read_bytes() == before
    assert _version(v1) == 1


async def test_a_writer_migrates_version_1_keeping_every_row_and_guarantee(
    v1: Path, tmp_path: Path
) -> None:
    rows = _query(v1, _ROWS)
    sessions = _query(v1, "SELECT id, parent_id, created_ms, head_seq, head_hash FROM sessions")
    checkpoints = _query(v1, "SELECT * FROM checkpoints ORDER BY session_id")
    order = _query(v1, "SELECT session_id, seq FROM events ORDER BY rowid")
    before = export_all(v1, tmp_path / "before")
    ((pending_id,),) = _query(v1, "SELECT id FROM board_questions")  # the crash left it pending
    with trio.fail_after(30):
        async with open_sqlite_store(v1):
            pass  # migrated, then recovery settled the crash tail through the new layout
    assert _version(v1) == 2
    migrated = _query(v1, _ROWS)
    assert rows
    assert set(rows) <= set(migrated)
    assert _query(v1, "SELECT session_id, seq FROM events ORDER BY id")[: len(order)] == order
    assert _query(v1, "SELECT id, parent_id, created_ms FROM sessions ORDER BY rowid") == [
        row[:3] for row in sessions
    ]
    # Each session keeps its checkpoint (rewritten at close, at its head).
    assert [row[0] for row in checkpoints] == [
        row[0] for row in _query(v1, "SELECT * FROM checkpoints ORDER BY session_id")
    ]
    _links_are_whole(v1)
    with open_sqlite_reader(v1) as reader:  # migrated links walk to every row of a session
        for info in reader.sessions():
            walked = list(reader.linked_rows(info.session_id))
            assert [row.seq for row in walked] == list(range(1, info.head_seq + 1))
            assert walked == list(reader.rows(info.session_id))
    summary = verify_store(v1)  # the pending question was settled by recovery
    assert (summary.sessions, summary.pending) == (3, 0)
    decided = _query(
        v1,
        "SELECT json_extract(line, '$.data.outcome') FROM events WHERE "
        f"json_extract(line, '$.type') = 'approval/decided' AND instr(line, '{pending_id}')",
    )
    assert decided == [("cancelled",)]
    after = export_all(v1, tmp_path / "after")
    for session_id, name in before.files:
        old = (tmp_path / "before" / name).read_text()
        new = (tmp_path / "after" / name).read_text()
        assert new.startswith(old), session_id  # the same lines, recovery's appended after
    assert after.files == before.files


async def test_a_migrated_store_goes_on_from_where_version_1_stopped(v1: Path) -> None:
    with trio.fail_after(30):
        async with (
            open_sqlite_store(v1, checkpoint_every=4) as store,
            open_broker(store=store) as broker,
        ):
            first = _query(v1, "SELECT id FROM sessions ORDER BY rowid")[0][0]
            assert isinstance(first, str)
            async with broker.open_session(resume=first) as session:

                async def no(req: ApprovalRequest, next: object) -> Outcome:
                    return Outcome.REJECTED

                async with broker.answerer(no), session.turn():
                    for _ in range(3):
                        await broker.request(ApprovalRequest(agent=session.agent, tool_name="x"))
        async with open_sqlite_store(v1) as store:  # reopened: heads from checkpoint + walk
            events = await store.read(first)
            assert len(events) == 14 + 1 + 6 + 1
    _links_are_whole(v1)
    verify_store(v1)


async def test_a_failed_migration_leaves_version_1_whole(
    v1: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _query(v1, _ROWS)
    failing = (*_schema._MIGRATE_1_TO_2[:-1], "SELECT no_such_function()")
    monkeypatch.setattr(_schema, "_MIGRATE_1_TO_2", failing)
    with trio.fail_after(30), pytest.raises(StoreOpenError, match="no such function"):
        async with open_sqlite_store(v1):
            pass  # pragma: no cover
    assert _version(v1) == 1
    assert _query(v1, _ROWS) == rows
    assert "prev_row" not in {row[1] for row in _query(v1, "PRAGMA table_info(events)")}
    verify_store(v1, allow_pending=True)
    monkeypatch.undo()
    with trio.fail_after(30):
        async with open_sqlite_store(v1):
            pass
    assert _version(v1) == 2
    verify_store(v1)


def _big_version_1_file(path: Path, sessions: int, per_session: int) -> None:
    """The fixture plus *sessions* more sessions of *per_session* rows each, interleaved as a
    busy writer appends them, in the version-1 layout (valid chains, no checkpoints)."""
    shutil.copyfile(FIXTURE, path)
    path.chmod(0o600)
    line = '{"type":"approval/grant","data":{"toolName":"bash"}}'
    with contextlib.closing(sqlite3.connect(path)) as conn:
        heads = {f"big-{n}": GENESIS for n in range(sessions)}
        conn.executemany(
            "INSERT INTO sessions (id, parent_id, created_ms, head_seq, head_hash) "
            "VALUES (?, NULL, 1, ?, ?)",
            [(sid, 0, GENESIS) for sid in heads],
        )
        rows = []
        for seq in range(1, per_session + 1):
            for sid, prev in heads.items():
                digest = chain_hash(sid, seq, 7, line, prev)
                rows.append((sid, seq, 7, line, prev, digest))
                heads[sid] = digest
        conn.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.executemany(
            "UPDATE sessions SET head_seq = ?, head_hash = ? WHERE id = ?",
            [(per_session, digest, sid) for sid, digest in heads.items()],
        )
        conn.commit()


_MIGRATE = """
import sys, trio
from broker.store import open_sqlite_store
async def main():
    print("opening", flush=True)
    async with open_sqlite_store(sys.argv[1]):
        pass
trio.run(main)
"""


@pytest.mark.slow
def test_a_migration_killed_midway_leaves_version_1_whole(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    _big_version_1_file(path, sessions=500, per_session=300)
    rows = _query(path, _ROWS)
    wal = Path(f"{path}-wal")
    with subprocess.Popen(
        [sys.executable, "-c", _MIGRATE, str(path)], stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "opening\n"
        deadline = time.monotonic() + 60
        # Killed once the migration's transaction has spilled 4 MiB into the WAL: midway.
        while child.poll() is None and time.monotonic() < deadline:
            if wal.exists() and wal.stat().st_size > 4 << 20:
                break
            time.sleep(0.001)
        assert child.poll() is None, "the migration ended before it was killed: more rows"
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    assert _version(path) == 1
    assert _query(path, _ROWS) == rows
    verify_store(path, allow_pending=True)
    subprocess.run([sys.executable, "-c", _MIGRATE, str(path)], check=True, timeout=120)
    assert _version(path) == 2
    assert set(rows) <= set(_query(path, _ROWS))
    _links_are_whole(path)
    verify_store(path)
