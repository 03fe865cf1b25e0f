"""The session actor: one task per open session owning its log appends, projection and nursery.

Teardown order (tested in ``tests/test_session.py``; see ``design/architecture.md``):

1. **stop intake** — the session stops admitting new questions, turns, grants and policy writes;
2. **settle pending questions** — every question in flight is withdrawn (its cancel scope is
   cancelled with reason ``session <id> closing``), settles ``cancelled``, and its
   ``approval/decided`` is appended; bounded by the broker's ``settle_grace``;
3. **end an open turn** — ``turn/end`` with reason kind ``closed``;
4. **close the inbox** — the actor commits what is queued and leaves its loop;
5. **cancel the session nursery** — the answerer channels living there end, and their
   registrations leave the chain;
6. **unregister** — the broker forgets the session; :meth:`Session.aclose` returns.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ._agent import Agent
from ._audit_rules import check
from ._collapse import collapse_single, is_cancellation
from ._errors import (
    AuditAppendError,
    AuditInvariantError,
    BrokerError,
    SessionClosedError,
    SessionCrashedError,
    TurnError,
)
from ._events import ApprovalDecided, Event, TurnEnd, TurnEndReason, TurnStart
from ._flight import Flight, Withdrawal
from ._projection import ApprovalState, fold
from ._texts import OUTSIDE_TURN
from ._vocabulary import Outcome

if TYPE_CHECKING:
    from ._answerers import AnswererHandle, AnswerFn
    from ._broker import Broker

__all__ = ["Session"]

log = logging.getLogger("broker.session")

# How many queued appends one store transaction may carry. Bounds the batch, not the inbox.
_MAX_BATCH = 64
# Capacity of each session's inbox: a burst beyond it waits (backpressure), never grows memory.
_INBOX_SIZE = 64

Builder = Callable[[ApprovalState], Event | None]


class _Status(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    CRASHED = "crashed"


def _if_pending(decided: ApprovalDecided) -> Builder:
    """A builder that appends *decided* only while its question is still pending."""

    def build(state: ApprovalState) -> Event | None:
        return decided if decided.id in state.pending else None

    return build


@attrs.define(eq=False)
class _Command:
    """One conditional append: ``build`` sees the projection as of its turn in the log."""

    build: Builder
    done: trio.Event = attrs.field(factory=trio.Event)
    event: Event | None = None
    error: BaseException | None = None

    def finish(self, event: Event | None = None, error: BaseException | None = None) -> None:
        self.event, self.error = event, error
        self.done.set()


@attrs.define(eq=False, repr=False)
class Session:
    """An open conversation with its own durable log, projection and agent.

    Created by :meth:`Broker.start_session`, :meth:`Broker.open_session` or
    :meth:`Broker.delegate`; never construct it yourself. ``parent`` is the delegating session.
    """

    id: str
    parent: Session | None
    _broker: Broker
    delegated: bool = False
    #: The parent's id as the store records it (also when the parent is not open here).
    parent_id: str | None = attrs.field(default=None)
    agent: Agent = attrs.field(init=False)
    _state: ApprovalState = attrs.field(factory=ApprovalState, init=False)
    _status: _Status = attrs.field(default=_Status.OPEN, init=False)
    _send: trio.MemorySendChannel[_Command] = attrs.field(init=False)
    _recv: trio.MemoryReceiveChannel[_Command] = attrs.field(init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    _batch: list[_Command] = attrs.field(factory=list, init=False)
    # Questions past admission and not yet settled, by request id.
    _flights: dict[str, Flight] = attrs.field(factory=dict, init=False)
    # Created when first needed: an idle session should cost as little memory as possible.
    _settled: trio.Event | None = attrs.field(default=None, init=False)
    _finished: trio.Event | None = attrs.field(default=None, init=False)
    _done: bool = attrs.field(default=False, init=False)
    _loop_scope: trio.CancelScope = attrs.field(
        factory=lambda: trio.CancelScope(shield=True), init=False
    )
    # True while a turn is being left: its questions settle and new ones are refused.
    _turn_ending: bool = attrs.field(default=False, init=False)
    # Answerers scoped to this session's agent, sorted by registration order.
    _answerers: list[AnswererHandle] = attrs.field(factory=list, init=False)
    crash_cause: BaseException | None = attrs.field(default=None, init=False)
    # Commands sent to the inbox and not yet taken by the actor (a memory channel hands an item
    # straight to a waiting receiver, so the buffer alone cannot tell), and whether the actor is
    # between taking a batch and finishing it. Both gate the inline path of _append.
    _queued: int = attrs.field(default=0, init=False)
    _committing: bool = attrs.field(default=False, init=False)
    _append_nowait: Callable[[str, Sequence[Event]], None] | None = attrs.field(
        default=None, init=False
    )

    def __attrs_post_init__(self) -> None:
        if self.parent is not None and self.parent_id is None:
            self.parent_id = self.parent.id
        self.agent = Agent(self)
        # A store that acknowledges synchronously (in memory) is appended to without a
        # scheduling pass; a durable store is awaited.
        self._append_nowait = getattr(self._broker.store, "append_nowait", None)
        self._send, self._recv = trio.open_memory_channel[_Command](_INBOX_SIZE)

    def __repr__(self) -> str:
        return f"<Session {self.id} {self._status.value}>"

    def _restore(self, state: ApprovalState) -> None:
        """Start from a stored projection (resume); before the actor runs, so nothing races."""
        self._state = state

    # -- read-only views ------------------------------------------------------------------

    @property
    def state(self) -> ApprovalState:
        """The projection folded from every event acknowledged so far."""
        return self._state

    @property
    def is_open(self) -> bool:
        """Whether the session is live: admitting questions (not closing, closed or crashed)."""
        return self._status is _Status.OPEN

    @property
    def pending(self) -> int:
        """How many questions of this session are between admission and settlement."""
        return len(self._flights)

    # -- turns ----------------------------------------------------------------------------

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[int]:
        """Open a turn (``turn/start``) for the block; ``turn/end`` is appended when it exits.

        Yields the turn number. The end reason kind is ``completed``, or ``cancelled`` /
        ``error`` when the block raised. Leaving the turn first withdraws every question of it
        still pending (asked by other tasks): each settles ``cancelled`` and its pair lands
        inside the turn; only then is ``turn/end`` appended. While the turn is ending, new
        questions are refused with the out-of-turn :class:`TurnError`. Cancellation: leaving is
        shielded and bounded by the broker's ``settle_grace``, then the cancellation
        propagates; the block's own exception always leaves as itself. Raises
        :class:`TurnError` if a turn is already open (turns do not nest).
        """

        def start(state: ApprovalState) -> Event:
            if state.turn_open:
                raise TurnError(
                    f"session.turn() while turn {state.turn} is open: turns do not nest; "
                    "end the current turn before starting another"
                )
            return TurnStart(turn=state.turn + 1)

        started = await self._append(start)
        assert isinstance(started, TurnStart)
        number = started.turn
        kind = "completed"
        try:
            yield number
        except BaseException as exc:
            kind = "cancelled" if is_cancellation(exc) else "error"
            raise
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(self._broker.settle_grace):
                await self._leave_turn(number, kind, Withdrawal.TURN_ENDING)

    async def _leave_turn(  # noqa: ASYNC910 (a teardown step; its callers checkpoint)
        self, number: int, kind: str, cause: Withdrawal
    ) -> None:
        """Withdraw the turn's pending questions, wait for their pairs, then end the turn.

        Runs shielded and bounded by its caller. Invariant (``_audit_rules``): ``turn/end``
        is committed only when no question of the turn is pending, so every pair lies inside
        its turn. A question whose ``decided`` could not be appended (the store failed) has no
        task left to pair it: it is closed here as recovery would close it after a crash.
        """
        self._turn_ending = True
        try:
            self._withdraw_all(cause, f"turn {number} of session {self.id} ending")
            await self._wait_settled()
            for ask_id in sorted(self._state.pending - self._flights.keys()):
                orphan = ApprovalDecided(id=ask_id, outcome=Outcome.CANCELLED, recovered=True)
                await self._append(_if_pending(orphan), internal=True)

            def end(state: ApprovalState) -> Event | None:
                if state.turn_open and state.turn == number:
                    return TurnEnd(turn=number, reason=TurnEndReason(kind=kind))
                return None  # already ended, e.g. by the session closing

            await self._append(end, internal=True)
        except SessionClosedError:
            # The session ended without us: it closed the turn itself, or it crashed and
            # recovery will close it (``interrupted``) when the log is reopened.
            log.debug("turn %d of session %s left to the session's teardown", number, self.id)
        except AuditAppendError as exc:
            # The store failed (or a question is stuck past the grace): the turn stays open in
            # the log, for recovery to end as ``interrupted``; never a pair outside its turn.
            log.warning("turn %d of session %s left open: %s", number, self.id, exc)
        finally:
            self._turn_ending = False

    # -- other events ---------------------------------------------------------------------

    async def record(self, event: Event) -> None:
        """Append a non-approval event (``user/message``, ``tool/call``, …) to this session's log.

        ``approval/*`` and ``turn/*`` events are written only by the broker and by
        :meth:`turn`, which keep their invariants; they are refused here. Returns once the event
        is durable. Cancellation: the event may still land.
        """
        if event.TYPE.startswith(("approval/", "turn/")):
            raise ValueError(
                f"event must not be an {event.TYPE} event: approval and turn events are written "
                "by the broker (request, grant, set_policy) and by session.turn()"
            )
        await self._append(lambda _state: event)

    # -- tasks and answerer channels owned by the session ---------------------------------

    async def start(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Start *async_fn* in the session's nursery, like :meth:`trio.Nursery.start`.

        The task lives until it returns or the session closes (its nursery is cancelled at
        step 5 of the teardown). If it raises, the session crashes — the other sessions do not.
        Cancellation: as :meth:`trio.Nursery.start`.
        """
        nursery = self._require_nursery()
        return await nursery.start(self._supervise_started, async_fn, *args)

    def start_soon(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start *async_fn* in the session's nursery, like :meth:`trio.Nursery.start_soon`."""
        self._require_nursery().start_soon(self._supervise, async_fn, *args)

    async def _supervise(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        try:
            await async_fn(*args)
        except BaseException as exc:
            self._task_failed(exc)
            raise

    async def _supervise_started(  # noqa: ASYNC114, ASYNC128 (async_fn calls started())
        self,
        async_fn: Callable[..., Awaitable[Any]],
        *args: Any,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            await async_fn(*args, task_status=task_status)
        except BaseException as exc:
            self._task_failed(exc)
            raise

    def _task_failed(self, exc: BaseException) -> None:
        # The log loop is shielded from cancellation around the session; a failing task of its
        # own must still end it, or the session nursery (and the crash) would wait forever.
        if not is_cancellation(exc):
            self.halt(f"a task of session {self.id} failed: {type(exc).__name__}")

    async def start_answerer(self, fn: AnswerFn, *, prepend: bool = False) -> AnswererHandle:
        """Register *fn* for this session's agent, held by a task in the session's nursery.

        The answerer lives until ``handle.close()`` or the session closes. Cancellation: as
        :meth:`start`; if cancelled before it started, nothing is registered.
        """
        serve = functools.partial(
            self._broker.serve_answerer, fn, scope=self.agent, prepend=prepend
        )
        handle: AnswererHandle = await self.start(serve)
        return handle

    def add_answerer(self, fn: AnswerFn, *, prepend: bool = False) -> AnswererHandle:
        """Register *fn* for this session's agent, held by the session itself (no task).

        The answerer lives until ``handle.close()`` or the session closes (step 5 of the
        teardown). Use it when the answerer needs no task of its own — it is the cheapest
        scoped answerer; use :meth:`start_answerer` when its lifetime is a task's.
        """
        if not self.is_open:
            raise self._closed_error("add an answerer to")
        return self._broker._register(fn, self.agent, prepend)

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None or not self.is_open:
            raise self._closed_error("start a task in")
        return self._nursery

    # -- the actor ------------------------------------------------------------------------

    async def _run(  # noqa: ASYNC910 (the actor task; its loop checkpoints)
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The actor task; lives in the broker's root nursery. Never raises an Exception."""
        try:
            with collapse_single():
                async with trio.open_nursery() as nursery:
                    self._nursery = nursery
                    task_status.started()
                    # Invariant: the log loop ends when its inbox closes (teardown step 4), or
                    # when its owner halts it — never because a scope around the broker was
                    # cancelled, since the teardown that follows still appends through it
                    # (pending decisions, the turn's end).
                    with self._loop_scope:
                        await self._serve_log()
                    nursery.cancel_scope.cancel(reason=f"session {self.id} closed")
        except Exception as exc:
            # Containment: a crash of this session's loop or of a task in its nursery ends this
            # session only; the broker's root nursery never sees it.
            self.crash_cause = exc
            self._status = _Status.CRASHED
            log.error(
                "session %s crashed; its pending questions are left for recovery",
                self.id,
                exc_info=exc,
            )
        finally:
            self._finalise()

    async def _serve_log(self) -> None:  # noqa: ASYNC910 (returns only at end of channel)
        while True:
            try:
                first = await self._recv.receive()
            except trio.EndOfChannel:
                return  # noqa: ASYNC910 (receive() checkpointed before raising)
            batch = self._batch = [first]
            while len(batch) < _MAX_BATCH:
                try:
                    batch.append(self._recv.receive_nowait())
                except (trio.WouldBlock, trio.EndOfChannel):
                    break
            self._queued -= len(batch)
            self._committing = True
            try:
                await self._commit(batch)
            finally:
                self._committing = False
                self._batch = []

    # No checkpoint of its own: with a synchronous store the actor's receive is its checkpoint.
    async def _commit(self, batch: list[_Command]) -> None:  # noqa: ASYNC910
        state, accepted = self._sequence(batch)
        if not accepted:
            return  # noqa: ASYNC910 (see above)
        try:
            if self._append_nowait is not None:
                self._append_nowait(self.id, [event for _, event in accepted])
            else:
                await self._broker.store.append(self.id, [event for _, event in accepted])
        except Exception as exc:
            self._fail(accepted, exc)
            return  # noqa: ASYNC910 (see above)
        self._apply(state, accepted)

    def _commit_now(self, command: _Command) -> None:
        """The actor's commit, run synchronously by the appending task (see :meth:`_append`)."""
        assert self._append_nowait is not None
        state, accepted = self._sequence([command])
        if not accepted:
            return
        try:
            self._append_nowait(self.id, [event for _, event in accepted])
        except Exception as exc:
            self._fail(accepted, exc)
            return
        self._apply(state, accepted)

    def _sequence(
        self, batch: list[_Command]
    ) -> tuple[ApprovalState, list[tuple[_Command, Event]]]:
        """Give each command its place in the log: its event, a no-op, or its refusal."""
        state = self._state
        accepted: list[tuple[_Command, Event]] = []
        for command in batch:
            try:
                event = command.build(state)
            except BrokerError as exc:  # a precondition (turn, policy) refused this one append
                command.finish(error=exc)
                continue
            if event is None:
                command.finish()
                continue
            broken = check(state, event)
            if broken is not None:
                # Invariant: nothing that breaks an audit rule is ever committed.
                rule, detail = broken
                command.finish(
                    error=AuditInvariantError(
                        f"session {self.id} refused {event.TYPE}: rule {rule}: {detail}"
                    )
                )
                continue
            state = fold(state, event)
            accepted.append((command, event))
        return state, accepted

    def _fail(self, accepted: list[tuple[_Command, Event]], exc: Exception) -> None:
        # Containment: a failed append fails exactly the commands of this transaction; the
        # projection is unchanged and the actor stays usable for later appends.
        for command, event in accepted:
            error = AuditAppendError(f"could not append {event.TYPE} to session {self.id}: {exc}")
            error.__cause__ = exc
            command.finish(error=error)

    def _apply(self, state: ApprovalState, accepted: list[tuple[_Command, Event]]) -> None:
        self._state = state
        for command, event in accepted:
            command.finish(event)

    def _finalise(self) -> None:
        if self._status is not _Status.CRASHED:
            self._status = _Status.CLOSED
        self._send.close()
        leftovers = list(self._batch)
        while True:
            try:
                leftovers.append(self._recv.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
        self._recv.close()
        for command in leftovers:
            if not command.done.is_set():
                command.finish(error=self._closed_error("append to"))
        for flight in list(self._flights.values()):
            flight.withdraw(Withdrawal.SESSION_CLOSING, f"session {self.id} {self._status.value}")
        for handle in list(self._answerers):
            handle.close(reason=f"session {self.id} {self._status.value}")
        self._broker._forget(self)
        self._done = True
        if self._finished is not None:
            self._finished.set()

    # -- appends --------------------------------------------------------------------------

    async def _append(
        self,
        build: Builder,
        *,
        internal: bool = False,
        schedule: bool = True,
        shielded: bool = False,
    ) -> Event | None:
        """Queue one conditional append and wait until it is durable (or refused).

        ``internal`` appends (a pending question's decision, a turn end) are still taken while
        the session is closing. ``schedule=False`` lets a caller that yields later anyway skip
        the scheduling pass of the inline path. Cancellation: the append may still land; with
        ``shielded`` the caller's cancellation cannot stop it (nor the wait for it, bounded by
        the broker's ``settle_grace``: past it :class:`AuditAppendError` is raised).
        """
        admitted = self._status is _Status.OPEN or (internal and self._status is _Status.CLOSING)
        if not admitted:
            raise self._closed_error("append to")
        command = _Command(build)
        if self._append_nowait is not None and self._queued == 0 and not self._committing:
            # Inline path (decision 0005): the store acknowledges synchronously, nothing is
            # queued before us and the actor is not mid-commit, so running the actor's commit
            # here, with no await in between, gives exactly the order and preconditions the
            # actor would — without two scheduling passes.
            if not shielded:
                await trio.lowlevel.checkpoint_if_cancelled()
            self._commit_now(command)
            if schedule or shielded:
                # A schedule point that cannot lose the acknowledged result.
                await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            self._queued += 1
            sent = False
            try:
                try:
                    # Room in the inbox: no extra scheduling pass; the wait below checkpoints.
                    self._send.send_nowait(command)
                except trio.WouldBlock:
                    await self._send.send(command)  # backpressure: the inbox is bounded
                sent = True
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise self._closed_error("append to") from None
            finally:
                if not sent:
                    self._queued -= 1
            if shielded:
                # Only this branch awaits anything, so only it pays for the scopes.
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(self._broker.settle_grace) as bound,
                ):
                    await command.done.wait()
                if bound.cancelled_caught:
                    raise AuditAppendError(
                        f"could not append to session {self.id} within settle_grace "
                        f"({self._broker.settle_grace:g}s); the question is left for recovery"
                    )
            else:
                await command.done.wait()
        if command.error is not None:
            raise command.error
        return command.event  # noqa: ASYNC910 (schedule=False: the caller yields later)

    # -- questions in flight --------------------------------------------------------------

    def _admit(self, request_id: str) -> Flight:
        if self._status is not _Status.OPEN:
            raise self._closed_error("ask in", parameter="req.agent")
        if self._turn_ending:
            raise TurnError(OUTSIDE_TURN)
        flight = self._flights[request_id] = Flight()
        return flight

    def _settle(self, request_id: str) -> None:
        self._flights.pop(request_id, None)
        if not self._flights and self._settled is not None:
            self._settled.set()
            self._settled = None

    def _withdraw_all(self, cause: Withdrawal, detail: str) -> None:
        for flight in list(self._flights.values()):
            flight.withdraw(cause, detail)

    async def _wait_settled(self) -> None:  # noqa: ASYNC910 (teardown; callers checkpoint)
        """Wait until no question of this session is in flight (callers bound the wait)."""
        if self._flights:
            if self._settled is None:
                self._settled = trio.Event()
            await self._settled.wait()

    # -- teardown -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the session in the documented order (module docstring). Idempotent.

        Cancellation: the teardown is shielded; each waiting step is bounded by the broker's
        ``settle_grace``, so closing never hangs on a stuck answerer or store.
        """
        with trio.CancelScope(shield=True):
            if self._status is _Status.OPEN:
                self._status = _Status.CLOSING
                with trio.move_on_after(self._broker.settle_grace):  # noqa: ASYNC912
                    self._withdraw_all(Withdrawal.SESSION_CLOSING, f"session {self.id}")
                    await self._wait_settled()
                    if self._state.turn_open:
                        await self._leave_turn(
                            self._state.turn, "closed", Withdrawal.SESSION_CLOSING
                        )
                self._send.close()
            with trio.move_on_after(self._broker.settle_grace):
                await self._wait_done()
            if not self._done:
                # The store did not finish in time: halt the loop; what it had not committed
                # fails closed and stays for recovery.
                self.halt(f"session {self.id} did not close within settle_grace")
                await self._wait_done()
        # A schedule point that never raises Cancelled: this runs in ``finally`` blocks while
        # the body's own exception propagates, and a Cancelled here would replace it.
        await trio.lowlevel.cancel_shielded_checkpoint()

    def halt(self, reason: str) -> None:
        """Stop the session's log loop now (sync). Used by teardown when waiting ran out."""
        self._loop_scope.cancel(reason=reason)

    async def wait_closed(self) -> None:
        """Wait until the session's actor has finished. Cancellation: just stops waiting."""
        await self._wait_done()

    async def _wait_done(self) -> None:
        if self._done:
            await trio.lowlevel.checkpoint()
            return
        if self._finished is None:
            self._finished = trio.Event()
        await self._finished.wait()

    def _closed_error(self, action: str, parameter: str = "session") -> SessionClosedError:
        if self._status is _Status.CRASHED:
            return SessionCrashedError(
                f"{parameter} belongs to session {self.id}, which crashed "
                f"({type(self.crash_cause).__name__}: {self.crash_cause}): cannot {action} it; "
                "open a new session"
            )
        return SessionClosedError(
            f"{parameter} belongs to session {self.id}, which is {self._status.value}: "
            f"cannot {action} it; use an open session"
        )
