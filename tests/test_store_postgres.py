"""What the PostgreSQL store adds to the contract (``test_store_contract.py`` runs that on it):
its schema and the checks before anything is written, the writer lock, group commit, the same
hash chain as SQLite, checkpoints, recovery after a real kill -9, and the broker on it.

Every test gets a fresh database (the ``postgres_dsn`` fixture, dropped after); without a
server they skip, saying why.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import urllib.parse
from typing import Any

import pytest
import trio

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalRequest,
    Outcome,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    open_broker,
)
from broker._projection import fold_all
from broker.store import (
    SessionOwnedError,
    StoreLockedError,
    StoreOpenError,
    open_sqlite_reader,
    open_sqlite_store,
)
from broker.store._checkpoint import PROJECTION_FINGERPRINT, decode_state
from broker.store._logtools import VerifyError, verify_reader
from broker.store.postgres import open_postgres_store

psycopg = pytest.importorskip("psycopg")

from broker.store.postgres._reader import open_postgres_reader  # noqa: E402
from broker.store.postgres._schema import connect  # noqa: E402


def _where(dsn: str) -> str:
    return re.escape(f"postgresql store '{dsn}'")


def _sql(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def _catalog(dsn: str) -> list[tuple[Any, ...]]:
    """Every table and schema of the database besides the system's: to see nothing changed."""
    return _sql(
        dsn,
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema "
        "NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2",
    ) + _sql(dsn, "SELECT nspname FROM pg_namespace ORDER BY 1")


# ----------------------------------------------------------------------- schema


async def test_an_empty_database_gets_the_schema_once(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn) as store:
            assert store.recovery.clean
            await store.append("s", [ApprovalGrant(tool_name="edit")])
        assert _sql(postgres_dsn, "SELECT application, version FROM broker.store_info") == [
            ("broker-event-store", 2)
        ]
        async with open_postgres_store(postgres_dsn) as store:  # the second open checks it
            assert await store.read("s") == [ApprovalGrant(tool_name="edit")]
    tables = _sql(
        postgres_dsn,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'broker' ORDER BY 1",
    )
    assert tables == [("checkpoints",), ("events",), ("sessions",), ("store_info",)]


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        (
            ["CREATE SCHEMA broker", "CREATE TABLE broker.accounts (id int)"],
            "it has tables but no store_info table",
        ),
        (
            [
                "CREATE SCHEMA broker",
                "CREATE TABLE broker.store_info (application text, version int)",
                "INSERT INTO broker.store_info VALUES ('billing', 3)",
            ],
            "its store_info names 'billing'",
        ),
    ],
    ids=["other-tables", "other-application"],
)
async def test_another_applications_schema_is_refused_and_left_alone(
    postgres_dsn: str, setup: list[str], why: str
) -> None:
    for statement in setup:
        _sql(postgres_dsn, statement)
    before = _catalog(postgres_dsn)
    with trio.fail_after(20):
        with pytest.raises(
            StoreOpenError,
            match=rf"^{_where(postgres_dsn)} is not a broker store: schema 'broker' belongs to "
            rf"another application \({re.escape(why)}\); pass another schema, or a database of "
            r"its own$",
        ):
            async with open_postgres_store(postgres_dsn):
                pytest.fail("opened")  # pragma: no cover
    assert _catalog(postgres_dsn) == before


async def test_a_newer_schema_is_refused_and_left_alone(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn) as store:
            await store.append("s", [TurnStart(turn=1)])
        _sql(postgres_dsn, "UPDATE broker.store_info SET version = 3")
        before = _catalog(postgres_dsn), _sql(postgres_dsn, "SELECT * FROM broker.events")
        with pytest.raises(
            StoreOpenError,
            match=rf"^{_where(postgres_dsn)} has schema version 3, newer than this broker "
            r"supports \(2\): upgrade broker to open it$",
        ):
            async with open_postgres_store(postgres_dsn):
                pytest.fail("opened")  # pragma: no cover
    assert (_catalog(postgres_dsn), _sql(postgres_dsn, "SELECT * FROM broker.events")) == before


async def test_a_log_cut_behind_the_stores_back_is_refused_at_claim(postgres_dsn: str) -> None:
    grants = [ApprovalGrant(tool_name="a"), ApprovalGrant(tool_name="b")]
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, checkpoint_every=0) as store:
            await store.append("s", grants)
        _sql(postgres_dsn, "DELETE FROM broker.events WHERE seq = 2")
        async with open_postgres_store(postgres_dsn) as store:
            with pytest.raises(
                StoreOpenError,
                match=rf"^{_where(postgres_dsn)} is damaged: session 's' ends at seq 1 but its "
                r"recorded head is seq 2; restore the database from a backup$",
            ):
                await store.claim("s")
        # Not taken: the lease was left as it was.
        assert _sql(postgres_dsn, "SELECT owner, epoch FROM broker.sessions") == [(None, 1)]
    with open_postgres_reader(postgres_dsn) as reader, pytest.raises(VerifyError, match="chain"):
        verify_reader(reader)


async def test_an_older_schema_version_is_refused(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn):
            pass
        _sql(postgres_dsn, "UPDATE broker.store_info SET version = 0")
        with pytest.raises(
            StoreOpenError,
            match=rf"^{_where(postgres_dsn)} has unsupported schema version 0 \(this broker "
            r"reads versions 1 to 2\): restore it from a backup$",
        ):
            async with open_postgres_store(postgres_dsn):
                pytest.fail("opened")  # pragma: no cover


async def test_a_role_that_may_not_create_the_schema_is_told_so(postgres_dsn: str) -> None:
    role = "broker_test_" + urllib.parse.urlsplit(postgres_dsn).path.rsplit("_", 1)[-1]
    _sql(postgres_dsn, f'CREATE ROLE "{role}" LOGIN')
    try:
        parts = urllib.parse.urlsplit(postgres_dsn)
        host = parts.netloc.rsplit("@", 1)[-1]
        limited = urllib.parse.urlunsplit(parts._replace(netloc=f"{role}@{host}"))
        with trio.fail_after(20):
            with pytest.raises(
                StoreOpenError,
                match=rf"^{_where(limited)} has no broker schema 'broker' and this role may not "
                r"create it \(permission denied for database .*\): let a role that may run "
                r"broker once, or grant CREATE on the database$",
            ):
                async with open_postgres_store(limited):
                    pytest.fail("opened")  # pragma: no cover
        assert _sql(postgres_dsn, "SELECT 1 FROM pg_namespace WHERE nspname = 'broker'") == []
    finally:
        _sql(postgres_dsn, f'DROP ROLE "{role}"')


async def test_a_database_that_does_not_exist_is_one_line_without_the_password(
    postgres_dsn: str,
) -> None:
    parts = urllib.parse.urlsplit(postgres_dsn)
    missing = urllib.parse.urlunsplit(
        parts._replace(path="/broker_no_such_db", netloc=parts.netloc.replace("@", ":pw@", 1))
    )
    shown = re.escape(missing.replace(":pw@", ":***@"))
    with trio.fail_after(20):
        with pytest.raises(
            StoreOpenError,
            match=rf"^cannot connect to postgresql store '{shown}': connection failed: .*"
            r'database "broker_no_such_db" does not exist; check the URL, the server and the '
            r"credentials$",
        ):
            async with open_postgres_store(missing):
                pytest.fail("opened")  # pragma: no cover


def test_a_reader_refuses_a_database_without_the_schema(postgres_dsn: str) -> None:
    with pytest.raises(
        StoreOpenError,
        match=rf"^{_where(postgres_dsn)} holds no broker store \(schema 'broker' has no tables\): "
        r"pass the URL of a database a broker has written to$",
    ):
        with open_postgres_reader(postgres_dsn):
            pytest.fail("opened")  # pragma: no cover
    assert _sql(postgres_dsn, "SELECT 1 FROM pg_namespace WHERE nspname = 'broker'") == []


async def test_a_broker_that_writes_the_store_alone_keeps_others_out(postgres_dsn: str) -> None:
    """A broker of schema version 1 held this advisory lock alone (one writer per store):
    brokers with leases never write beside it."""
    with psycopg.connect(postgres_dsn, autocommit=True) as older:
        older.execute("SELECT pg_advisory_lock(hashtext('broker-writer:broker'))")
        with trio.fail_after(20):
            with pytest.raises(
                StoreLockedError,
                match=rf"^{_where(postgres_dsn)} is locked by a broker that writes it alone "
                r"\(advisory lock 'broker-writer:broker', an older broker\): stop that process, "
                r"or upgrade it$",
            ):
                async with open_postgres_store(postgres_dsn):
                    pytest.fail("opened")  # pragma: no cover


async def test_a_version_1_store_is_migrated_and_keeps_its_logs(postgres_dsn: str) -> None:
    grants = [ApprovalGrant(tool_name="a"), ApprovalGrant(tool_name="b")]
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn) as store:
            await store.append("s", grants)
        # What a broker of schema version 1 left: no lease columns.
        _sql(
            postgres_dsn,
            "ALTER TABLE broker.sessions DROP COLUMN owner, DROP COLUMN epoch, "
            "DROP COLUMN lease_expires_ms",
        )
        _sql(postgres_dsn, "UPDATE broker.store_info SET version = 1")
        with open_postgres_reader(postgres_dsn) as reader:  # a reader reads it as it is
            assert verify_reader(reader).sessions == 1
        assert _sql(postgres_dsn, "SELECT version FROM broker.store_info") == [(1,)]
        async with open_postgres_store(postgres_dsn) as store:
            assert (await store.claim("s")).state == fold_all(grants)
            assert await store.read("s") == grants
        assert _sql(postgres_dsn, "SELECT version FROM broker.store_info") == [(2,)]
        assert _sql(postgres_dsn, "SELECT owner, epoch FROM broker.sessions") == [(None, 1)]


async def test_schemas_of_one_database_are_separate_stores(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with (
            open_postgres_store(postgres_dsn, schema="team_a") as a,
            open_postgres_store(postgres_dsn, schema="team_b") as b,
        ):
            await a.append("s", [TurnStart(turn=1)])
            await b.append("s", [ApprovalGrant(tool_name="edit")])
            assert await a.read("s") == [TurnStart(turn=1)]
            assert await b.read("s") == [ApprovalGrant(tool_name="edit")]
    with pytest.raises(ValueError, match=r"^schema must be a lower-case identifier"):
        async with open_postgres_store(postgres_dsn, schema="Bad-Name"):
            pytest.fail("opened")  # pragma: no cover


def test_the_writer_connection_commits_synchronously_whatever_the_default(
    postgres_dsn: str,
) -> None:
    database = urllib.parse.urlsplit(postgres_dsn).path.lstrip("/")
    _sql(postgres_dsn, f'ALTER DATABASE "{database}" SET synchronous_commit = off')
    assert _sql(postgres_dsn, "SHOW synchronous_commit") == [("off",)]
    conn = connect(postgres_dsn)
    try:
        assert conn.execute("SHOW synchronous_commit").fetchone() == ("on",)
    finally:
        conn.close()


# ----------------------------------------------------------------------- writing


async def test_appends_that_arrive_together_share_one_transaction(postgres_dsn: str) -> None:
    with trio.fail_after(30):
        async with open_postgres_store(postgres_dsn) as store:
            before = store.transactions_committed
            async with trio.open_nursery() as nursery:
                for n in range(64):
                    nursery.start_soon(store.append, f"s{n}", [ApprovalGrant(tool_name="t")])
            committed = store.transactions_committed - before
            assert 1 <= committed < 16  # 64 appends, each acknowledged after its group's COMMIT
            for n in range(64):
                assert await store.read(f"s{n}") == [ApprovalGrant(tool_name="t")]
    with open_postgres_reader(postgres_dsn) as reader:
        verify_reader(reader)


async def test_the_chain_is_the_same_as_sqlites(postgres_dsn: str, tmp_path: Any) -> None:
    events = [
        TurnStart(turn=1),
        ApprovalAsked(id="q", tool_name="bash", reason="ünïcode \u2028 \x00 nul"),
        ApprovalDecided(id="q", outcome=Outcome.REJECTED),
        TurnEnd(turn=1, reason=TurnEndReason(kind="done")),
    ]

    def clock() -> int:
        return 1_700_000_000_000

    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, clock_ms=clock) as store:
            await store.create_session("s", None)
            await store.append("s", events[:2])
            await store.append("s", events[2:])
        async with open_sqlite_store(tmp_path / "s.db", clock_ms=clock) as sqlite:
            await sqlite.create_session("s", None)
            await sqlite.append("s", events[:2])
            await sqlite.append("s", events[2:])
    with open_postgres_reader(postgres_dsn) as reader:
        verify_reader(reader)
        postgres_rows = list(reader.rows("s"))
    with open_sqlite_reader(tmp_path / "s.db") as sqlite_reader:
        sqlite_rows = list(sqlite_reader.rows("s"))
    assert postgres_rows == sqlite_rows
    assert len(postgres_rows) == 4


async def test_ids_and_lines_with_copys_special_characters_are_stored_exactly(
    postgres_dsn: str,
) -> None:
    # Rows go by COPY's text format: tab, newline, carriage return and backslash are escaped.
    odd = "a\tb\nc\rd\\e \u2028 ✓"
    events = [
        TurnStart(turn=1),
        ApprovalAsked(id="q\\1\t", tool_name="ba\\sh\n", reason='\\\t\r\n"'),
    ]
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn) as store:
            await store.create_session(odd, "p\t\\")
            await store.append(odd, events)
            assert await store.read(odd) == events
        async with open_postgres_store(postgres_dsn) as store:
            await store.claim(odd)  # closes the tail the first store left open
            assert await store.read(odd) == [
                *events,
                ApprovalDecided(id="q\\1\t", outcome=Outcome.CANCELLED, recovered=True),
                TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")),
            ]
            assert store.session_ids() == [odd]
    with open_postgres_reader(postgres_dsn) as reader:
        verify_reader(reader)


async def test_checkpoints_are_written_with_the_rows_and_at_close(postgres_dsn: str) -> None:
    grants = [ApprovalGrant(tool_name=f"t{n}") for n in range(5)]
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, checkpoint_every=2) as store:
            for grant in grants[:3]:
                await store.append("s", [grant])
            stored = _sql(postgres_dsn, "SELECT seq, state, projection FROM broker.checkpoints")
            assert [(seq, projection) for seq, _, projection in stored] == [
                (2, PROJECTION_FINGERPRINT)
            ]
            assert decode_state(stored[0][1]) == fold_all(grants[:2])
            for grant in grants[3:]:
                await store.append("s", [grant])
        # At close: the tail since the last one.
        stored = _sql(postgres_dsn, "SELECT seq, state FROM broker.checkpoints")
        assert [(seq, decode_state(state)) for seq, state in stored] == [(5, fold_all(grants))]
        async with open_postgres_store(postgres_dsn) as store:
            assert (await store.claim("s")).state == fold_all(grants)
    with open_postgres_reader(postgres_dsn) as reader:
        assert verify_reader(reader).checkpoints == 1


# ----------------------------------------------------------------------- a real crash


@pytest.mark.slow
def test_kill_9_mid_question_is_recovered_at_the_next_claim(postgres_dsn: str) -> None:
    script = textwrap.dedent(
        """
        import sys, trio
        from broker import ApprovalRequest, open_broker
        from broker.store.postgres import open_postgres_store

        async def hang(req, next_):
            await trio.sleep_forever()

        async def main(dsn):
            async with (
                open_postgres_store(dsn, lease_ttl=1.0) as store,
                open_broker(store=store) as broker,
            ):
                session = await broker.start_session()
                await broker.grant(session, "edit")
                async with broker.answerer(hang), session.turn():
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            broker.request, ApprovalRequest(agent=session.agent, tool_name="bash")
                        )
                        # The projection changes only after a durable commit: asked is in.
                        while not session.state.pending:
                            await trio.sleep(0.01)
                        print(session.id, flush=True)
                        await trio.sleep_forever()

        trio.run(main, sys.argv[1])
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script, postgres_dsn], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        session_id = proc.stdout.readline().strip()
        assert session_id
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    trio.run(_resume_after_kill, postgres_dsn, session_id)


async def _resume_after_kill(dsn: str, session_id: str) -> None:
    with trio.fail_after(30):
        async with open_broker(store=dsn) as broker:
            while True:  # the killed owner's lease (1 s) expires first
                try:
                    session = await broker.start_session(resume=session_id)
                except SessionOwnedError:
                    await trio.sleep(0.1)
                else:
                    break
            assert not session.state.turn_open
            assert not session.state.pending
            assert session.state.grants == frozenset({"edit"})
            async with session.turn() as number:
                assert number == 2
                edit = ApprovalRequest(agent=session.agent, tool_name="edit")
                assert await broker.request(edit) is Outcome.ALLOWED_ONCE
        async with open_postgres_store(dsn) as store:
            events = await store.read(session_id)
            assert store.recovery.clean  # closed once, by the first claim after the kill
    recovered = [e for e in events if isinstance(e, ApprovalDecided) and e.recovered]
    assert [d.outcome for d in recovered] == [Outcome.CANCELLED]
    assert TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")) in events
    with open_postgres_reader(dsn) as reader:
        verify_reader(reader)


async def test_the_broker_on_postgres_from_a_url(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with open_broker(policy="never", store=postgres_dsn) as broker:
            async with broker.open_session() as session, session.turn():
                request = ApprovalRequest(agent=session.agent, tool_name="bash")
                assert await broker.request(request) is Outcome.REJECTED
            session_id = session.id
        async with open_broker(store=postgres_dsn.replace("postgresql", "postgres", 1)) as again:
            async with again.open_session(resume=session_id) as resumed:
                assert resumed.state.turn == 1
    with open_postgres_reader(postgres_dsn) as reader:
        assert verify_reader(reader).sessions == 1


async def test_a_released_session_is_checkpointed_before_its_lease_is_given_back(
    postgres_dsn: str,
) -> None:
    """At close a writer checkpoints what it still owns; a session released before (closed by
    the broker) is another process's to take, so its checkpoint is written at release, while
    the lease is still this process's: a resume then folds no tail (found by broker chaos
    --store: PostgreSQL runs stored no checkpoint at all)."""
    with trio.fail_after(20):
        async with open_broker(policy="never", store=postgres_dsn) as broker:
            async with broker.open_session() as session, session.turn():
                request = ApprovalRequest(agent=session.agent, tool_name="bash")
                for _ in range(3):
                    assert await broker.request(request) is Outcome.REJECTED
            stored = _sql(
                postgres_dsn,
                "SELECT seq, state FROM broker.checkpoints WHERE session_id = %s",
                session.id,
            )
            # turn/start, three asked + decided pairs, turn/end
            assert [seq for seq, _ in stored] == [8]
            assert decode_state(stored[0][1]) == session.state
