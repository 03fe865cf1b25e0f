"""The one append path: the session sequences (precondition, audit rules, fold, seq) and hands
the event to the store, then awaits only durability. These tests pin what happens when that
durability fails: later events sequenced on top fail too, the session re-reads its head before
sequencing again, and a fenced session ends without writing again."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

from broker import (
    AnswerFn,
    AnswerNext,
    ApprovalDecided,
    ApprovalRequest,
    AuditAppendError,
    Broker,
    Event,
    Outcome,
    Session,
    SessionClosedError,
    UserMessage,
    open_broker,
)
from broker._projection import ApprovalState, fold_all
from broker.store import open_sqlite_store
from broker.store._forwarding import ForwardingStore
from broker.store._logtools import verify_store
from broker.store._memory import MemoryStore
from broker.store._protocol import (
    Durability,
    SessionFencedError,
    StoreError,
    StoreHead,
)
from broker.store._requests import Ticket


@attrs.define(eq=False)
class HeldStore(ForwardingStore):
    """A store whose tickets resolve when the test says so (a slow disk it controls).

    It keeps what a real store keeps: the acknowledged log, and the seq the next submission of a
    session must follow; a failure resets that seq to the acknowledged head and fails every
    later submission of the session, as a group commit does.
    """

    inner: MemoryStore = attrs.field(factory=MemoryStore)
    held: list[tuple[str, int, tuple[Event, ...], ApprovalState, Ticket]] = attrs.field(
        factory=list
    )
    next_seq: dict[str, int] = attrs.field(factory=dict)
    submissions: int = 0

    async def create_session(self, session_id: str, parent_id: str | None) -> None:
        await self.inner.create_session(session_id, parent_id)
        self.next_seq[session_id] = 0

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        self.submissions += 1
        ticket = Ticket()
        if seq != self.next_seq[session_id]:
            ticket.fail(StoreError(f"out of sequence: {seq} != {self.next_seq[session_id]}"))
            return ticket
        self.next_seq[session_id] = seq + len(events)
        self.held.append((session_id, seq, tuple(events), state, ticket))
        return ticket

    def ack_all(self) -> None:
        for session_id, seq, events, state, ticket in self.held:
            self.inner.submit(session_id, seq, events, state)
            ticket.succeed()
        self.held.clear()

    def fail_all(self, error: StoreError) -> None:
        for session_id, _seq, _events, _state, ticket in self.held:
            self.next_seq[session_id] = self.inner.head_nowait(session_id).seq
            ticket.fail(error)
        self.held.clear()

    @property
    def congested(self) -> bool:
        return False

    async def wait_for_room(self) -> None:
        await trio.lowlevel.checkpoint()

    async def release(self, session_id: str) -> None:
        await trio.lowlevel.checkpoint()

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        raise NotImplementedError


async def _ack_until_quiet(store: HeldStore) -> None:
    """Acknowledge whatever is submitted until every task is blocked with nothing held."""
    while True:
        with trio.fail_after(5):
            await trio.testing.wait_all_tasks_blocked()
        if not store.held:
            return
        store.ack_all()


async def _ask_in_turn(
    broker: Broker, session: Session, errors: list[AuditAppendError], answer: AnswerFn | None
) -> None:
    """One question inside a turn of *session* (answered by *answer*, if given); an
    :class:`AuditAppendError` is collected in *errors*."""
    async with contextlib.AsyncExitStack() as stack:
        if answer is not None:
            await stack.enter_async_context(broker.answerer(answer))
        await stack.enter_async_context(session.turn())
        try:
            await broker.request(ApprovalRequest(agent=session.agent, tool_name="x"))
        except AuditAppendError as exc:
            errors.append(exc)


async def _settle(store: HeldStore, count: int) -> None:
    """Wait until every task is blocked; by then *count* submissions are held."""
    with trio.fail_after(5):
        await trio.testing.wait_all_tasks_blocked()
    assert len(store.held) == count


async def test_a_failed_write_fails_what_was_sequenced_on_it_then_the_session_resumes() -> None:
    store = HeldStore()
    errors: list[str] = []
    async with open_broker(store=store) as broker, broker.open_session() as session:

        async def record(text: str) -> None:
            try:
                await session.record(UserMessage(text=text))
            except AuditAppendError as exc:
                errors.append(f"{text}: {exc}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(record, "m1")
            await _settle(store, 1)
            nursery.start_soon(record, "m2")  # sequenced on top of m1, not yet durable
            await _settle(store, 2)
            assert session.state.events == 2  # the projection ran ahead of durability
            store.fail_all(StoreError("disk full"))
        assert sorted(e.split(":")[0] for e in errors) == ["m1", "m2"]
        assert all("could not append user/message" in e and "disk full" in e for e in errors)

        async def later() -> None:
            await session.record(UserMessage(text="m3"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            await _settle(store, 1)
            store.ack_all()
        # m3 follows the last durable event (seq 0), not the two that failed.
        assert await store.read(session.id) == [UserMessage(text="m3")]
        assert session.state == fold_all([UserMessage(text="m3")])


async def test_a_fenced_session_fails_closed_and_ends() -> None:
    store = HeldStore()

    async def allow(_req: ApprovalRequest, _next: object) -> Outcome:
        await trio.lowlevel.checkpoint()
        return Outcome.ALLOWED_ONCE

    async with open_broker(store=store) as broker:
        session = await broker.start_session()
        session.add_answerer(allow)
        outcome: list[object] = []

        async def ask() -> None:
            try:
                async with session.turn():
                    outcome.append(
                        await broker.request(ApprovalRequest(agent=session.agent, tool_name="x"))
                    )
            except AuditAppendError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await _settle(store, 1)  # turn/start
            store.fail_all(SessionFencedError("session taken over by host-b (epoch 2)"))
        [error] = outcome
        assert isinstance(error, AuditAppendError)
        assert "host-b" in str(error)
        with trio.fail_after(5):
            await session.wait_closed()
        assert not session.is_open
        assert isinstance(session.crash_cause, SessionFencedError)
        before = store.submissions
        with pytest.raises(SessionClosedError, match=r"crashed .*SessionFencedError"):
            await session.record(UserMessage(text="after"))
        assert store.submissions == before  # it never writes again
        assert await store.read(session.id) == []


async def test_a_question_whose_write_failed_yet_landed_is_not_written_over(
    tmp_path: Path,
) -> None:
    """The store reports the pair's transaction failed, but it landed (an I/O error after the
    WAL was written): the session re-reads its head, which must include that pair, so the next
    question follows it instead of failing on a seq that is taken."""
    path = tmp_path / "s.db"
    with trio.fail_after(10):
        async with open_sqlite_store(path) as store:
            async with open_broker(store=store, policy="never") as broker:
                async with broker.open_session() as session, session.turn():
                    request = ApprovalRequest(agent=session.agent, tool_name="bash")
                    store.inject_commit_failure(
                        sqlite3.OperationalError("disk I/O error"), landed=True
                    )
                    with pytest.raises(AuditAppendError, match="disk I/O error"):
                        await broker.request(request)
                    assert await broker.request(request) is Outcome.REJECTED
                    decided = [
                        event
                        for event in await store.read(session.id)
                        if isinstance(event, ApprovalDecided)
                    ]
                    assert len(decided) == 2
    verify_store(path)


async def test_a_question_decided_without_an_answerer_is_sequenced_with_its_decision() -> None:
    """Steps 3.1-3.3 decide before any await: ``decided`` is handed to the store with
    ``asked``, in one submission, and the request waits for both at once (one durability wait,
    not two)."""
    store = HeldStore()
    async with open_broker(store=store, policy="never") as broker:
        session = await broker.start_session()
        decisions: list[Outcome] = []

        async def ask() -> None:
            async with session.turn():
                decisions.append(
                    await broker.request(ApprovalRequest(agent=session.agent, tool_name="x"))
                )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await _settle(store, 1)  # turn/start
            store.ack_all()
            await _settle(store, 1)  # asked AND decided, one submission, not durable yet
            [(_s, _q, events, _st, _t)] = store.held
            assert [type(e).__name__ for e in events] == ["ApprovalAsked", "ApprovalDecided"]
            assert decisions == []  # nothing returns before both are durable
            store.ack_all()
            await _settle(store, 1)  # turn/end
            store.ack_all()
        assert decisions == [Outcome.REJECTED]


async def test_a_pipelined_decision_whose_question_failed_fails_with_it() -> None:
    store = HeldStore()
    async with open_broker(store=store, policy="never") as broker:
        session = await broker.start_session()
        errors: list[AuditAppendError] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask_in_turn, broker, session, errors, None)
            await _settle(store, 1)
            store.ack_all()
            await _settle(store, 1)
            store.fail_all(StoreError("disk full"))  # asked fails: decided goes with it
            await _settle(store, 1)  # the turn still ends, after a resync
            store.ack_all()
        [error] = errors
        assert "could not append approval/asked" in str(error)
        logged = [type(e).__name__ for e in await store.read(session.id)]
        assert logged == ["TurnStart", "TurnEnd"]  # never a decision without its question


async def test_a_caller_cancelled_during_a_pipelined_wait_still_gets_the_decision() -> None:
    """The decision was made before the wait, so the wait is shielded: the caller's
    cancellation arrives at its next checkpoint, after the decision is durable."""
    store = HeldStore()
    async with open_broker(store=store, policy="never") as broker:
        session = await broker.start_session()
        got: list[Outcome] = []
        cancel = trio.CancelScope()

        async def ask() -> None:
            with cancel:
                async with session.turn():
                    request = ApprovalRequest(agent=session.agent, tool_name="x")
                    got.append(await broker.request(request))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await _settle(store, 1)  # turn/start
            store.ack_all()
            await _settle(store, 1)  # asked and decided, one submission
            cancel.cancel()
            await _settle(store, 1)  # the cancellation did not end the wait
            assert got == []
            store.ack_all()
            await _ack_until_quiet(store)  # whatever the turn's end appends
        assert got == [Outcome.REJECTED]
        logged = await store.read(session.id)
        assert [e.outcome for e in logged if isinstance(e, ApprovalDecided)] == [Outcome.REJECTED]


async def test_a_decision_whose_write_failed_is_closed_inside_its_turn_from_the_stores_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The projection had folded the failed ``decided`` (the question looked settled) while the
    store holds its ``asked`` alone: leaving the turn must close that question from what the
    store acknowledged, then end the turn — never leave the turn open, never end it around an
    unpaired question (found by the long chaos run: the next ``turn()`` then raised)."""
    store = HeldStore()
    async with open_broker(store=store) as broker:
        session = await broker.start_session()

        async def answer(_req: ApprovalRequest, _next: AnswerNext) -> Outcome:
            await trio.lowlevel.checkpoint()
            return Outcome.ALLOWED_ONCE

        errors: list[AuditAppendError] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_ask_in_turn, broker, session, errors, answer)
            await _settle(store, 1)  # turn/start
            store.ack_all()
            await _settle(store, 1)  # asked
            store.ack_all()
            await _settle(store, 1)  # decided (allowed-once)
            store.fail_all(StoreError("disk full"))
            await _ack_until_quiet(store)  # leaving the turn, after re-reading the head
        [error] = errors
        assert "could not append approval/decided" in str(error)
        logged = await store.read(session.id)
        assert [type(e).__name__ for e in logged] == [
            "TurnStart",
            "ApprovalAsked",
            "ApprovalDecided",
            "TurnEnd",
        ]
        closed = logged[2]
        assert isinstance(closed, ApprovalDecided)
        assert (closed.outcome, closed.recovered) == (Outcome.CANCELLED, True)
        assert not session.state.turn_open
        assert "left open" not in caplog.text
        # The session goes on: a new turn opens.
        async with trio.open_nursery() as nursery:

            async def again() -> None:
                async with session.turn():
                    pass

            nursery.start_soon(again)
            for _ in range(2):
                await _settle(store, 1)
                store.ack_all()


@attrs.define(eq=False)
class _RefusingStore(ForwardingStore):
    """Refuses the next submission at once (a failed ticket, nothing taken); counts re-reads."""

    inner: MemoryStore = attrs.field(factory=MemoryStore)
    refuse_next: bool = False
    heads_read: int = 0

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        if self.refuse_next:
            self.refuse_next = False
            refused = Ticket()
            refused.fail(StoreError("refused"))
            return refused
        return self.inner.submit(session_id, seq, events, state)

    async def head(self, session_id: str) -> StoreHead:
        self.heads_read += 1
        return await self.inner.head(session_id)


async def test_a_submission_refused_at_once_leaves_the_projection_and_needs_no_re_read() -> None:
    """A ticket already failed when handed back means the store took nothing: the session
    neither folds the refused events nor re-reads its head, and a question asked right after
    on the same session is not refused in turn (the long chaos run found such collateral
    failures when the projection ran ahead of a refusal)."""
    store = _RefusingStore()
    async with open_broker(store=store, policy="never") as broker:
        async with broker.open_session() as session, session.turn():
            before = session.state
            store.refuse_next = True
            with pytest.raises(
                AuditAppendError, match=r"could not append approval/asked .*refused"
            ):
                await broker.request(ApprovalRequest(agent=session.agent, tool_name="x"))
            assert session.state == before
            assert await broker.request(ApprovalRequest(agent=session.agent, tool_name="x")) is (
                Outcome.REJECTED
            )
            assert store.heads_read == 0
        logged = [type(e).__name__ for e in store.inner.read_nowait(session.id)]
        assert logged == ["TurnStart", "ApprovalAsked", "ApprovalDecided", "TurnEnd"]


async def test_a_decision_the_store_never_acknowledges_fails_closed_after_settle_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The shielded wait for a decided is bounded (BoundedWaits' timer): a store that never
    answers raises the exact error after settle_grace, and the caller's cancellation meanwhile
    does not cut the wait short."""
    store = HeldStore()
    async with open_broker(store=store, policy="never", settle_grace=2.0) as broker:
        session = await broker.start_session()
        errors: list[AuditAppendError] = []
        waited: list[float] = []
        caller = trio.CancelScope()

        async def ask() -> None:
            with caller:
                async with session.turn():
                    start = trio.current_time()
                    try:
                        await broker.request(ApprovalRequest(agent=session.agent, tool_name="x"))
                    except AuditAppendError as exc:
                        errors.append(exc)
                    waited.append(trio.current_time() - start)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await _settle(store, 1)  # turn/start
            store.ack_all()
            await _settle(store, 1)  # asked and decided, never acknowledged
            caller.cancel()  # does not end the shielded wait
        [error] = errors
        assert str(error) == (
            f"could not append to session {session.id} within settle_grace (2s); "
            "the question is left for recovery"
        )
        assert waited == [2.0]
