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

import enum
import functools
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, NamedTuple

import attrs
import trio

from ._agent import Agent
from ._answerers import AnswererHandle, run_waterfall
from ._audit_rules import check
from ._collapse import collapse_single, is_cancellation
from ._decision import Decision
from ._errors import (
    AuditAppendError,
    AuditInvariantError,
    SessionClosedError,
    SessionCrashedError,
    TurnError,
)
from ._events import (
    ApprovalAsked,
    ApprovalDecided,
    ApprovalGrant,
    ApprovalPolicy,
    Event,
    TurnEnd,
    TurnEndReason,
    TurnStart,
)
from ._flight import Flight, Withdrawal
from ._ids import new_id
from ._projection import ApprovalState, fold
from ._request import Asking, asking
from ._signal import is_aborted
from ._texts import OUTSIDE_TURN
from ._vocabulary import Delegation, Outcome, Policy
from .store._protocol import SessionFencedError, StoreError

if TYPE_CHECKING:
    from ._answerers import AnswerFn
    from ._host import SessionHost
    from ._request import ApprovalRequest
    from .store._protocol import Durability

__all__ = ["Session"]

log = logging.getLogger("broker.session")

Builder = Callable[[ApprovalState], Event | None]


class _Submitted(NamedTuple):
    """One submission handed to the store (its first event names it in errors), and the ticket
    that says when all of it is durable."""

    event: Event
    ticket: Durability
    generation: int


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


@attrs.define(eq=False, repr=False)
class Session:
    """An open conversation with its own durable log, projection and agent.

    Created by :meth:`Broker.start_session`, :meth:`Broker.open_session` or
    :meth:`Broker.delegate`; never construct it yourself. ``parent`` is the delegating session.

    The session owns: the order of its log and its projection (sequenced synchronously by
    each appending task, module docstring); its questions in flight (:meth:`ask`, one flight
    cancel scope each); its scoped answerers; and its nursery (answerer channels, session
    tasks), held open by its actor task and shielded from cancellation around the broker.
    Teardown order: the module docstring (stop intake → settle questions → end the turn →
    cancel the nursery → unregister), run by :meth:`aclose`.
    """

    id: str
    parent: Session | None
    _host: SessionHost
    delegated: bool = False
    #: The parent's id as the store records it (also when the parent is not open here).
    parent_id: str | None = attrs.field(default=None)
    agent: Agent = attrs.field(init=False)
    # Given on resume (the stored projection); empty for a new session.
    _state: ApprovalState = attrs.field(factory=ApprovalState)
    _status: _Status = attrs.field(default=_Status.OPEN, init=False)
    _nursery: trio.Nursery | None = attrs.field(default=None, init=False)
    # Questions past admission and not yet settled, by request id.
    _flights: dict[str, Flight] = attrs.field(factory=dict, init=False)
    # Created when first needed: an idle session should cost as little memory as possible.
    _settled: trio.Event | None = attrs.field(default=None, init=False)
    _finished: trio.Event | None = attrs.field(default=None, init=False)
    _done: bool = attrs.field(default=False, init=False)
    _actor_started: bool = attrs.field(default=False, init=False)
    # True while a turn is being left: its questions settle and new ones are refused.
    _turn_ending: bool = attrs.field(default=False, init=False)
    # Answerers scoped to this session's agent, sorted by registration order.
    _answerers: list[AnswererHandle] = attrs.field(factory=list, init=False)
    crash_cause: BaseException | None = attrs.field(default=None, init=False)
    # Bumped when a submitted event failed to become durable: the projection ran ahead of the
    # log, so the next append first re-reads the head from the store (_resync). A failure
    # reported for an older generation was already accounted for.
    _generation: int = attrs.field(default=0, init=False)
    _stale: bool = attrs.field(default=False, init=False)
    _resynced: trio.Event | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        if self.parent is not None and self.parent_id is None:
            self.parent_id = self.parent.id
        self.agent = Agent(self)

    def __repr__(self) -> str:
        return f"<Session {self.id} {self._status.value}>"

    # -- read-only views ------------------------------------------------------------------

    @property
    def host(self) -> SessionHost:
        """The service hosting this session (its broker)."""
        return self._host

    @property
    def state(self) -> ApprovalState:
        """The projection folded from every event sequenced so far (each append returns only
        once its event is durable; a failed one is rolled back before the next append)."""
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

        # Shielded: once turn/start may land, the block below must run its exit (which ends
        # the turn); a cancellation is delivered inside it instead.
        started = await self._append(start, shielded=True)
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
            with trio.CancelScope(shield=True), trio.move_on_after(self._host.settle_grace):
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

            def end(state: ApprovalState) -> Event | None:
                if state.turn_open and state.turn == number:
                    return TurnEnd(turn=number, reason=TurnEndReason(kind=kind))
                return None  # already ended, e.g. by the session closing

            # Re-read the head first if a write failed: the projection may have folded a
            # decided the store never acknowledged, and only the store's log tells which
            # questions are still open. Then, with no await in between, close those questions
            # and end the turn in ONE submission (all of it lands or none).
            await self._ready(internal=True, shielded=True)
            orphans = sorted(self._state.pending - self._flights.keys())
            builds = [
                _if_pending(ApprovalDecided(id=ask_id, outcome=Outcome.CANCELLED, recovered=True))
                for ask_id in orphans
            ]
            submitted = await self._sequence_now(*builds, end)
            if submitted is not None:
                await self._durable(submitted, schedule=False, shielded=True)
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
        return await nursery.start(async_fn, *args)

    def start_soon(self, async_fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start *async_fn* in the session's nursery, like :meth:`trio.Nursery.start_soon`."""
        self._require_nursery().start_soon(async_fn, *args)

    async def start_answerer(self, fn: AnswerFn, *, prepend: bool = False) -> AnswererHandle:
        """Register *fn* for this session's agent, held by a task in the session's nursery.

        The answerer lives until ``handle.close()`` or the session closes. Cancellation: as
        :meth:`start`; if cancelled before it started, nothing is registered.
        """
        serve = functools.partial(self._host.serve_answerer, fn, scope=self.agent, prepend=prepend)
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
        return self._host.register_answerer(fn, self.agent, prepend)

    @property
    def answerer_registry(self) -> list[AnswererHandle]:
        """The list a scoped answerer of this session's agent is registered in: its host
        inserts handles with :func:`broker._answerers.insert_handle`; nothing else writes it."""
        return self._answerers

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None or not self.is_open:
            raise self._closed_error("start a task in")
        return self._nursery

    # -- the actor ------------------------------------------------------------------------

    async def run_actor(  # noqa: ASYNC910 (the actor task; sleep_forever checkpoints)
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """The actor task: ``await host_nursery.start(session.run_actor)``, once, by the host.

        Owns the session nursery (answerer channels and session tasks) and holds it open until
        the session closes (teardown step 4, module docstring), a task of it crashes, or its
        owner halts it. It is not on the append path: appends go from the asking task straight
        to the store. Never raises an :class:`Exception`: a crash is contained to this session
        (``crash_cause``).
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
                    await trio.sleep_forever()
        except Exception as exc:
            # Containment: a crash of a task in this session's nursery ends this session only;
            # the broker's root nursery never sees it.
            self._crash(exc)
        finally:
            self._finalise()

    def _crash(self, exc: BaseException) -> None:
        if self._status is _Status.CRASHED:
            return
        self.crash_cause = exc
        self._status = _Status.CRASHED
        log.error(
            "session %s crashed; its pending questions are left for recovery",
            self.id,
            exc_info=exc,
        )

    def _finalise(self) -> None:
        if self._status is not _Status.CRASHED:
            self._status = _Status.CLOSED
        for flight in list(self._flights.values()):
            flight.withdraw(Withdrawal.SESSION_CLOSING, f"session {self.id} {self._status.value}")
        for handle in list(self._answerers):
            handle.close(reason=f"session {self.id} {self._status.value}")
        self._host.forget(self.id)
        self._done = True
        if self._finished is not None:
            self._finished.set()

    # -- appends: the one append path -----------------------------------------------------

    async def _append(
        self,
        build: Builder,
        *,
        internal: bool = False,
        schedule: bool = True,
        shielded: bool = False,
    ) -> Event | None:
        """Sequence one conditional append, hand it to the store, wait until it is durable.

        *build* sees the projection as of its place in the log and returns the event, None
        (nothing to append), or raises a :class:`BrokerError` precondition. ``internal`` appends
        (a pending question's decision, a turn end) are still taken while the session is
        closing. ``schedule=False`` lets a caller that yields later anyway skip the scheduling
        pass when the store acknowledged at once. Cancellation: checked before sequencing (then
        nothing is appended); once sequenced the event may still land. With ``shielded`` the
        caller's cancellation cannot stop it, and every wait is bounded by the host's
        ``settle_grace``: past it :class:`AuditAppendError` is raised.
        """
        submitted = await self._submit(build, internal=internal, shielded=shielded)
        if submitted is None:
            if shielded:
                await trio.lowlevel.cancel_shielded_checkpoint()
            else:
                await trio.lowlevel.checkpoint()
            return None
        return await self._durable(submitted, schedule=schedule, shielded=shielded)

    # Checkpoints only when it waits or fails: the caller awaits durability next.
    async def _submit(self, *builds: Builder, internal: bool, shielded: bool) -> _Submitted | None:
        """The first half of :meth:`_append`: :meth:`_ready`, then :meth:`_sequence`."""
        await self._ready(internal, shielded)
        return await self._sequence_now(*builds)  # noqa: ASYNC910 (see above)

    async def _ready(self, internal: bool, shielded: bool) -> None:  # noqa: ASYNC910
        """Admission, the caller's cancellation (unless *shielded*), room in the store and a
        fresh head: what must hold before sequencing. Checkpoints only when it waits."""
        self._check_admitted(internal)
        if not shielded:
            await trio.lowlevel.checkpoint_if_cancelled()
        if self._stale or self._host.store.congested:
            await self._make_ready(shielded)
            self._check_admitted(internal)

    async def _sequence_now(self, *builds: Builder) -> _Submitted | None:
        """:meth:`_sequence`; a refusal leaves through a schedule point (house rule 3). The
        caller awaits durability next, which checkpoints."""
        try:
            return self._sequence(*builds)  # noqa: ASYNC910 (see the docstring)
        except Exception:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise

    def _sequence(self, *builds: Builder) -> _Submitted | None:
        """Build, check and fold events and hand them to the store as ONE submission, without
        an await: the log's order is the order of these calls. Each builder sees the projection
        after the events built before it; a builder returning None adds nothing. None when no
        event was built. Raises a build's precondition, :class:`AuditInvariantError`, or
        :class:`AuditAppendError` when the store refused the submission (then nothing of it
        was sequenced)."""
        before = state = self._state
        events: list[Event] = []
        for build in builds:
            event = build(state)
            if event is None:
                continue
            broken = check(state, event)
            if broken is not None:
                # Invariant: nothing that breaks an audit rule is ever handed to the store.
                rule, detail = broken
                raise AuditInvariantError(
                    f"session {self.id} refused {event.TYPE}: rule {rule}: {detail}"
                )
            state = fold(state, event)
            events.append(event)
        if not events:
            return None
        generation = self._generation
        try:
            ticket = self._host.store.submit(self.id, before.events, events, state)
        except Exception as exc:
            self._failed(generation, exc)
            raise self._append_error(events[0], exc) from exc
        refused = ticket.error if ticket.done else None
        if refused is not None:
            # Refused at once: the store took nothing of it (the Durability contract), so the
            # projection stays as it was and nothing need be re-read. Only a fence ends us.
            if isinstance(refused, SessionFencedError):
                self._failed(generation, refused)
            raise self._append_error(events[0], refused) from refused
        self._state = state
        return _Submitted(events[0], ticket, generation)

    async def _durable(self, submitted: _Submitted, *, schedule: bool, shielded: bool) -> Event:
        """Wait until a sequenced submission is durable (see :meth:`_append`)."""
        event, ticket, generation = submitted
        if ticket.done and ticket.error is None:
            if schedule or shielded:
                # A schedule point that cannot lose the acknowledged result.
                await trio.lowlevel.cancel_shielded_checkpoint()
            return event  # noqa: ASYNC910 (schedule=False: the caller yields later)
        try:
            if shielded:
                if not await self._host.shielded_waits.wait(ticket):
                    raise AuditAppendError(
                        f"could not append to session {self.id} within settle_grace "
                        f"({self._host.settle_grace:g}s); the question is left for recovery"
                    )
                if ticket.error is not None:
                    raise ticket.error
            else:
                await ticket.wait()
        except StoreError as exc:
            self._failed(generation, exc)
            raise self._append_error(event, exc) from exc
        return event

    def _check_admitted(self, internal: bool) -> None:
        admitted = self._status is _Status.OPEN or (internal and self._status is _Status.CLOSING)
        if not admitted:
            raise self._closed_error("append to")

    def _append_error(self, event: Event, exc: BaseException) -> AuditAppendError:
        return AuditAppendError(f"could not append {event.TYPE} to session {self.id}: {exc}")

    def _failed(self, generation: int, exc: Exception) -> None:
        """A submitted event did not become durable: the projection is ahead of the log."""
        if isinstance(exc, SessionFencedError):
            # Another process owns the session now: fail closed and end, never write again.
            self._crash(exc)
            self.halt(f"session {self.id} fenced: {exc}")
            return
        if generation == self._generation:
            self._generation += 1
            self._stale = True

    # Called only when the store is congested or the session stale: it then awaits one of them.
    async def _make_ready(self, shielded: bool) -> None:  # noqa: ASYNC910
        """Wait for room in the store and, after a failed write, re-read the head."""
        with trio.CancelScope(shield=shielded) as scope:  # noqa: ASYNC912 (see above)
            if shielded:
                scope.deadline = trio.current_time() + self._host.settle_grace
            store = self._host.store
            while store.congested:
                await store.wait_for_room()
            if self._stale:
                await self._resync()
        if scope.cancelled_caught:
            raise AuditAppendError(
                f"could not append to session {self.id} within settle_grace "
                f"({self._host.settle_grace:g}s): its store stayed congested or unreadable"
            )

    async def _resync(self) -> None:
        """Roll the projection back to the store's acknowledged head (one task does it)."""
        if self._resynced is not None:
            await self._resynced.wait()
            return
        done = self._resynced = trio.Event()
        try:
            head = await self._host.store.head(self.id)
        except StoreError as exc:
            raise AuditAppendError(
                f"could not re-read session {self.id} after a failed append: {exc}"
            ) from exc
        else:
            self._state = head.state
            self._stale = False
        finally:
            self._resynced = None
            done.set()

    # -- the question (spec section 3): the session owns it --------------------------------

    @property
    def effective_policy(self) -> Policy:
        """The last ``approval/policy`` of this session, else the host's default."""
        override = self._state.policy
        return self._host.policy if override is None else override

    def is_granted(self, tool_name: str) -> bool:
        """Whether this session, or a live ancestor, holds a grant for *tool_name*."""
        if tool_name in self._state.grants:
            return True
        ancestor = self.parent
        while ancestor is not None and ancestor.is_open:
            if tool_name in ancestor._state.grants:
                return True
            ancestor = ancestor.parent
        return False

    def _chain(self) -> list[AnswererHandle]:
        """The answerers consulted for this session's questions, in registration order."""
        lists: list[Sequence[AnswererHandle]] = [self._host.unscoped_answerers]
        if self._answerers:
            lists.append(self._answerers)
        if self._host.delegation is Delegation.INHERIT:
            ancestor = self.parent
            while ancestor is not None and ancestor.is_open:
                if ancestor._answerers:
                    lists.append(ancestor._answerers)
                ancestor = ancestor.parent
        if len(lists) == 1:
            return list(lists[0])
        return sorted(itertools.chain.from_iterable(lists), key=lambda h: h.order)

    async def ask(self, req: ApprovalRequest) -> Decision:
        """Decide whether this session's agent may run ``req.tool_name`` once (spec 3).

        ``req.agent`` must be this session's agent (exact identity). Raises
        :class:`TurnError` (exact spec text) outside an open turn, appending nothing;
        :class:`AuditAppendError` when either audit event cannot be made durable. Otherwise
        returns the :class:`Decision` after both ``approval/asked`` and ``approval/decided``
        are durable.

        Cancellation: the caller's cancellation before the decision withdraws the question; its
        ``approval/decided`` (``cancelled``) is still appended, shielded and bounded by
        ``settle_grace``, and then :class:`trio.Cancelled` propagates. Once the decision is made
        its ``approval/decided`` is appended shielded (same bound) and the decision returned;
        the cancellation is then delivered at the caller's next checkpoint. A question that
        steps 3.1–3.3 decide (policy ``never``, a grant, an abort before it was put) is decided
        before any await: its ``decided`` goes to the store with ``asked``, in one submission
        awaited shielded, so a cancellation then gets the decision, not ``cancelled``.
        """
        if req.agent is not self.agent:
            raise ValueError(
                f"req.agent must be the agent of session {self.id}: ask through the session "
                "the agent belongs to (or broker.request, which finds it)"
            )
        request_id = new_id()
        question = Asking(request=req, id=request_id)
        asked = ApprovalAsked(
            id=request_id, tool_name=req.tool_name, call_id=req.call_id, reason=req.reason
        )

        def put(state: ApprovalState) -> Event:
            if not state.turn_open:
                raise TurnError(OUTSIDE_TURN)
            return asked

        flight = self._admit(request_id)
        try:
            try:
                await self._ready(internal=False, shielded=False)
                # Steps 3.1-3.3 need no await: decided here, with nothing between them and
                # sequencing asked (which changes neither the policy nor the grants they read).
                decided_now = self._decide_now(req, flight)
                if decided_now is not None:
                    return await self._put_decided(put, request_id, *decided_now)
                asked_submission = await self._sequence_now(put)
                assert asked_submission is not None  # put always builds
                await self._durable(asked_submission, schedule=False, shielded=False)
                with asking(question):
                    outcome, remembered, by_policy = await self._decide(req, flight)
            except trio.Cancelled:
                with trio.CancelScope(shield=True), trio.move_on_after(self._host.settle_grace):
                    await self._record_cancelled(request_id)
                    if question.hooks:
                        await question.settled(Outcome.CANCELLED)
                raise
            answered = flight.answered
            answered_by = (
                answered[1]
                if answered is not None and answered[0] is outcome and flight.cause is None
                else None
            )
            decided = ApprovalDecided(
                id=request_id,
                outcome=outcome,
                remembered=remembered,
                policy=Policy.NEVER if by_policy else None,
                answered_by=answered_by,
            )
            # Invariant: once the race is decided, the log records that decision — a caller
            # cancelled from here on gets Cancelled at its next checkpoint, after the return.
            await self._append(lambda _state: decided, internal=True, shielded=True)
            if question.hooks:
                with trio.CancelScope(shield=True), trio.move_on_after(self._host.settle_grace):
                    await question.settled(outcome)
            return Decision(
                id=request_id,
                outcome=outcome,
                remembered=remembered,
                by_policy=by_policy,
                answered_by=answered_by,
            )
        finally:
            self._settle(request_id)

    async def _put_decided(
        self, put: Builder, request_id: str, outcome: Outcome, remembered: bool, by_policy: bool
    ) -> Decision:
        """Append ``asked`` and the ``decided`` that steps 3.1–3.3 made, as ONE submission (one
        transaction: both land or neither), and wait once, shielded and bounded by
        ``settle_grace``: the decision was made before any await, so no cancellation can come
        "before the decision", and the log never holds one of the pair without the other. If
        the submission fails, the request raises the error, as for a failed ``asked``.
        Cancellation: cannot interrupt the wait; it is delivered at the caller's next
        checkpoint, after the decision is durable.
        """
        decided = ApprovalDecided(
            id=request_id,
            outcome=outcome,
            remembered=remembered,
            policy=Policy.NEVER if by_policy else None,
        )
        submitted = await self._sequence_now(put, lambda _state: decided)
        assert submitted is not None  # put always builds
        await self._durable(submitted, schedule=True, shielded=True)
        return Decision(id=request_id, outcome=outcome, remembered=remembered, by_policy=by_policy)

    def _decide_now(
        self, req: ApprovalRequest, flight: Flight
    ) -> tuple[Outcome, bool, bool] | None:
        """Steps 3.1–3.3, which consult no answerer: (outcome, remembered, decided by the
        never policy), or None when the waterfall must decide (:meth:`_decide`)."""
        if flight.cause is None and is_aborted(req.signal):
            flight.withdraw(Withdrawal.ABORTED, "before the question was put")
        if flight.cause is not None:
            return _settled_by(flight.cause), False, False
        if self.effective_policy is Policy.NEVER:
            return Outcome.REJECTED, False, True
        if self.is_granted(req.tool_name):
            return Outcome.ALLOWED_ONCE, True, False
        return None

    async def _decide(self, req: ApprovalRequest, flight: Flight) -> tuple[Outcome, bool, bool]:
        """Steps 3.4–3.5, after :meth:`_decide_now` found no answer: (outcome, remembered,
        decided by the never policy). Never raises anything but the caller's own
        :class:`trio.Cancelled`."""
        signal = req.signal
        chain = self._chain()
        outcome = Outcome.UNAVAILABLE
        if isinstance(signal, trio.Event):
            # A bare trio.Event has no callbacks: one watcher task per question withdraws the
            # flight when it fires. Collapsed so the caller's cancellation reaches ask()'s
            # ``except trio.Cancelled`` as itself, not inside a group.
            with collapse_single():
                async with trio.open_nursery() as watchers:
                    watchers.start_soon(_watch_event, signal, flight)
                    with flight.scope:
                        outcome = await run_waterfall(req, chain, flight)
                    watchers.cancel_scope.cancel(reason="question settled")
        else:
            unsubscribe = (
                signal.subscribe(
                    lambda: flight.withdraw(Withdrawal.ABORTED, signal.reason or "abort()")
                )
                if signal is not None
                else None
            )
            try:
                with flight.scope:
                    outcome = await run_waterfall(req, chain, flight)
            finally:
                if unsubscribe is not None:
                    unsubscribe()
        # Invariant: the race is decided here, by the flight alone — once it was withdrawn the
        # answer, if any, is dropped and the first withdrawal's cause settles the question.
        if flight.cause is not None:
            return _settled_by(flight.cause), False, False
        return outcome, False, False

    async def _record_cancelled(  # noqa: ASYNC910 (runs shielded, after a checkpoint)
        self, request_id: str
    ) -> None:
        decided = ApprovalDecided(id=request_id, outcome=Outcome.CANCELLED)
        try:
            # The asked append is FIFO before us; if it never landed there is nothing to pair.
            await self._append(_if_pending(decided), internal=True)
        except (SessionClosedError, TurnError):
            log.warning("question %s of session %s left unpaired for recovery", request_id, self.id)

    # -- policy and grants (spec 5, 6) ------------------------------------------------------

    async def set_approval_policy(self, policy: Policy) -> None:
        """Durably record *policy* (no notice; outside a turn is fine). Cancellation: the event
        may still land."""
        event = ApprovalPolicy(policy=policy)
        await self._append(lambda _state: event)

    async def pin_delegated_policy(self, policy: Policy) -> None:
        """Seed the policy a delegation captured: ``approval/policy {policy, source:
        "delegation"}`` (spec 8.5). Cancellation: the event may still land."""
        self.delegated = True
        event = ApprovalPolicy(policy=policy, source="delegation")
        await self._append(lambda _state: event)

    async def switch_policy(self, policy: Policy) -> bool:
        """Switch live; True when the effective policy changed (then the agent gets a notice).

        Cancellation: the event may still land, and then the notice is not queued.
        """
        previous: list[Policy] = []

        def switch(state: ApprovalState) -> Event | None:
            current = self._host.policy if state.policy is None else state.policy
            if current is policy:
                return None
            previous.append(current)
            return ApprovalPolicy(policy=policy)

        if await self._append(switch) is None:
            return False
        self.agent.queue_switch(previous[0], policy)
        return True

    async def grant(self, tool_name: str) -> bool:
        """Remember *tool_name* here (and for live descendants); False when already granted.

        Allowed outside a turn. Cancellation: the grant may still land.
        """
        event = ApprovalGrant(tool_name=tool_name)

        def add(state: ApprovalState) -> Event | None:
            return None if tool_name in state.grants else event

        return await self._append(add) is not None

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
        ``settle_grace``, so closing never hangs on a stuck answerer or store (a store append
        that ignores cancellation is left running, with an error logged).
        """
        with trio.CancelScope(shield=True):
            if not self._actor_started and not self._done:
                # Its actor never ran (its start failed or is still to come): nothing was
                # appended through it; end here, and a late start returns at once.
                self._finalise()
            if self._status is _Status.OPEN:
                self._status = _Status.CLOSING
                with trio.move_on_after(self._host.settle_grace):  # noqa: ASYNC912
                    self._withdraw_all(Withdrawal.SESSION_CLOSING, f"session {self.id}")
                    await self._wait_settled()
                    if self._state.turn_open:
                        await self._leave_turn(
                            self._state.turn, "closed", Withdrawal.SESSION_CLOSING
                        )
                self.halt(f"session {self.id} closed")
            with trio.move_on_after(self._host.settle_grace):
                await self._wait_done()
            if not self._done:
                log.error(
                    "session %s: its nursery did not stop within settle_grace (a session task "
                    "that ignores cancellation?)",
                    self.id,
                )
            with trio.move_on_after(self._host.settle_grace):
                await self._host.store.release(self.id)
        # A schedule point that never raises Cancelled: this runs in ``finally`` blocks while
        # the body's own exception propagates, and a Cancelled here would replace it.
        await trio.lowlevel.cancel_shielded_checkpoint()

    def halt(self, reason: str) -> None:
        """Stop the session's actor now (sync): its nursery is cancelled and the session ends.
        Used by teardown (step 4), by the broker's shutdown, and when the store fences it."""
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel(reason=reason)
        elif not self._actor_started and not self._done:
            self._finalise()

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

    def require_open(self, parameter: str = "session") -> None:
        """Raise :class:`SessionClosedError` (naming *parameter*) unless the session is open."""
        if not self.is_open:
            raise self._closed_error("use", parameter=parameter)

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


async def _watch_event(event: trio.Event, flight: Flight) -> None:
    await event.wait()
    flight.withdraw(Withdrawal.ABORTED, "the trio.Event was set")


def _settled_by(cause: Withdrawal) -> Outcome:
    return Outcome.UNAVAILABLE if cause is Withdrawal.ANSWERER_LOST else Outcome.CANCELLED
