"""Leases and fencing in the PostgreSQL store (issue 22 step 4), in one process: two stores on
one database are two owners (each has its own owner id and connection), standing in for two
broker processes. The tests with real processes, kill -9 and SIGSTOP are in
``test_takeover_processes.py``.

A lease is made to expire "behind the owner's back" by setting its expiry in the past with SQL:
exactly what the database holds once an owner paused past its lease.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio

from broker import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalRequest,
    AuditAppendError,
    Outcome,
    SessionClosedError,
    SessionFencedError,
    SessionOwnedError,
    TurnEnd,
    TurnEndReason,
    TurnStart,
    open_broker,
)
from broker._projection import fold_all
from broker.store import StoreError
from broker.store._logtools import verify_reader
from broker.store.postgres import open_postgres_store

psycopg = pytest.importorskip("psycopg")

from broker.store.postgres._reader import open_postgres_reader  # noqa: E402


def _sql(dsn: str, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cursor = conn.execute(statement, params or None)
        return cursor.fetchall() if cursor.description else []


def _expire(dsn: str, session_id: str) -> None:
    """The owner of *session_id* stopped renewing long enough: its lease is over."""
    _sql(dsn, "UPDATE broker.sessions SET lease_expires_ms = 0 WHERE id = %s", session_id)


def _lease(dsn: str, session_id: str) -> tuple[Any, ...]:
    [row] = _sql(dsn, "SELECT owner, epoch FROM broker.sessions WHERE id = %s", session_id)
    return row


def _verify(dsn: str) -> None:
    with open_postgres_reader(dsn) as reader:
        verify_reader(reader)


async def test_a_live_lease_is_not_taken_and_names_its_owner(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with (
            open_postgres_store(postgres_dsn) as a,
            open_postgres_store(postgres_dsn) as b,
        ):
            assert a.owner != b.owner
            await a.create_session("s", None)
            await a.append("s", [ApprovalGrant(tool_name="edit")])
            assert _lease(postgres_dsn, "s") == (a.owner, 1)
            with pytest.raises(
                SessionOwnedError,
                match=rf"^session 's' in postgresql store '{re.escape(postgres_dsn)}' is owned "
                rf"by {re.escape(a.owner)} \(epoch 1\) until its lease expires at "
                r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 \(in \d+\.\ds\): resume it after "
                r"that, or close it in the process that owns it$",
            ):
                await b.claim("s")
            assert _lease(postgres_dsn, "s") == (a.owner, 1)  # untouched
            await a.append("s", [ApprovalGrant(tool_name="bash")])  # A writes on
            # Released by its owner: taken at once, with the next epoch.
            await a.release("s")
            head = await b.claim("s")
            assert head.state == fold_all(
                [ApprovalGrant(tool_name="edit"), ApprovalGrant(tool_name="bash")]
            )
            assert _lease(postgres_dsn, "s") == (b.owner, 2)
    _verify(postgres_dsn)


async def test_leases_are_renewed_while_the_owner_lives(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with (
            open_postgres_store(postgres_dsn, lease_ttl=0.3) as a,
            open_postgres_store(postgres_dsn) as b,
        ):
            await a.create_session("s", None)
            await trio.sleep(1.0)  # three ttls: renewed every 0.1 s
            with pytest.raises(SessionOwnedError):
                await b.claim("s")
            await a.append("s", [ApprovalGrant(tool_name="edit")])
        # Closed cleanly: every lease given back, the session is free at once.
        assert _lease(postgres_dsn, "s") == (None, 1)


async def test_a_takeover_fences_the_former_owner_and_lands_nobody_elses_writes_wrongly(
    postgres_dsn: str,
) -> None:
    """B takes s after A's lease expired; A's next group holds a write to s and one to t:
    s's fails with SessionFencedError and nothing of it lands, t's lands."""
    asked: list[Any] = [TurnStart(turn=1), ApprovalAsked(id="q", tool_name="bash")]
    with trio.fail_after(20):
        async with (
            open_postgres_store(postgres_dsn) as a,
            open_postgres_store(postgres_dsn) as b,
        ):
            await a.create_session("s", None)
            await a.create_session("t", None)
            await a.append("s", asked)
            _expire(postgres_dsn, "s")
            head = await b.claim("s")  # takes it, closes A's open question and turn
            recovered = [
                *asked,
                ApprovalDecided(id="q", outcome=Outcome.CANCELLED, recovered=True),
                TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted")),
            ]
            assert head.seq == 4
            assert head.state == fold_all(recovered)
            assert _lease(postgres_dsn, "s") == (b.owner, 2)
            assert b.recovery.cancelled_asks == 1
            # A does not know yet: both submissions go into one group.
            late = [ApprovalDecided(id="q", outcome=Outcome.ALLOWED_ONCE)]
            fenced = a.submit("s", 2, late, fold_all([*asked, *late]))
            x = [ApprovalGrant(tool_name="x")]
            other = a.submit("t", 0, x, fold_all(x))
            with pytest.raises(
                SessionFencedError,
                match=rf"^session 's' in postgresql store '{re.escape(postgres_dsn)}' was taken "
                r"over by another broker process \(this one held it at epoch 1\): nothing of "
                r"this append was stored, and this process must not write it again$",
            ):
                await fenced.wait()
            await other.wait()
            # From now on A refuses at once, without a round trip.
            y = [ApprovalGrant(tool_name="y")]
            again = a.submit("s", 3, y, fold_all([*asked, *late, *y]))
            assert again.done
            assert isinstance(again.error, SessionFencedError)
            assert await b.read("s") == recovered
            assert await b.read("t") == [ApprovalGrant(tool_name="x")]
            await b.append("s", [ApprovalGrant(tool_name="z")])  # B continues the chain
        assert _lease(postgres_dsn, "t") == (None, 1)
    _verify(postgres_dsn)


async def test_a_renewal_that_finds_the_session_taken_fences_it(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with (
            open_postgres_store(postgres_dsn, lease_ttl=0.3) as a,
            open_postgres_store(postgres_dsn) as b,
        ):
            await a.create_session("s", None)
            _expire(postgres_dsn, "s")
            await b.claim("s")
            await trio.sleep(0.5)  # A's renewal runs and finds s taken
            x = [ApprovalGrant(tool_name="x")]
            ticket = a.submit("s", 0, x, fold_all(x))
            assert ticket.done  # refused at once
            assert isinstance(ticket.error, SessionFencedError)
            assert await b.read("s") == []


async def test_a_session_this_process_never_claimed_cannot_be_written(postgres_dsn: str) -> None:
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn) as a:
            await a.create_session("s", None)
        async with open_postgres_store(postgres_dsn) as b:
            with pytest.raises(
                SessionFencedError,
                match=r"^session 's' in postgresql store '.*' is not owned by this process: "
                r"resume it \(open_session\(resume=\.\.\.\)\) before writing to it; nothing of "
                r"this append was stored$",
            ):
                await b.append("s", [ApprovalGrant(tool_name="x")])
            with pytest.raises(StoreError):
                await b.create_session("s", "p")  # nor re-parented
            assert await b.read("s") == []


async def test_a_fenced_broker_session_fails_its_caller_closed_and_ends(postgres_dsn: str) -> None:
    """Through the broker: A's session is taken over by B; A's next question is not put (its
    asker gets AuditAppendError, never an answer), A's session crashes with the fence as its
    cause and never writes again; B resumes the session and goes on."""

    async def allow(_req: ApprovalRequest, _next: object) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    with trio.fail_after(30):
        async with (
            open_postgres_store(postgres_dsn) as store_a,
            open_postgres_store(postgres_dsn) as store_b,
            open_broker(store=store_a) as a,
            open_broker(store=store_b) as b,
            a.answerer(allow),
            b.answerer(allow),
        ):
            session = await a.start_session()
            async with session.turn():
                bash = ApprovalRequest(agent=session.agent, tool_name="bash")
                assert await a.request(bash) is Outcome.ALLOWED_ONCE
                _expire(postgres_dsn, session.id)
                resumed = await b.start_session(resume=session.id)
                with pytest.raises(AuditAppendError, match=r"SessionFencedError|taken over"):
                    await a.request(ApprovalRequest(agent=session.agent, tool_name="edit"))
            await session.wait_closed()
            assert isinstance(session.crash_cause, SessionFencedError)
            with pytest.raises(SessionClosedError):
                session.require_open()
            async with resumed.turn() as number:
                assert number == 2
                edit = ApprovalRequest(agent=resumed.agent, tool_name="edit")
                assert await b.request(edit) is Outcome.ALLOWED_ONCE
            log = await store_b.read(session.id)
            await resumed.aclose()
    # A's turn was closed by B's claim (interrupted); nothing of A landed after it.
    assert [type(e).__name__ for e in log] == [
        "TurnStart",
        "ApprovalAsked",
        "ApprovalDecided",
        "TurnEnd",
        "TurnStart",
        "ApprovalAsked",
        "ApprovalDecided",
        "TurnEnd",
    ]
    assert log[3] == TurnEnd(turn=1, reason=TurnEndReason(kind="interrupted"))
    _verify(postgres_dsn)


async def test_a_connection_lost_after_a_silent_ttl_fences_every_session(
    postgres_dsn: str,
) -> None:
    """A writer paused inside a transaction past its lease loses its connection (the server's
    idle-in-transaction timeout is the ttl): it cannot prove it still holds any lease, so every
    session it held is fenced, not just left on a broken writer."""
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn, lease_ttl=60) as a:
            await a.create_session("s", None)
            await a.create_session("t", None)
            # As after a pause: no renewal for more than a ttl, and the server ended the
            # connection meanwhile.
            a._writer.backend._renewed_at -= 120  # type: ignore[attr-defined]
            _sql(
                postgres_dsn,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                f"broker {a.owner}"[:63],
            )
            with pytest.raises(
                SessionFencedError,
                match=r"^session 's' in postgresql store '.*' may have been taken over: this "
                r"process lost its connection to the store after renewing no lease for "
                r"1\d\d\.\ds \(it was paused or cut off, past its lease of 60s\); nothing of "
                r"this append was stored, and this process must not write it again$",
            ):
                await a.append("s", [ApprovalGrant(tool_name="x")])
            ticket = a.submit("t", 0, [ApprovalGrant(tool_name="y")], fold_all([]))
            assert ticket.done  # refused at once: t was fenced with s
            assert isinstance(ticket.error, SessionFencedError)
    assert _sql(postgres_dsn, "SELECT count(*) FROM broker.events") == [(0,)]


async def test_every_write_of_a_fenced_session_in_flight_or_queued_gets_the_fence(
    postgres_dsn: str,
) -> None:
    """Submissions pipelined behind the group that found the session taken over (chained on
    the writer's thread, or still in its inbox) fail with the same SessionFencedError, never
    with an out-of-sequence error from a head the fence dropped."""
    with trio.fail_after(20):
        async with (
            open_postgres_store(postgres_dsn) as a,
            open_postgres_store(postgres_dsn) as b,
        ):
            await a.create_session("s", None)
            _expire(postgres_dsn, "s")
            await b.claim("s")
            logged: list[Any] = []
            tickets = []
            for n in range(6):
                batch = [ApprovalGrant(tool_name=f"t{n}")]
                tickets.append(a.submit("s", len(logged), batch, fold_all([*logged, *batch])))
                logged += batch
                await trio.lowlevel.checkpoint()  # the writer takes it: groups in flight, queued
            for ticket in tickets:
                with pytest.raises(SessionFencedError, match=r"was taken over .* epoch 1\)"):
                    await ticket.wait()
            assert await b.read("s") == []


async def test_a_claim_does_not_wait_behind_a_paused_owners_open_transaction(
    postgres_dsn: str,
) -> None:
    """The former owner is paused inside a write (its transaction holds the session's row):
    the claim gives up after a moment with SessionOwnedError instead of holding up the
    claiming writer, whose other sessions go on; once the transaction ends it succeeds."""
    with trio.fail_after(20):
        async with open_postgres_store(postgres_dsn) as a:
            await a.create_session("s", None)
        with psycopg.connect(postgres_dsn) as paused:  # a transaction left open
            paused.execute("SELECT 1 FROM broker.sessions WHERE id = 's' FOR UPDATE")
            async with open_postgres_store(postgres_dsn) as b:
                with pytest.raises(
                    SessionOwnedError,
                    match=r"^session 's' in postgresql store '.*' is held by an open transaction "
                    r"of its former owner \(a writer paused inside a write\?\): resume it again "
                    r"in a moment — the server ends such a transaction once it has idled for its "
                    r"owner's lease ttl$",
                ):
                    await b.claim("s")
                await b.append("t", [ApprovalGrant(tool_name="x")])  # b is not held up
                paused.rollback()
                assert (await b.claim("s")).seq == 0
                assert _lease(postgres_dsn, "s") == (b.owner, 2)


async def test_a_broker_closing_many_sessions_gives_their_leases_back_in_few_statements(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mass close releases its sessions side by side; the writer gives each round of
    releases back in one statement, not one round trip per session — and every lease is
    free before the store closes (a close's own release_all is not what frees them)."""
    from broker.store.postgres._backend import PostgresBackend

    batches: list[int] = []
    real = PostgresBackend.release

    def counting(self: PostgresBackend, session_ids: Any) -> None:
        batches.append(len(session_ids))
        real(self, session_ids)

    monkeypatch.setattr(PostgresBackend, "release", counting)
    with trio.fail_after(60):
        async with open_postgres_store(postgres_dsn) as store:
            async with open_broker(store=store) as broker:
                ids = [(await broker.start_session()).id for _ in range(200)]
                assert {_lease(postgres_dsn, i)[0] for i in ids} == {store.owner}
            held = _sql(
                postgres_dsn,
                "SELECT count(*) FROM broker.sessions WHERE id = ANY(%s) AND owner IS NOT NULL",
                ids,
            )
            assert held == [(0,)]
    assert sum(batches) == 200
    assert len(batches) < 50


async def test_a_mass_close_after_a_takeover_names_no_session_stuck(
    postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process took over 300 sessions, each in a turn here, while this broker ran
    (issue 39: many sessions closing at once for another reason): the close ends every one of
    them at once (each turn's end is refused as fenced, nothing waits on a grace), and no
    session is reported stuck although the grace is far shorter than the close."""
    import logging

    caplog.set_level(logging.ERROR, logger="broker.session")
    with trio.fail_after(60):
        async with (
            # A renews no lease within the test's bound, so none comes back between the
            # expiry below and B's claims (a renewal there failed it on a loaded machine).
            open_postgres_store(postgres_dsn, lease_ttl=600) as a,
            open_postgres_store(postgres_dsn) as b,
        ):
            async with open_broker(store=a, settle_grace=2.0) as broker:
                sessions = [await broker.start_session() for _ in range(300)]
                async with trio.open_nursery() as turns:
                    for session in sessions:
                        await turns.start(_hold, session)
                    # The turns' starts were real writes, given a real grace; the close gets
                    # one far shorter than it takes.
                    broker.settle_grace = 0.005
                    _sql(postgres_dsn, "UPDATE broker.sessions SET lease_expires_ms = 0")
                    for session in sessions:
                        await b.claim(session.id)
                    await broker.aclose()
                    turns.cancel_scope.cancel()
            assert all(not s.is_open for s in sessions)
            assert {_lease(postgres_dsn, s.id)[0] for s in sessions} == {b.owner}
    stuck = [r for r in caplog.records if "did not stop within settle_grace" in r.getMessage()]
    assert stuck == []
    assert broker.sessions_ended == 300


async def _hold(session: Any, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    async with session.turn():
        task_status.started()
        await trio.sleep_forever()
