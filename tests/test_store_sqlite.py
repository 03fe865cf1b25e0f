"""The SQLite store beyond the EventStore contract (that is ``test_store_contract.py``): rows,
checkpoints, group commit, failures, cancellation, locking, bad files.

Real SQLite files in ``tmp_path`` and the real writer thread, so these tests use real time
(bounded by ``trio.fail_after``), not ``autojump_clock``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import pytest
import trio
import trio.testing

from broker._codec import encode_event
from broker._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    Event,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from broker._projection import fold_all
from broker._vocabulary import Outcome, Policy
from broker.store import StoreLockedError, StoreOpenError
from broker.store._checkpoint import PROJECTION_FINGERPRINT, decode_state, encode_state
from broker.store._logtools import verify_store
from broker.store._plan import Plan
from broker.store._protocol import StoreError
from broker.store._stage import SessionExistsError
from broker.store.sqlite import _backend as _sqlite_writer
from broker.store.sqlite import open_sqlite_reader, open_sqlite_store
from broker.store.sqlite._group import group_parameters, install_group_write
from broker.store.sqlite._jobs import write_group
from broker.store.sqlite._schema import WAL_AUTOCHECKPOINT_PAGES, connect_writer
from broker.store.sqlite._walk import LINES_SQL

if TYPE_CHECKING:
    from collections.abc import Iterator


DISK_FULL = "database or disk is full"


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


def _grant(n: int) -> list[Event]:
    """One event that opens nothing, so reopening has nothing to recover."""
    return [ApprovalGrant(tool_name=f"t{n}")]


def _stored_lines(path: Path, session_id: str) -> list[str]:
    with open_sqlite_reader(path) as reader:
        return [row.line for row in reader.rows(session_id)]


# ----------------------------------------------------------------------- rows and options


async def test_rows_hold_exactly_the_encoded_lines_and_survive_reopen(db: Path) -> None:
    events: list[Event] = [
        TurnStart(turn=1),
        ApprovalAsked(id="ünïcode-✓", tool_name="edit", reason="line\u2028separator"),
        ApprovalDecided(id="ünïcode-✓", outcome=Outcome.REJECTED, policy=Policy.NEVER),
        ApprovalPolicy(policy=Policy.NEVER, source="delegation"),
        TurnEnd(turn=1, reason=TurnEndReason(kind="completed")),
    ]
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.append("s", events)
        assert _stored_lines(db, "s") == [encode_event(event) for event in events]
        async with open_sqlite_store(db) as store:
            assert await store.read("s") == events
            assert await store.load_state("s") == fold_all(events)
            assert store.recovery.clean


async def test_append_to_an_unknown_session_creates_it_and_create_updates_the_parent(
    db: Path,
) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.append("s", _grant(1))
            await store.create_session("s", "p")
            await store.append("s", _grant(2))
            assert await store.read("s") == _grant(1) + _grant(2)
    with open_sqlite_reader(db) as reader:
        info = reader.session("s")
        assert info is not None
        assert (info.parent_id, info.head_seq) == ("p", 2)


async def test_empty_append_is_a_checkpointed_no_op(db: Path) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.append("s", [])
            assert store.transactions_committed == 0
            assert await store.read("s") == []


async def test_an_event_that_cannot_be_encoded_fails_only_its_caller(db: Path) -> None:
    @attrs.frozen(kw_only=True)
    class Unregistered(Event):
        TYPE = "x/unregistered"

    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            message = re.escape(
                "event class Unregistered (type 'x/unregistered') is not registered with the "
                "codec: register it with broker._codec.register_event_type before appending it"
            )
            with pytest.raises(TypeError, match=rf"^{message}$"):
                await store.append("s", [TurnStart(turn=1), Unregistered()])
            assert await store.read("s") == []
            await store.append("s", _grant(1))
            assert await store.read("s") == _grant(1)


async def test_timestamps_come_from_the_clock(db: Path) -> None:
    ticks = iter([1_000, 2_500])
    with trio.fail_after(10):
        async with open_sqlite_store(db, clock_ms=lambda: next(ticks)) as store:
            await store.append("s", _grant(1))
            await store.append("s", [TurnEnd(turn=1, reason=TurnEndReason(kind="completed"))])
    with open_sqlite_reader(db) as reader:
        assert [row.ts_ms for row in reader.rows("s")] == [1_000, 2_500]


async def test_import_session_is_all_or_nothing_and_refuses_an_existing_session(
    db: Path,
) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.import_session("i", "p", [TurnStart(turn=1), TurnStart(turn=2)])
            assert await store.read("i") == [TurnStart(turn=1), TurnStart(turn=2)]
            expected = (
                f"session 'i' already exists in store file '{db}': import into a new session id"
            )
            with pytest.raises(SessionExistsError, match=rf"^{re.escape(expected)}$"):
                await store.import_session("i", None, _grant(9))
            assert await store.read("i") == [TurnStart(turn=1), TurnStart(turn=2)]


async def test_synchronous_normal_is_accepted_and_durable_across_reopen(db: Path) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db, synchronous="NORMAL") as store:
            await store.append("s", _grant(1))
        async with open_sqlite_store(db) as store:
            assert await store.read("s") == _grant(1)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (
            {"synchronous": "OFF"},
            ValueError,
            'synchronous must be "FULL" or "NORMAL", got \'OFF\': use "FULL" to survive power '
            'loss, "NORMAL" to survive process crashes only',
        ),
        (
            {"checkpoint_every": -1},
            ValueError,
            "checkpoint_every must be >= 0, got -1: pass 0 to disable checkpoints",
        ),
        ({"checkpoint_every": 1.5}, TypeError, "checkpoint_every must be an int, got float"),
        (
            {"inbox_size": 0},
            ValueError,
            "inbox_size must be >= 1, got 0: the inbox must be bounded",
        ),
    ],
)
async def test_bad_options_are_refused_before_anything_is_opened(
    db: Path, options: dict[str, object], error: type[Exception], message: str
) -> None:
    with trio.fail_after(10), pytest.raises(error, match=rf"^{re.escape(message)}$"):
        async with open_sqlite_store(db, **options):  # type: ignore[arg-type]
            pass  # pragma: no cover
    assert not await trio.Path(db).exists()


async def test_load_state_after_close_raises_store_error(db: Path) -> None:
    # load_state is SqliteStore's own; the EventStore calls after close are contract tests.
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.append("s", _grant(1))
        message = re.escape(f"sqlite store '{db}' is closed: open it again")
        with pytest.raises(StoreError, match=rf"^{message}$"):
            await store.load_state("s")


async def test_an_error_in_the_body_propagates_and_closes_the_store(db: Path) -> None:
    async def body() -> None:
        async with open_sqlite_store(db) as store:
            await store.append("s", _grant(1))
            raise KeyError("boom")

    with trio.fail_after(10):
        # The writer's nursery is a detail: the body's error leaves as itself, not in a group.
        with pytest.raises(KeyError, match=r"^'boom'$"):
            await body()
        # The lock was released: a new writer opens.
        async with open_sqlite_store(db) as again:
            assert await again.read("s") == _grant(1)


# ----------------------------------------------------------------------- checkpoints


async def test_checkpoints_every_n_events_and_at_close(db: Path) -> None:
    events: list[Event] = [
        TurnStart(turn=1),
        *(ApprovalGrant(tool_name=f"tool{n}") for n in range(5)),
        TurnEnd(turn=1, reason=TurnEndReason(kind="completed")),
    ]
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=3) as store:
            for event in events:
                await store.append("s", [event])
            with open_sqlite_reader(db) as reader:
                checkpoint = reader.checkpoint("s")
                assert checkpoint is not None
                assert checkpoint.seq == 6
                assert decode_state(checkpoint.state) == fold_all(events[:6])
        with open_sqlite_reader(db) as reader:
            final = reader.checkpoint("s")
            assert final is not None
            assert final.seq == 7
            assert final.state == encode_state(fold_all(events))
        async with open_sqlite_store(db, checkpoint_every=3) as store:
            assert await store.load_state("s") == fold_all(events)


async def test_checkpoint_every_zero_writes_none(db: Path) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=0) as store:
            for n in range(1, 5):
                await store.append("s", [TurnStart(turn=n)])
    with open_sqlite_reader(db) as reader:
        assert reader.checkpoints() == []


async def test_a_checkpoint_of_another_projection_version_is_ignored(db: Path) -> None:
    events: list[Event] = [
        TurnStart(turn=1),
        ApprovalGrant(tool_name="bash"),
        TurnEnd(turn=1, reason=TurnEndReason(kind="completed")),
    ]
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=1) as store:
            for event in events:
                await store.append("s", [event])
    conn = sqlite3.connect(db)
    conn.execute(
        """UPDATE checkpoints SET projection = 'older-fold', """
        """state = '{"grants":["forged"],"events":3}'"""
    )
    conn.commit()
    conn.close()
    summary = verify_store(db)
    assert (summary.checkpoints, summary.stale_checkpoints) == (0, 1)
    assert summary.summary().endswith("; 1 checkpoints of another projection version skipped")
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=1) as store:
            assert await store.load_state("s") == fold_all(events)
    with open_sqlite_reader(db) as reader:
        checkpoint = reader.checkpoint("s")
        assert checkpoint is not None
        assert checkpoint.projection == PROJECTION_FINGERPRINT
        assert decode_state(checkpoint.state) == fold_all(events)


async def test_load_state_after_reopen_is_checkpoint_plus_tail(db: Path) -> None:
    rng = random.Random(7)
    events: list[Event] = []
    for turn in range(1, 30):
        events.append(TurnStart(turn=turn))
        for q in range(rng.randint(0, 3)):
            events.append(ApprovalAsked(id=f"{turn}-{q}", tool_name="bash"))
            events.append(ApprovalDecided(id=f"{turn}-{q}", outcome=Outcome.REJECTED))
        if rng.random() < 0.3:
            events.append(ApprovalGrant(tool_name=f"t{turn % 4}"))
        if rng.random() < 0.2:
            events.append(ApprovalPolicy(policy=rng.choice(list(Policy))))
        events.append(TurnEnd(turn=turn, reason=TurnEndReason(kind="completed")))
    events.append(TurnStart(turn=99))
    with trio.fail_after(20):
        # Crash-like: checkpoints only every 10 events, then a fresh writer folds the tail.
        async with open_sqlite_store(db, checkpoint_every=10) as store:
            for event in events:
                await store.append("s", [event])
        async with open_sqlite_store(db, checkpoint_every=10) as store:
            stored = await store.read("s")
            # Recovery ended the open turn 99; the rebuilt state includes that.
            assert stored == [*events, TurnEnd(turn=99, reason=TurnEndReason(kind="interrupted"))]
            assert await store.load_state("s") == fold_all(stored)


# ----------------------------------------------------------------------- group commit


async def test_concurrent_sessions_are_grouped_and_keep_their_order(db: Path) -> None:
    sessions, per_session = 64, 8
    with trio.fail_after(30):
        async with open_sqlite_store(db, checkpoint_every=0) as store:

            async def writer(session_id: str) -> None:
                for n in range(1, per_session + 1):
                    await store.append(session_id, _grant(n))

            async with trio.open_nursery() as nursery:
                for index in range(sessions):
                    nursery.start_soon(writer, f"s{index}")
            appends = sessions * per_session
            assert store.transactions_committed < appends // 4
            for index in range(sessions):
                assert await store.read(f"s{index}") == [
                    event for n in range(1, per_session + 1) for event in _grant(n)
                ]
    verify_store(db)


async def test_a_bounded_inbox_makes_callers_wait_not_fail(db: Path) -> None:
    with trio.fail_after(30):
        async with open_sqlite_store(db, inbox_size=2) as store:
            async with trio.open_nursery() as nursery:
                for index in range(40):
                    nursery.start_soon(store.append, f"s{index}", _grant(1))
            assert len(store.session_ids()) == 40


async def test_the_writer_checkpoints_the_wal_only_every_ten_thousand_pages(db: Path) -> None:
    # SQLite's default (a checkpoint every 1 000 pages) made every few commits also copy the
    # WAL into the file on the writer's thread. Past 1 000 pages the WAL must go on growing (a
    # group of schema version 2 appends ~30 pages; at the default the WAL stays near 1 030).
    page_size = 4096
    with trio.fail_after(60):
        async with open_sqlite_store(db, checkpoint_every=0) as store:

            async def session(index: int) -> None:
                for n in range(40):
                    grant = ApprovalGrant(tool_name=f"t{n}-" + "x" * 200)
                    await store.append(f"session-{index:04d}-of-the-wal-test", [grant])

            async with trio.open_nursery() as nursery:
                for index in range(256):
                    nursery.start_soon(session, index)
            wal_pages = (await trio.Path(f"{db}-wal").stat()).st_size / page_size
            assert wal_pages > 1_500, wal_pages
            assert wal_pages < WAL_AUTOCHECKPOINT_PAGES + 1_000, wal_pages
    verify_store(db)


async def _mixed_workload(path: Path) -> None:
    """Creates with parents, auto-creates, interleaved groups, checkpoints, an import."""
    # One constant clock: groups form differently in each run, and ts_ms is in every hash.
    async with open_sqlite_store(path, checkpoint_every=3, clock_ms=lambda: 1_000_000) as store:
        await store.create_session("root", None)
        await store.create_session("child", "root")

        async def session(session_id: str) -> None:
            await store.append(session_id, [TurnStart(turn=1)])
            for index in range(4):
                ask_id = f'{session_id}-{index}-ü"\\'
                await store.append(session_id, [ApprovalAsked(id=ask_id, tool_name="bash")])
                decided = ApprovalDecided(id=ask_id, outcome=Outcome.REJECTED)
                await store.append(session_id, [decided, *_grant(index)])
            await store.append(session_id, [TurnEnd(turn=1, reason=TurnEndReason(kind="done"))])

        async with trio.open_nursery() as nursery:
            for session_id in ("root", "child", "auto-1", "auto-2 ✓", "x" * 300):
                nursery.start_soon(session, session_id)
        await store.import_session("imported", "root", [TurnStart(turn=1), *_grant(7)])


def _dump(path: Path) -> list[list[tuple[object, ...]]]:
    """Every table's rows; a link to a row (ids depend on how rows fell into groups) as the
    session and seq of the row it names."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [
            conn.execute(query).fetchall()
            for query in (
                "SELECT s.id, s.parent_id, s.created_ms, s.head_seq, s.head_hash, h.session_id, "
                "h.seq FROM sessions AS s LEFT JOIN events AS h ON h.id = s.head_row "
                "ORDER BY s.rowid",
                "SELECT e.session_id, e.seq, e.ts_ms, e.line, e.prev_hash, e.hash, p.session_id, "
                "p.seq FROM events AS e LEFT JOIN events AS p ON p.id = e.prev_row "
                "ORDER BY e.session_id, e.seq",
                "SELECT * FROM checkpoints ORDER BY session_id",
            )
        ]


async def test_one_statement_groups_write_what_statement_by_statement_groups_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The group statement (JSON arrays, a TEMP trigger) is the hot path; the plain statements are
    # the fallback for an SQLite without JSON functions. Both must store the same bytes.
    monkeypatch.setattr(_sqlite_writer, "_ONE_STATEMENT_MIN_ROWS", 1)  # even one-row groups
    with trio.fail_after(30):
        await _mixed_workload(tmp_path / "one.db")
        monkeypatch.setattr(_sqlite_writer, "install_group_write", lambda _conn: False)
        await _mixed_workload(tmp_path / "many.db")
    one, many = _dump(tmp_path / "one.db"), _dump(tmp_path / "many.db")
    # Group composition may differ between runs (timing), so compare per session, not rowids.
    assert [sorted(table, key=repr) for table in one] == [sorted(table, key=repr) for table in many]
    assert len(one[1]) == 5 * 14 + 2
    # Every row links to its session's previous one, every session to its last row.
    for sid, seq, *_, link_sid, link_seq in one[1]:
        assert isinstance(seq, int)
        assert (link_sid, link_seq) == ((sid, seq - 1) if seq > 1 else (None, None))
    for sid, _, _, head_seq, _, head_sid, head_row_seq in one[0]:
        assert (head_sid, head_row_seq) == ((sid, head_seq) if head_seq else (None, None))
    verify_store(tmp_path / "one.db")
    verify_store(tmp_path / "many.db")


def test_a_group_written_as_one_statement_stores_its_rows_exactly(tmp_path: Path) -> None:
    # The rows reach SQLite as JSON session ids, fixed-width numbers and UTF-8 lines end to end
    # (group_parameters, on the trio thread), taken apart by the trigger: what it stores must be
    # the rows exactly, whatever the ids and lines hold, and each row linked to its previous one.
    ids = ['q"uote', "back\\slash", "ctl\x01\x1f\n\t", "é ✓ \u2028", "", "plain"]
    texts = ['q"uote', "back\\slash", "ctl\x01\x1f\n\t", "é ✓ \u2028 😀", "", "long" * 500]
    lines = [json.dumps({"v": text}, ensure_ascii=False) for text in texts]
    ts_ms = 1_700_000_000_123
    rows = [
        (session_id, seq, ts_ms, line, bytes([seq]) * 32, bytes([seq, index]) * 16)
        for seq, line in enumerate(lines, start=1)
        for index, session_id in enumerate(ids)
    ]
    heads = [(len(lines), rows[-len(ids) + n][5], session_id) for n, session_id in enumerate(ids)]
    plan = Plan(
        creates=[],
        auto_creates=[(session_id, None, ts_ms, bytes(32)) for session_id in ids],
        rows=rows,
        heads=heads,
        checkpoints=[],
        fault=None,
        ts_ms=ts_ms,
    )
    conn = connect_writer(str(tmp_path / "group.db"), "FULL")
    try:
        assert install_group_write(conn)
        parameters = group_parameters(plan)
        assert parameters is not None
        write_group(conn, plan, parameters, 41)
        stored = conn.execute(
            "SELECT session_id, seq, ts_ms, line, prev_hash, hash FROM events ORDER BY id"
        ).fetchall()
        assert stored == rows
        assert [r[0] for r in conn.execute("SELECT id FROM events ORDER BY id")] == list(
            range(41, 41 + len(rows))
        )
        for session_id in ids:
            walked = conn.execute(LINES_SQL, (session_id,)).fetchall()
            assert walked == [(seq, line) for seq, line in enumerate(lines, start=1)]
        assert conn.execute("SELECT id, head_seq, head_hash FROM sessions").fetchall() == [
            (session_id, seq, digest) for seq, digest, session_id in heads
        ]
    finally:
        conn.close()
    nul = attrs.evolve(plan, rows=[("a\x00b", 1, 5, "{}", b"p" * 32, b"h" * 32)], heads=[])
    assert group_parameters(nul) is None  # SQLite's JSON stops at a NUL: written row by row
    # Numbers past the fixed widths (a seq of 13 digits, more rows than an index holds: an import
    # of millions of events is one group) are written row by row too, never misaligned.
    huge = 10**12
    far = attrs.evolve(
        plan,
        rows=[("s", huge, 5, "{}", b"p" * 32, b"h" * 32)],
        heads=[(huge, b"h" * 32, "s")],
    )
    assert group_parameters(far) is None
    assert (
        group_parameters(
            attrs.evolve(
                far, rows=[("s", 7, 5, "{}", b"p" * 32, b"h" * 32)], heads=[(7, b"h" * 32, "s")]
            )
        )
        is not None
    )
    many = attrs.evolve(plan, rows=rows * (1_000_000 // len(rows) + 1))
    assert group_parameters(many) is None


async def test_a_session_id_with_a_nul_is_stored_exactly(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite's JSON functions stop at a NUL; such a group is written statement by statement.
    monkeypatch.setattr(_sqlite_writer, "_ONE_STATEMENT_MIN_ROWS", 1)
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=1) as store:
            await store.create_session("p\x00q", None)
            await store.create_session("c", "p\x00q")
            await store.append("a\x00b", _grant(1))
            await store.append("ok", _grant(2))
        async with open_sqlite_store(db) as store:
            assert store.session_ids() == ["p\x00q", "c", "a\x00b", "ok"]
            assert await store.read("a\x00b") == _grant(1)
    with open_sqlite_reader(db) as reader:
        child = reader.session("c")
        assert child is not None
        assert child.parent_id == "p\x00q"
    verify_store(db)


# ----------------------------------------------------------------------- failures


async def test_a_failed_commit_fails_its_group_and_the_writer_carries_on(db: Path) -> None:
    outcomes: dict[str, str] = {}
    errors: list[StoreError] = []
    expected = (
        f"write to store file '{db}' failed: sqlite says '{DISK_FULL}'; nothing of this append "
        "was stored — free disk space or fix the file, then retry"
    )
    with trio.fail_after(20):
        async with open_sqlite_store(db) as store:
            await store.append("before", _grant(1))
            store.inject_commit_failure(sqlite3.OperationalError(DISK_FULL))

            async def attempt(session_id: str) -> None:
                try:
                    await store.append(session_id, _grant(1))
                except StoreError as exc:
                    errors.append(exc)
                    outcomes[session_id] = "failed"
                else:
                    outcomes[session_id] = "stored"

            async with trio.open_nursery() as nursery:
                for index in range(20):
                    nursery.start_soon(attempt, f"s{index}")
            assert "failed" in outcomes.values()
            assert {str(exc) for exc in errors} == {expected}
            assert all(isinstance(exc.__cause__, sqlite3.OperationalError) for exc in errors)
            assert store.transactions_failed == 1
            for session_id, result in outcomes.items():
                assert await store.read(session_id) == ([] if result == "failed" else _grant(1))
                assert await store.load_state(session_id) == fold_all(
                    [] if result == "failed" else _grant(1)
                )
            # Still usable, and sequence numbers continue where the committed log ends.
            for session_id in outcomes:
                await store.append(session_id, _grant(2))
            await store.append("before", _grant(2))
    verify_store(db)
    assert _stored_lines(db, "before") == [encode_event(e) for e in _grant(1) + _grant(2)]


async def test_a_group_staged_on_top_of_a_failed_one_is_restaged(db: Path) -> None:
    # 300 waiting appends are split over two transactions: the second is staged while the
    # first commits. The first fails, so the second must be staged again from what is
    # committed. Two tasks also append to one shared session, so consecutive groups touch it.
    stored: dict[str, list[Event]] = {}
    with trio.fail_after(30):
        async with open_sqlite_store(db, inbox_size=1024) as store:

            async def attempt(session_id: str, event: Event) -> None:
                try:
                    await store.append(session_id, [event])
                except StoreError:
                    return
                stored.setdefault(session_id, []).append(event)

            for round_ in range(3):
                store.inject_commit_failure(sqlite3.OperationalError(DISK_FULL))
                async with trio.open_nursery() as nursery:
                    for index in range(300):
                        nursery.start_soon(attempt, f"s{index}", _grant(round_)[0])
                        nursery.start_soon(attempt, "shared", _grant(1000 * round_ + index)[0])
            assert store.transactions_failed == 3
            for session_id, events in stored.items():
                got = await store.read(session_id)
                assert sorted(map(encode_event, got)) == sorted(map(encode_event, events))
                assert await store.load_state(session_id) == fold_all(got)
    verify_store(db)


IO_ERROR = "disk I/O error"


async def test_a_landed_failure_under_a_crowd_rereads_every_head_it_touched(db: Path) -> None:
    # 300 waiting appends: the first transaction reports a failure but landed, the second was
    # staged (and chained on the thread) on top of it and is skipped, then staged again; a
    # shared session is in both. Every session's log, head and projection must still agree.
    with trio.fail_after(30):
        async with open_sqlite_store(db, inbox_size=1024) as store:

            async def attempt(session_id: str, event: Event) -> None:
                with contextlib.suppress(StoreError):
                    await store.append(session_id, [event])

            store.inject_commit_failure(sqlite3.OperationalError(IO_ERROR), landed=True)
            async with trio.open_nursery() as nursery:
                for index in range(300):
                    nursery.start_soon(attempt, f"s{index}", _grant(index)[0])
                    nursery.start_soon(attempt, "shared", _grant(1000 + index)[0])
            assert store.transactions_failed == 1
            # Another round on top: every append lands after what is really in the file.
            async with trio.open_nursery() as nursery:
                for index in range(300):
                    nursery.start_soon(store.append, f"s{index}", _grant(2000 + index))
                    nursery.start_soon(store.append, "shared", _grant(3000 + index))
            for index in [*range(300), None]:
                session_id = "shared" if index is None else f"s{index}"
                got = await store.read(session_id)
                assert (await store.head(session_id)).seq == len(got)
                assert await store.load_state(session_id) == fold_all(got)
    verify_store(db)


async def test_a_failed_commit_leaves_no_half_group_behind(db: Path) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=1) as store:
            await store.append("s", _grant(1))
            store.inject_commit_failure(sqlite3.OperationalError(DISK_FULL))
            with pytest.raises(StoreError):
                await store.append("s", [TurnEnd(turn=1, reason=TurnEndReason(kind="x"))])
            await store.import_session("fresh", None, _grant(1))
    with open_sqlite_reader(db) as reader:
        info = reader.session("s")
        checkpoint = reader.checkpoint("s")
        assert info is not None
        assert checkpoint is not None
        assert (info.head_seq, checkpoint.seq) == (1, 1)
    verify_store(db)


# ----------------------------------------------------------------------- cancellation


async def test_cancelled_appends_never_corrupt_or_hang(db: Path) -> None:
    attempted: dict[str, list[Event]] = {}
    acknowledged: dict[str, list[Event]] = {}
    with trio.fail_after(30):
        async with open_sqlite_store(db, inbox_size=4) as store:

            async def writer(session_id: str, rng: random.Random) -> None:
                attempted[session_id] = []
                acknowledged[session_id] = []
                for n in range(30):
                    event = ApprovalGrant(tool_name=f"t{n}")
                    attempted[session_id].append(event)
                    with trio.move_on_after(rng.uniform(0, 0.002)):
                        await store.append(session_id, [event])
                        acknowledged[session_id].append(event)

            async with trio.open_nursery() as nursery:
                for index in range(16):
                    nursery.start_soon(writer, f"s{index}", random.Random(index))
            for session_id, tried in attempted.items():
                stored = await store.read(session_id)
                # What landed is in order, includes every acknowledged append, and a cancelled
                # append may or may not have landed.
                assert [e for e in tried if e in stored] == stored
                assert set(acknowledged[session_id]) <= set(stored)
            await store.append("after", _grant(1))
    verify_store(db)


async def test_a_shielded_append_lands_even_when_the_store_is_closed_by_cancellation(
    db: Path,
) -> None:
    with trio.fail_after(10):
        with trio.CancelScope() as scope:
            async with open_sqlite_store(db) as store:
                await store.append("s", _grant(1))

                async def shielded() -> None:
                    with trio.CancelScope(shield=True):
                        await store.append("s", _grant(2))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(shielded)
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel(reason="test: shutting down during an append")
    assert _stored_lines(db, "s") == [encode_event(e) for e in _grant(1) + _grant(2)]


async def test_callers_blocked_on_a_full_inbox_get_store_error_at_close(db: Path) -> None:
    errors: list[str] = []
    with trio.fail_after(20):
        async with open_sqlite_store(db, inbox_size=1) as store:

            async def append(index: int) -> None:
                try:
                    await store.append(f"s{index}", _grant(1))
                except StoreError as exc:
                    errors.append(str(exc))

            async with trio.open_nursery() as nursery:
                for index in range(50):
                    nursery.start_soon(append, index)
                await trio.lowlevel.checkpoint()
                await store.aclose()
    assert set(errors) <= {f"sqlite store '{db}' is closed: open it again"}
    verify_store(db)


# ----------------------------------------------------------------------- locking


async def test_a_second_writer_in_the_same_process_gets_a_lock_error(db: Path) -> None:
    expected = (
        f"store file '{db}' is locked by another writer (lock file '{db}.lock'): close the "
        "other broker process, or open the store read-only"
    )
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.append("s", _grant(1))
            with pytest.raises(StoreLockedError, match=rf"^{re.escape(expected)}$"):
                async with open_sqlite_store(db):
                    pass  # pragma: no cover
            # Readers are not locked out while the writer runs.
            assert _stored_lines(db, "s") == [encode_event(ApprovalGrant(tool_name="t1"))]
            await store.append("s", _grant(2))


@pytest.mark.slow
async def test_a_writer_in_another_process_gets_a_lock_error(db: Path) -> None:
    script = (
        "import sys, trio\n"
        "from broker.store.sqlite import open_sqlite_store\n"
        "from broker.store import StoreLockedError\n"
        "async def main():\n"
        "    try:\n"
        "        async with open_sqlite_store(sys.argv[1]):\n"
        "            pass\n"
        "    except StoreLockedError as exc:\n"
        "        sys.stdout.write(str(exc))\n"
        "        sys.exit(3)\n"
        "trio.run(main)\n"
    )
    with trio.fail_after(20):
        async with open_sqlite_store(db) as store:
            await store.append("s", _grant(1))
            result = await trio.run_process(
                [sys.executable, "-c", script, str(db)], capture_stdout=True, check=False
            )
            assert result.returncode == 3
            assert result.stdout.decode().startswith(f"store file '{db}' is locked")
            await store.append("s", _grant(2))
    verify_store(db)


# ----------------------------------------------------------------------- bad files


@contextlib.contextmanager
def _unwritable(directory: Path) -> Iterator[None]:
    """Make *directory* unwritable (chmod; chattr +i when running as root), or skip."""
    directory.chmod(0o555)
    immutable = False
    if os.access(directory, os.W_OK) and shutil.which("chattr"):
        immutable = subprocess.run(["chattr", "+i", str(directory)], check=False).returncode == 0
    try:
        if os.access(directory, os.W_OK):
            pytest.skip("cannot make a directory unwritable here (root without chattr)")
        yield
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        directory.chmod(0o755)


@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody may create files in, holding one unrelated file."""
    directory = tmp_path / "ro"
    directory.mkdir()
    (directory / "other.txt").write_text("x")
    with _unwritable(directory):
        yield directory


async def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "store.db"
    expected = (
        f"cannot open store file '{path}': directory '{path.parent}' does not exist; "
        "create it first"
    )
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{re.escape(expected)}$"):
        async with open_sqlite_store(path):
            pass  # pragma: no cover
    assert not path.parent.exists()


async def test_a_read_only_directory_is_refused_for_writing(unwritable_dir: Path) -> None:
    path = unwritable_dir / "store.db"
    expected = (
        f"cannot open store file '{path}' for writing: directory '{unwritable_dir}' is not "
        "writable (the store keeps its -wal, -shm and .lock files next to it); fix the "
        "permissions, or open the store read-only"
    )
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{re.escape(expected)}$"):
        async with open_sqlite_store(path):
            pass  # pragma: no cover
    assert sorted(p.name for p in await trio.Path(unwritable_dir).iterdir()) == ["other.txt"]


async def test_a_store_in_a_read_only_directory_can_still_be_read(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    await trio.Path(directory).mkdir()
    path = directory / "store.db"
    with trio.fail_after(10):
        async with open_sqlite_store(path) as store:
            await store.append("s", _grant(1))
    await trio.Path(directory / "store.db.lock").unlink()
    with _unwritable(directory):
        before = await trio.Path(path).read_bytes()
        assert _stored_lines(path, "s") == [encode_event(ApprovalGrant(tool_name="t1"))]
        assert verify_store(path).events == 1
        assert await trio.Path(path).read_bytes() == before


def _not_a_store(path: Path, why: str) -> str:
    return re.escape(
        f"store file '{path}' is not a broker store: {why}; pass the path of a store created "
        "by broker, or a new file name"
    )


async def test_random_bytes_are_refused_and_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / "random.db"
    content = random.Random(1).randbytes(4096)
    await trio.Path(path).write_bytes(content)
    message = _not_a_store(path, "it is not an SQLite database (bad header)")
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{message}$"):
        async with open_sqlite_store(path):
            pass  # pragma: no cover
    with pytest.raises(StoreOpenError, match=rf"^{message}$"), open_sqlite_reader(path):
        pass  # pragma: no cover
    assert await trio.Path(path).read_bytes() == content
    assert sorted(p.name for p in await trio.Path(tmp_path).iterdir()) == ["random.db"]


@pytest.mark.parametrize("application_id", [0, 0x1234])
async def test_another_applications_database_is_refused_and_left_untouched(
    tmp_path: Path, application_id: int
) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.execute(f"PRAGMA application_id = {application_id}")
    conn.commit()
    conn.close()
    content = await trio.Path(path).read_bytes()
    message = _not_a_store(
        path,
        f"it is an SQLite database of another application (application_id "
        f"{application_id:#x}, expected 0x42524b52)",
    )
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{message}$"):
        async with open_sqlite_store(path):
            pass  # pragma: no cover
    with pytest.raises(StoreOpenError, match=rf"^{message}$"), open_sqlite_reader(path):
        pass  # pragma: no cover
    assert await trio.Path(path).read_bytes() == content


async def test_a_newer_schema_version_is_refused_and_left_untouched(db: Path) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db) as store:
            await store.append("s", _grant(1))
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    content = await trio.Path(db).read_bytes()
    message = re.escape(
        f"store file '{db}' has schema version 3, newer than this broker supports (2): "
        "upgrade broker to open it"
    )
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{message}$"):
        async with open_sqlite_store(db):
            pass  # pragma: no cover
    with pytest.raises(StoreOpenError, match=rf"^{message}$"), open_sqlite_reader(db):
        pass  # pragma: no cover
    assert await trio.Path(db).read_bytes() == content


async def test_a_directory_path_is_refused(tmp_path: Path) -> None:
    message = re.escape(f"store path '{tmp_path}' is a directory: pass a file name inside it")
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{message}$"):
        async with open_sqlite_store(tmp_path):
            pass  # pragma: no cover


async def test_an_empty_file_or_empty_database_becomes_a_store(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).close()
    with trio.fail_after(10):
        for path in (empty, blank):
            async with open_sqlite_store(path) as store:
                await store.append("s", _grant(1))
            assert _stored_lines(path, "s") == [encode_event(ApprovalGrant(tool_name="t1"))]


def test_the_reader_refuses_a_missing_or_empty_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    message = re.escape(f"store file '{missing}' does not exist: check the path")
    with pytest.raises(StoreOpenError, match=rf"^{message}$"), open_sqlite_reader(missing):
        pass  # pragma: no cover
    assert not missing.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    with (
        pytest.raises(StoreOpenError, match=rf"^{_not_a_store(empty, 'the file is empty')}$"),
        open_sqlite_reader(empty),
    ):
        pass  # pragma: no cover


async def test_a_damaged_store_is_refused_for_writing(db: Path) -> None:
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=0) as store:
            await store.append("s", [TurnStart(turn=1), TurnStart(turn=2)])
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM events WHERE seq = 2")
    conn.commit()
    conn.close()
    message = re.escape(
        f"store file '{db}' is damaged: session 's' ends at seq 1 but its recorded head is seq "
        f"2; run 'broker log verify {db}' to locate the damage and restore the file from a backup"
    )
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{message}$"):
        async with open_sqlite_store(db):
            pass  # pragma: no cover


async def test_a_walk_ends_at_a_damaged_link_instead_of_looping_or_straying(db: Path) -> None:
    # Schema version 2 reads a session by following its rows' links back from the head: a link
    # changed behind the store's back must end the walk (never loop, never read another
    # session's rows as this one's), and the fold at open then reports the damage.
    with trio.fail_after(10):
        async with open_sqlite_store(db, checkpoint_every=0) as store:
            for session_id in ("s", "t"):
                await store.append(session_id, [TurnStart(turn=n) for n in range(1, 5)])
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = {
            (sid, seq): rid
            for sid, seq, rid in conn.execute("SELECT session_id, seq, id FROM events")
        }
        # s's seq 3 links forward to its own head (a loop); t's seq 3 to s's seq 2.
        conn.execute("UPDATE events SET prev_row = ? WHERE id = ?", (row["s", 4], row["s", 3]))
        conn.execute("UPDATE events SET prev_row = ? WHERE id = ?", (row["s", 2], row["t", 3]))
        conn.commit()
        assert [r[0] for r in conn.execute(LINES_SQL, ("s",))] == [3, 4]
        assert [r[0] for r in conn.execute(LINES_SQL, ("t",))] == [3, 4]
    message = re.escape(
        f"store file '{db}' is damaged: session 's' has rows its links do not reach (from its "
        f"head the walk ends at seq 3); run "
        f"'broker log verify {db}' to locate the damage and restore the file from a backup"
    )
    with trio.fail_after(10), pytest.raises(StoreOpenError, match=rf"^{message}$"):
        async with open_sqlite_store(db):
            pass  # pragma: no cover
