"""The session: one open conversation owning its log's order, its projection and its nursery.

The one append path: a task that appends *sequences* its event itself — precondition, audit
rules, projection fold, sequence number, with no await in between, so the order of the log is
the order of these synchronous steps — hands it to the store (``store.submit``) and then awaits
only durability. There is no inbox and no actor hop between the asker and the store's writer.

Teardown order (tested in ``tests/test_session.py``; see ``design/architecture.md``):

1. **stop intake** — the session stops admitting new questions, turns, grants and policy writes;
2. **settle pending questions** — every question in flight is withdrawn (its cancel scope is
   cancelled with reason ``session <id> closing``), settles ``cancelled``, and its
   ``approval/decided`` is appended; bounded by the broker's ``settle_grace``;
3. **end an open turn** — ``turn/end`` with reason kind ``closed``;
4. **cancel the session nursery** — the actor task and the answerer channels living there
   end, and their registrations leave the chain;
5. **unregister** — the broker forgets the session and the store releases it (a shared store
   gives up its lease); :meth:`Session.aclose` returns.
"""

from __future__ import annotations

import functools
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, ClassVar

import attrs
import trio

from ._agent import Agent
from ._answerers import AnswererHandle, AnswerFn
from ._appends import Lifecycle, SessionLog, if_pending
from ._closing import wait_ended_or_stuck
from ._collapse import collapse_single, is_cancellation
from ._errors import AuditAppendError, SessionClosedError, SessionCrashedError, TurnError
from ._events import ApprovalDecided, Event, TurnEnd, TurnEndReason, TurnStart
from ._factory_made import FactoryMade
from ._flight import Withdrawal
from ._host import SessionHost
from ._policy_grants import PolicyAndGrants
from ._projection import EMPTY_STATE, ApprovalState
from ._questions import Questions
from ._vocabulary import Delegation, Outcome
from .rules import RuleSet
from .store import SessionFencedError

__all__ = ["Session"]

log = logging.getLogger("broker.session")


@attrs.define(eq=False, repr=False, init=False)
class Session(PolicyAndGrants, metaclass=FactoryMade):
    """An open conversation with its own durable log, projection and agent.

    Created by :meth:`Broker.start_session`, :meth:`Broker.open_session` or
    :meth:`Broker.delegate`; never construct it yourself. ``parent`` is the delegating session.
    Its policy and grants (what a question reads of them, and how they change) are
    :class:`~broker._policy_grants.PolicyAndGrants`.

    The session owns: the order of its log and its projection (sequenced synchronously by
    each appending task, module docstring); its questions in flight (:meth:`ask`, one flight
    cancel scope each); its scoped answerers; and its nursery (answerer channels, session
    tasks), held open by its actor task and shielded from cancellation around the broker.
    Teardown order: the module docstring (stop intake → settle questions → end the turn →
    cancel the nursery → unregister), run by :meth:`aclose`.
    """

    FACTORY: ClassVar[str] = "broker.open_session(), broker.start_session() or broker.delegate()"

    id: str
    parent: Session | None
    #: The service hosting this session (its broker).
    host: SessionHost
    delegated: bool = False
    #: The parent's id as the store records it (also when the parent is not open here).
    parent_id: str | None = None
    agent: Agent = attrs.field(init=False)
    #: The append path: the order of this session's log and its projection.
    log: SessionLog = attrs.field(init=False)
    #: The request algorithm and the questions in flight.
    questions: Questions = attrs.field(init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    # Created when first needed: an idle session should cost as little memory as possible.
    _finished: trio.Event | None = attrs.field(default=None, init=False)
    _done: bool = attrs.field(default=False, init=False)
    _actor_started: bool = attrs.field(default=False, init=False)
    # The actor task while it waits in _park (None once woken or cancelled).
    _parked: trio.lowlevel.Task | None = attrs.field(default=None, init=False)
    # Answerers scoped to this session's agent, sorted by registration order.
    _answerers: list[AnswererHandle] = attrs.field(factory=list, init=False)
    crash_cause: BaseException | None = attrs.field(default=None, init=False)
    # This session's own rules (PolicyAndGrants.set_session_rules); None: the host's only.
    _own_rules: tuple[RuleSet, RuleSet, RuleSet] | None = attrs.field(default=None, init=False)

    def __init__(
        self,
        id: str,
        parent: Session | None,
        host: SessionHost,
        *,
        delegated: bool = False,
        parent_id: str | None = None,
        state: ApprovalState | None = None,
    ) -> None:
        """*state* is the stored projection on resume (empty for a new session)."""
        self.__attrs_init__(id, parent, host, delegated, parent_id)
        if parent is not None and parent_id is None:
            self.parent_id = parent.id
        self.agent = Agent(self)
        self.log = SessionLog(id, host, self, EMPTY_STATE if state is None else state)
        self.questions = Questions(self, self.log)

    # -- read-only views ------------------------------------------------------------------

    @property
    def rules(self) -> RuleSet:
        """The rules every question of this session is decided by first: the host's, and
        this session's own (:meth:`set_session_rules`), as one set."""
        host_rules = self.host.rules
        own = self._own_rules
        if own is None:
            return host_rules
        mine, seen, combined = own
        if seen is not host_rules:  # the host's set was replaced: combine again, once
            combined = host_rules | mine
            self._own_rules = (mine, host_rules, combined)
        return combined

    def set_session_rules(self, rules: RuleSet | None) -> None:
        """Rules of this session alone (given at run time, e.g. by the MCP gate's file),
        read with the host's from the next question on; ``None`` drops them. Sync."""
        self._own_rules = (
            None if rules is None else (rules, self.host.rules, self.host.rules | rules)
        )

    @property
    def state(self) -> ApprovalState:
        """The projection folded from every event sequenced so far (each append returns only
        once its event is durable; a failed one is rolled back before the next append)."""
        return self.log.state

    @property
    def is_open(self) -> bool:
        """Whether the session is live: admitting questions (not closing, closed or crashed)."""
        return self.log.status is Lifecycle.OPEN

    @property
    def pending(self) -> int:
        """How many questions of this session are between admission and settlement."""
        return len(self.questions)

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

        # Shielded: once turn/start may land, the block below must run its exit (which ends
        # the turn); a cancellation is delivered inside it instead.
        started = await self.log.append(start, shielded=True)
        assert isinstance(started, TurnStart)
        number = started.turn
        kind = "completed"
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            yield number
        except BaseException as exc:
            kind = "cancelled" if is_cancellation(exc) else "error"
            raise
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(self.host.settle_grace):
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
        self.questions.turn_ending = True
        try:
            self.questions.withdraw_all(cause, f"turn {number} of session {self.id} ending")
            await self.questions.wait_settled()

            def end(state: ApprovalState) -> Event | None:
                if state.turn_open and state.turn == number:
                    return TurnEnd(turn=number, reason=TurnEndReason(kind=kind))
                return None  # already ended, e.g. by the session closing

            # Re-read the head first if a write failed: the projection may have folded a
            # decided the store never acknowledged, and only the store's log tells which
            # questions are still open. Then, with no await in between, close those questions
            # and end the turn in ONE submission (all of it lands or none).
            await self.log.ready(internal=True, shielded=True)
            orphans = sorted(self.log.state.pending - self.questions.ids())
            builds = [
                if_pending(ApprovalDecided(id=ask_id, outcome=Outcome.CANCELLED, recovered=True))
                for ask_id in orphans
            ]
            submitted = await self.log.sequence_now(*builds, end)
            if submitted is not None:
                await self.log.durable(submitted, schedule=False, shielded=True)
        except SessionClosedError:
            # The session ended without us: it closed the turn itself, or it crashed and
            # recovery will close it (``interrupted``) when the log is reopened.
            log.debug("turn %d of session %s left to the session's teardown", number, self.id)
        except AuditAppendError as exc:
            # The store failed (or a question is stuck past the grace): the turn stays open in
            # the log, for recovery to end as ``interrupted``; never a pair outside its turn.
            log.warning("turn %d of session %s left open: %s", number, self.id, exc)
        finally:
            self.questions.turn_ending = False

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
        await self.log.append(event)

    # -- tasks and answerer channels owned by the session ---------------------------------

    async def start(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """Start *async_fn* in the session's nursery, like :meth:`trio.Nursery.start`.

        The task lives until it returns or the session closes (its nursery is cancelled at
        step 5 of the teardown). If it raises, the session crashes — the other sessions do not.
        Cancellation: as :meth:`trio.Nursery.start`.
        """
        nursery = self._require_nursery()
        return await nursery.start(async_fn, *args)

    def start_soon(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start *async_fn* in the session's nursery, like :meth:`trio.Nursery.start_soon`."""
        self._require_nursery().start_soon(async_fn, *args)

    async def start_answerer(self, fn: AnswerFn, *, prepend: bool = False) -> AnswererHandle:
        """Register *fn* for this session's agent, held by a task in the session's nursery.

        The answerer lives until ``handle.close()`` or the session closes. Cancellation: as
        :meth:`start`; if cancelled before it started, nothing is registered.
        """
        serve = functools.partial(self.host.serve_answerer, fn, scope=self.agent, prepend=prepend)
        handle: AnswererHandle = await self.start(serve)
        return handle

    def add_answerer(self, fn: AnswerFn, *, prepend: bool = False) -> AnswererHandle:
        """Register *fn* for this session's agent, held by the session itself (no task).

        The answerer lives until ``handle.close()`` or the session closes (step 5 of the
        teardown). Use it when the answerer needs no task of its own — it is the cheapest
        scoped answerer; use :meth:`start_answerer` when its lifetime is a task's.
        """
        if not self.is_open:
            raise self.closed_error("add an answerer to")
        return self.host.register_answerer(fn, self.agent, prepend)

    @property
    def answerer_registry(self) -> list[AnswererHandle]:
        """The list a scoped answerer of this session's agent is registered in: its host
        inserts handles with :func:`broker._answerers.insert_handle`; nothing else writes it."""
        return self._answerers

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None or not self.is_open:
            raise self.closed_error("start a task in")
        return self._nursery

    # -- the actor ------------------------------------------------------------------------

    async def run_actor(  # noqa: ASYNC910 (the actor task; its park is a checkpoint)
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The actor task: ``await host_nursery.start(session.run_actor)``, once, by the host.

        Owns the session nursery (answerer channels and session tasks) and holds it open until
        the session closes (teardown step 4, module docstring), a task of it crashes, or its
        owner halts it. It is not on the append path: appends go from the asking task straight
        to the store. Never raises an :class:`Exception`: a crash is contained to this session
        (``crash_cause``). Cancellation: its nursery is shielded from scopes around the broker;
        :meth:`halt` (or :meth:`aclose`) ends it.
        """
        if self._done:
            # Closed before its actor could start (see aclose): nothing to hold.
            task_status.started()
            await trio.lowlevel.checkpoint()
            return
        self._actor_started = True
        try:
            with collapse_single():
                async with trio.open_nursery() as nursery:
                    # Invariant: the session's tasks end when the session closes (teardown step
                    # 4), when a task of it fails (a crash), or when its owner halts it; never
                    # because a scope around the broker was cancelled, since the teardown that
                    # follows still appends (pending decisions, the turn's end) and answerers
                    # still answer.
                    nursery.cancel_scope.shield = True
                    self._nursery = nursery
                    task_status.started()
                    await self._park()
                    if nursery.child_tasks:  # started after halt() looked: end them too
                        nursery.cancel_scope.cancel(reason=f"session {self.id} closed")
        except Exception as exc:
            # Containment: a crash of a task in this session's nursery ends this session only;
            # the broker's root nursery never sees it.
            self._crash(exc)
        finally:
            self._finalise()

    async def _park(self) -> None:
        """Wait until :meth:`halt` wakes the actor (or its nursery is cancelled: a crash)."""
        self._parked = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._unpark)

    def _unpark(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self._parked = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _crash(self, exc: BaseException) -> None:
        if self.log.status is Lifecycle.CRASHED:
            return
        self.crash_cause = exc
        self.log.status = Lifecycle.CRASHED
        log.error(
            "session %s crashed; its pending questions are left for recovery",
            self.id,
            exc_info=exc,
        )

    def _finalise(self) -> None:
        if self.log.status is not Lifecycle.CRASHED:
            self.log.status = Lifecycle.CLOSED
        self.questions.withdraw_all(
            Withdrawal.SESSION_CLOSING, f"session {self.id} {self.log.status.value}"
        )
        for handle in list(self._answerers):
            handle.close(reason=f"session {self.id} {self.log.status.value}")
        self.host.forget(self.id)
        self._done = True
        if self._finished is not None:
            self._finished.set()

    # -- what a question reads besides policy and grants (_policy_grants): its answerers ----

    def answerer_chain(self) -> list[AnswererHandle]:
        """The answerers consulted for this session's questions, in registration order."""
        lists: list[Sequence[AnswererHandle]] = [self.host.unscoped_answerers]
        if self._answerers:
            lists.append(self._answerers)
        if self.host.delegation is Delegation.INHERIT:
            ancestor = self.parent
            while ancestor is not None and ancestor.is_open:
                if ancestor._answerers:
                    lists.append(ancestor._answerers)
                ancestor = ancestor.parent
        if len(lists) == 1:
            return list(lists[0])
        return sorted(itertools.chain.from_iterable(lists), key=lambda h: h.order)

    # -- teardown -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the session in the documented order (module docstring). Idempotent.

        Cancellation: the teardown is shielded; each waiting step is bounded by the broker's
        ``settle_grace``, so closing never hangs on a stuck answerer or store (a store append
        that ignores cancellation is left running, with an error logged).
        """
        with trio.CancelScope(shield=True):
            if not self._actor_started and not self._done:
                # Its actor never ran (its start failed or is still to come): nothing was
                # appended through it; end here, and a late start returns at once.
                self._finalise()
            if self.log.status is Lifecycle.OPEN:
                self.log.status = Lifecycle.CLOSING
                with trio.move_on_after(self.host.settle_grace):  # noqa: ASYNC912
                    self.questions.withdraw_all(Withdrawal.SESSION_CLOSING, f"session {self.id}")
                    await self.questions.wait_settled()
                    if self.log.state.turn_open:
                        await self._leave_turn(
                            self.log.state.turn, "closed", Withdrawal.SESSION_CLOSING
                        )
                self.halt(f"session {self.id} closed")
            if not await wait_ended_or_stuck(self.host, lambda: self._done, self._wait_done):
                log_stuck(self.id)
            with trio.move_on_after(self.host.settle_grace):
                await self.host.store.release(self.id)
        # A schedule point that never raises Cancelled: this runs in ``finally`` blocks while
        # the body's own exception propagates, and a Cancelled here would replace it.
        await trio.lowlevel.cancel_shielded_checkpoint()

    def halt(self, reason: str) -> None:
        """Stop the session's actor now (sync): its nursery is cancelled (or, when it holds no
        task but the actor, the parked actor is woken) and the session ends. Used by teardown
        (step 4), by the broker's shutdown, and when the store fences it."""
        if self._nursery is not None:
            parked = self._parked
            if parked is not None and not self._nursery.child_tasks:
                # Nothing but the actor to stop: wake it, and it leaves its nursery without a
                # Cancelled raised and caught (a mass close's cost is mostly that).
                self._parked = None
                trio.lowlevel.reschedule(parked)
            else:
                self._nursery.cancel_scope.cancel(reason=reason)
        elif not self._actor_started and not self._done:
            self._finalise()

    def close_at_once(self) -> bool:
        """Begin closing now, when nothing needs waiting for: the session is open, its actor
        runs, no question is in flight and no turn is open, so teardown steps 1-4 come down to
        marking it closing and halting its actor, done here (sync). Returns whether it
        did; the caller then waits for the actor to end and releases the session in the store,
        as :meth:`aclose` would (the broker does both once for every quiet session)."""
        if (
            self.log.status is not Lifecycle.OPEN
            or self._nursery is None
            or self._done
            or len(self.questions)
            or self.log.state.turn_open
        ):
            return False
        self.log.status = Lifecycle.CLOSING
        self.halt(f"session {self.id} closed")
        return True

    @property
    def ended(self) -> bool:
        """Whether the session's actor has finished (closed or crashed, its tasks gone)."""
        return self._done

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

    def require_open(self, parameter: str = "session", action: str = "use") -> None:
        """Raise :class:`SessionClosedError` (naming *parameter* and what could not be done)
        unless the session is open."""
        if self.log.status is not Lifecycle.OPEN:
            raise self.closed_error(action, parameter=parameter)

    def fenced(self, exc: SessionFencedError) -> None:
        """Another process owns the session now: fail closed and end, never write again."""
        self._crash(exc)
        self.halt(f"session {self.id} fenced: {exc}")

    def closed_error(self, action: str, parameter: str = "session") -> SessionClosedError:
        """The error for *action* on this session, which is not open (crashed, closing or
        closed), naming *parameter*."""
        if self.log.status is Lifecycle.CRASHED:
            return SessionCrashedError(
                f"{parameter} belongs to session {self.id}, which crashed "
                f"({type(self.crash_cause).__name__}: {self.crash_cause}): cannot {action} it; "
                "open a new session"
            )
        return SessionClosedError(
            f"{parameter} belongs to session {self.id}, which is {self.log.status.value}: "
            f"cannot {action} it; use an open session"
        )


def log_stuck(session_id: str) -> None:
    """Log that *session_id*'s actor did not end within the grace (:mod:`broker._closing`)."""
    log.error(
        "session %s: its nursery did not stop within settle_grace (a session task that "
        "ignores cancellation?)",
        session_id,
    )
