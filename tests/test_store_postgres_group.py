"""How the PostgreSQL store writes a group: ONE statement, committed on its own (one round trip
to the server), that creates, fences, moves the heads and inserts the rows and checkpoints
(``broker/store/postgres/_jobs.py``, decision 0017). What the contract suite cannot see: the
round trips themselves, the parts of that statement that only matter when a session is created
or taken over inside a group, and the connection's state after it.

Every test gets a fresh database (the ``postgres_dsn`` fixture, dropped after).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from typing import Any

import pytest
import trio

from broker import ApprovalGrant
from broker._codec import encode_event
from broker._projection import fold_all
from broker.store import SessionFencedError, StoreError
from broker.store._chain import GENESIS, chain_hash
from broker.store._logtools import verify_reader
from broker.store._plan import Plan
from broker.store.postgres import open_postgres_store

psycopg = pytest.importorskip("psycopg")

from broker.store.postgres._backend import PostgresBackend  # noqa: E402
from broker.store.postgres._reader import open_postgres_reader  # noqa: E402

TS = 1_700_000_000_000


def _sql(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def _verify(dsn: str) -> None:
    with open_postgres_reader(dsn) as reader:
        verify_reader(reader)


def _grant(name: str) -> list[Any]:
    return [ApprovalGrant(tool_name=name)]


def _writer_conn(store: Any) -> Any:
    return store._writer.backend._conn


async def _until_it_waits_for_a_lock(dsn: str, application_name: str) -> None:
    """Return once the connection named *application_name* waits for a lock."""
    waiting = (
        "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'"
    )
    for _ in range(1000):
        if _sql(dsn, waiting, application_name):
            return
        await trio.sleep(0.01)
    pytest.fail(f"{application_name} never waited for a lock")  # pragma: no cover


async def test_a_group_is_one_round_trip_with_no_begin_copy_or_commit(postgres_dsn: str) -> None:
    """libpq's own trace of the writer's connection while one group of three sessions is
    written: one Sync (one round trip), no simple-protocol Query (BEGIN, COMMIT) and no COPY."""
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, lease_ttl=60) as store:
            for name in ("a", "b", "c"):
                await store.create_session(name, None)
            logged: dict[str, list[Any]] = {"a": [], "b": [], "c": []}
            for n in range(6):  # past psycopg's prepare threshold: the steady state
                await store.append("a", _grant(f"warm{n}"))
                logged["a"] += _grant(f"warm{n}")
            before = store.transactions_committed
            with tempfile.TemporaryFile("w+") as trace:
                pgconn = _writer_conn(store).pgconn
                pgconn.trace(trace.fileno())
                pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
                try:
                    tickets = [
                        store.submit(
                            name,
                            len(logged[name]),
                            _grant(name),
                            fold_all(logged[name] + _grant(name)),
                        )
                        for name in ("a", "b", "c")
                    ]
                    for ticket in tickets:
                        await ticket.wait()
                finally:
                    pgconn.untrace()
                trace.seek(0)
                fields = [line.rstrip("\n").split("\t") for line in trace]
                sent = [f[2] for f in fields if f[0] == "F"]
            assert store.transactions_committed - before == 1  # the three were one group
    assert sent.count("Sync") == 1, sent
    assert "Query" not in sent, sent
    assert "CopyData" not in sent, sent
    assert sent == ["Bind", "Describe", "Execute", "Sync"], sent
    _verify(postgres_dsn)


async def test_an_epoch_moved_while_the_group_waits_for_the_row_fences_that_session_only(
    postgres_dsn: str,
) -> None:
    """A takeover's transaction holds s's row when A's group (s and t) arrives: the group's
    statement waits for it, and once it commits with the next epoch (owner unchanged, so only
    the epoch tells) the fence re-reads the row and drops s; t lands."""
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, lease_ttl=60) as a:
            await a.create_session("s", None)
            await a.create_session("t", None)
            with psycopg.connect(postgres_dsn) as taker:
                taker.execute("UPDATE broker.sessions SET epoch = epoch + 1 WHERE id = 's'")
                fenced = a.submit("s", 0, _grant("late"), fold_all(_grant("late")))
                other = a.submit("t", 0, _grant("x"), fold_all(_grant("x")))
                await _until_it_waits_for_a_lock(postgres_dsn, f"broker {a.owner}"[:63])
                assert not fenced.done
                assert not other.done
                taker.commit()
            with pytest.raises(SessionFencedError, match=r"was taken over .* at epoch 1\)"):
                await fenced.wait()
            await other.wait()
            assert await a.read("t") == _grant("x")
        assert _sql(postgres_dsn, "SELECT count(*) FROM broker.events WHERE session_id = 's'") == [
            (0,)
        ]
        assert _sql(postgres_dsn, "SELECT head_seq FROM broker.sessions WHERE id = 's'") == [(0,)]


async def test_an_epoch_moved_behind_the_owners_back_fences_its_next_group(
    postgres_dsn: str,
) -> None:
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, lease_ttl=60) as a:
            await a.create_session("s", None)
            await a.append("s", _grant("x"))
            _sql(postgres_dsn, "UPDATE broker.sessions SET epoch = epoch + 1 WHERE id = 's'")
            with pytest.raises(SessionFencedError, match=r"was taken over"):
                await a.append("s", _grant("y"))
    assert _sql(postgres_dsn, "SELECT count(*), max(seq) FROM broker.events") == [(1, 1)]
    _verify(postgres_dsn)


def _rows(
    session_id: str, after: tuple[int, bytes], names: list[str]
) -> tuple[list[tuple[str, int, int, str, bytes, bytes]], tuple[int, bytes, str]]:
    """The rows of grants *names* appended to *session_id* after head *after*, chained, and
    the head they leave."""
    seq, prev = after
    rows = []
    for name in names:
        seq += 1
        line = encode_event(ApprovalGrant(tool_name=name))
        digest = chain_hash(session_id, seq, TS, line, prev)
        rows.append((session_id, seq, TS, line, prev, digest))
        prev = digest
    return rows, (seq, prev, session_id)


def _plan(**parts: Any) -> Plan:
    fields: dict[str, Any] = {
        "creates": [],
        "auto_creates": [],
        "rows": [],
        "heads": [],
        "checkpoints": [],
        "fault": None,
        "ts_ms": TS,
    }
    fields.update(parts)
    return Plan(**fields)


def _write(backend: PostgresBackend, plan: Plan) -> Mapping[str, StoreError]:
    return backend.write(plan, backend.prepare(plan))


def test_a_create_and_appends_in_one_group_move_the_head_they_insert(postgres_dsn: str) -> None:
    """One group (written as the writer stages it): appends to n, first written by them, then n
    created with a parent (n is in both creates and auto-creates); and an owned session
    re-parented together with its appends. Both heads end where the rows end (the reader
    verifies the chain against them) and the next group follows on."""
    backend = PostgresBackend(postgres_dsn, "broker", ttl=60)
    backend.open()
    try:
        assert _write(backend, _plan(creates=[("old", None, TS, GENESIS)])) == {}
        rows, head = _rows("old", (0, GENESIS), ["o1"])
        assert _write(backend, _plan(rows=rows, heads=[head])) == {}
        old_rows, old_head = _rows("old", head[:2], ["o2", "o3"])
        n_rows, n_head = _rows("n", (0, GENESIS), ["n1"])
        plan = _plan(
            creates=[("n", "parent-n", TS, GENESIS), ("old", "parent-old", TS, GENESIS)],
            auto_creates=[("n", None, TS, GENESIS)],
            rows=[*n_rows, *old_rows],
            heads=[n_head, old_head],
        )
        assert _write(backend, plan) == {}
        heads = "SELECT id, parent_id, head_seq, head_hash FROM broker.sessions ORDER BY ord"
        assert _sql(postgres_dsn, heads) == [
            ("old", "parent-old", 3, old_head[1]),
            ("n", "parent-n", 1, n_head[1]),
        ]
        _verify(postgres_dsn)
        more_n, n_head = _rows("n", n_head[:2], ["n2"])
        more_old, old_head = _rows("old", old_head[:2], ["o4"])
        assert _write(backend, _plan(rows=[*more_n, *more_old], heads=[n_head, old_head])) == {}
    finally:
        backend.close()
    assert _sql(
        postgres_dsn, "SELECT id, parent_id, head_seq, epoch FROM broker.sessions ORDER BY ord"
    ) == [("old", "parent-old", 4, 1), ("n", "parent-n", 2, 1)]
    _verify(postgres_dsn)


def test_sessions_another_process_owns_are_neither_created_nor_written(
    postgres_dsn: str,
) -> None:
    """B's group creates one session A owns (re-parenting it), appends to another A owns, and
    writes one of its own: A's two are fenced and nothing of them changes — parent, head,
    rows, checkpoint — and B's own session lands."""
    a = PostgresBackend(postgres_dsn, "broker", ttl=60)
    b = PostgresBackend(postgres_dsn, "broker", ttl=60)
    a.open()
    b.open()
    try:
        creates = [("s", "mine", TS, GENESIS), ("t", None, TS, GENESIS)]
        s_rows, s_head = _rows("s", (0, GENESIS), ["s1"])
        t_rows, t_head = _rows("t", (0, GENESIS), ["t1"])
        plan = _plan(creates=creates, rows=[*s_rows, *t_rows], heads=[s_head, t_head])
        assert _write(a, plan) == {}
        before = _sql(postgres_dsn, "SELECT * FROM broker.sessions ORDER BY ord")
        s_late, s_late_head = _rows("s", s_head[:2], ["late"])
        t_late, t_late_head = _rows("t", t_head[:2], ["late"])
        own, own_head = _rows("own", (0, GENESIS), ["y"])
        plan = _plan(
            creates=[("s", "theirs", TS, GENESIS)],
            auto_creates=[("t", None, TS, GENESIS), ("own", None, TS, GENESIS)],
            rows=[*s_late, *t_late, *own],
            heads=[s_late_head, t_late_head, own_head],
            checkpoints=[("s", 2, "{}", "x"), ("t", 2, "{}", "x")],
        )
        fenced = _write(b, plan)
        assert sorted(fenced) == ["s", "t"]
        assert all(isinstance(e, SessionFencedError) for e in fenced.values())
    finally:
        a.close()
        b.close()
    after = _sql(postgres_dsn, "SELECT * FROM broker.sessions ORDER BY ord")
    assert after[:2] == [(*row[:6], None, 1, 0) for row in before]  # A closed: leases back
    assert after[2][0] == "own"
    assert _sql(postgres_dsn, "SELECT session_id, seq FROM broker.events ORDER BY 1, 2") == [
        ("own", 1),
        ("s", 1),
        ("t", 1),
    ]
    assert _sql(postgres_dsn, "SELECT count(*) FROM broker.checkpoints") == [(0,)]
    _verify(postgres_dsn)


async def test_a_failed_group_leaves_the_connection_transactional(postgres_dsn: str) -> None:
    """The group runs in autocommit; after a statement the server refused (a row put there
    behind the store's back) the connection is out of autocommit again, so a claim is still
    one transaction, and the next group lands."""
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, lease_ttl=60) as store:
            await store.create_session("s", None)
            _sql(
                postgres_dsn,
                "INSERT INTO broker.events VALUES ('s', 1, 0, 'x', '\\x00', '\\x00')",
            )
            with pytest.raises(StoreError, match=r"duplicate key"):
                await store.append("s", _grant("x"))
            assert _writer_conn(store).autocommit is False
            _sql(postgres_dsn, "DELETE FROM broker.events")
            await store.claim("s")
            await store.append("s", _grant("y"))
            assert await store.read("s") == _grant("y")
    _verify(postgres_dsn)
