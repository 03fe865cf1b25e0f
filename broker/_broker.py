"""The approval service: :func:`open_broker`, :func:`serve_broker` and :class:`Broker`."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs
import trio

from ._agent import Agent
from ._answerers import AnswererHandle, AnswerFn, insert_handle, run_waterfall
from ._decision import Decision
from ._errors import BrokerClosedError, SessionClosedError, TurnError
from ._events import ApprovalAsked, ApprovalDecided, ApprovalGrant, ApprovalPolicy, Event
from ._flight import Flight, Withdrawal
from ._ids import new_id
from ._projection import ApprovalState
from ._request import ApprovalRequest
from ._session import Session
from ._signal import is_aborted
from ._texts import DELEGATION_STATEMENT, OUTSIDE_TURN, policy_context
from ._vocabulary import Delegation, Outcome, Policy, parse_policy
from .store._memory import MemoryStore
from .store._sqlite import open_sqlite_store

if TYPE_CHECKING:
    from .store._protocol import EventStore

__all__ = ["Broker", "open_broker", "serve_broker"]

log = logging.getLogger("broker")


def _parse_delegation(value: object) -> Delegation:
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        return Delegation(value)
    except ValueError:
        raise ValueError(
            f'delegation must be one of "pin-never" or "inherit", got {value!r}: '
            'use "pin-never" (the default) unless children may ask their ancestors\' answerers'
        ) from None


def _check_grace(value: float) -> float:
    if not isinstance(value, int | float) or not value > 0:
        raise ValueError(
            f"settle_grace must be a positive number of seconds, got {value!r}: "
            "use the default (5.0) unless teardown must be faster"
        )
    return float(value)


def _check_tool(tool_name: object) -> str:
    if not isinstance(tool_name, str) or not tool_name.strip():
        raise ValueError(
            f"tool_name must be a non-empty string, got {tool_name!r}: "
            "name the tool the grant covers"
        )
    return tool_name


@attrs.define(eq=False, repr=False)
class Broker:
    """The approval service. Obtain one from :func:`open_broker` or :func:`serve_broker`.

    It owns a root nursery in which every session actor runs, the deployment settings, the
    unscoped answerers, and (when it created it) the event store.
    """

    _nursery: trio.Nursery
    store: EventStore
    policy: Policy
    delegation: Delegation
    settle_grace: float
    _sessions: dict[str, Session] = attrs.field(factory=dict, init=False)
    _answerers: list[AnswererHandle] = attrs.field(factory=list, init=False)
    _order: itertools.count[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _closing: bool = attrs.field(default=False, init=False)

    def __repr__(self) -> str:
        return f"<Broker policy={self.policy} sessions={len(self._sessions)}>"

    # -- sessions -------------------------------------------------------------------------

    @property
    def sessions(self) -> tuple[Session, ...]:
        """The sessions currently open (or closing), in opening order."""
        return tuple(self._sessions.values())

    async def start_session(self, parent: Session | None = None) -> Session:
        """Open a session whose actor lives in the broker's nursery until it is closed.

        Close it with :meth:`Session.aclose`, or let the broker close it at shutdown.
        Cancellation: if cancelled before the actor started, no session is open (the store may
        have recorded its id).
        """
        if self._closing:
            raise BrokerClosedError(
                "broker is shutting down: cannot open a session; open a new broker"
            )
        if parent is not None:
            self._check_session(parent, "parent")
        session = Session(id=str(uuid.uuid4()), parent=parent, broker=self)
        await self.store.create_session(session.id, None if parent is None else parent.id)
        await self._nursery.start(session._run)
        self._sessions[session.id] = session
        return session

    @asynccontextmanager
    async def open_session(self, parent: Session | None = None) -> AsyncIterator[Session]:
        """``async with broker.open_session() as session:`` — closed when the block exits.

        Cancellation: the close at the end is shielded and bounded (see :meth:`Session.aclose`).
        """
        session = await self.start_session(parent)
        try:
            yield session
        finally:
            await session.aclose()

    async def delegate(self, parent: Agent) -> Session:
        """Start a delegated child session of *parent*'s session (spec 8.5).

        The parent's effective policy is captured synchronously, before any checkpoint. Under
        ``pin-never`` the child gets ``approval/policy {never, delegation}``; under ``inherit``
        it gets the captured policy with ``source: "delegation"``. Cancellation: a child may be
        left open without its policy event; it is closed with the broker.
        """
        self._check_agent(parent, "parent")
        captured = self.effective_policy(parent.session)
        seeded = Policy.NEVER if self.delegation is Delegation.PIN_NEVER else captured
        child = await self.start_session(parent.session)
        child.delegated = True
        event = ApprovalPolicy(policy=seeded, source="delegation")
        await child._append(lambda _state: event)
        return child

    def _forget(self, session: Session) -> None:
        self._sessions.pop(session.id, None)

    def _check_session(self, session: object, parameter: str) -> Session:
        if not isinstance(session, Session):
            raise TypeError(
                f"{parameter} must be a Session, got {type(session).__name__}: "
                "pass a session from broker.start_session()"
            )
        if session._broker is not self:
            raise ValueError(f"{parameter} belongs to another broker: use a session of this broker")
        if not session.is_open:
            raise session._closed_error("use", parameter=parameter)
        return session

    def _check_agent(self, agent: object, parameter: str) -> Agent:
        if not isinstance(agent, Agent):
            raise TypeError(
                f"{parameter} must be an Agent, got {type(agent).__name__}: pass session.agent"
            )
        self._check_session(agent.session, parameter)
        return agent

    # -- answerers ------------------------------------------------------------------------

    def _register(self, fn: AnswerFn, scope: Agent | None, prepend: bool) -> AnswererHandle:
        if not callable(fn):
            raise TypeError(
                f"fn must be an async callable answer(req, next), got {type(fn).__name__}"
            )
        if scope is not None:
            self._check_agent(scope, "scope")
            registry = scope.session._answerers
        else:
            registry = self._answerers
        number = next(self._order)
        # Invariant: registration order ascending; each prepend goes in front of all before it.
        handle = AnswererHandle(fn, scope, -number if prepend else number, registry)
        insert_handle(registry, handle)
        return handle

    @asynccontextmanager
    async def answerer(
        self, fn: AnswerFn, *, scope: Agent | None = None, prepend: bool = False
    ) -> AsyncIterator[AnswererHandle]:
        """Register *fn* for the duration of the block.

        ``scope=agent`` limits it to that agent's questions (and, under ``inherit`` delegation,
        to its descendants'); ``prepend=True`` puts it in front of every answerer registered
        before it. When the block exits — normally, by cancellation, or by an exception — the
        answerer leaves the chain, questions it was answering fail closed (``unavailable``),
        and the next ask does not see it. Cancellation: leaving is synchronous, never delayed.
        """
        handle = self._register(fn, scope, prepend)
        try:
            await trio.lowlevel.checkpoint()
            yield handle
        finally:
            handle.close(reason="the answerer's block exited")

    async def serve_answerer(
        self,
        fn: AnswerFn,
        *,
        scope: Agent | None = None,
        prepend: bool = False,
        task_status: trio.TaskStatus[AnswererHandle] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """``handle = await nursery.start(broker.serve_answerer, fn)``: an answerer task.

        The answerer lives as long as this task: until it is cancelled or ``handle.close()``
        is called (the task then returns). Cancellation: the answerer leaves the chain at once.
        """
        handle = self._register(fn, scope, prepend)
        try:
            task_status.started(handle)
            await handle.wait_closed()
        finally:
            handle.close(reason="the answerer's task ended")

    def _chain_for(self, req: ApprovalRequest) -> list[AnswererHandle]:
        session: Session | None = req.agent.session
        lists = [self._answerers]
        if session is not None and session._answerers:
            lists.append(session._answerers)
        if self.delegation is Delegation.INHERIT:
            ancestor = session.parent if session is not None else None
            while ancestor is not None and ancestor.is_open:
                if ancestor._answerers:
                    lists.append(ancestor._answerers)
                ancestor = ancestor.parent
        if len(lists) == 1:
            return list(lists[0])
        return sorted(itertools.chain.from_iterable(lists), key=lambda h: h.order)

    # -- the request algorithm (spec 3) ---------------------------------------------------

    async def request(self, req: ApprovalRequest) -> Outcome:
        """Decide whether ``req.agent`` may run ``req.tool_name`` once; see spec section 3.

        The same as :meth:`request_decision`, returning only the outcome. Cancellation: as
        :meth:`request_decision`.
        """
        decision = await self.request_decision(req)
        return decision.outcome

    async def request_decision(self, req: ApprovalRequest) -> Decision:
        """Decide whether ``req.agent`` may run ``req.tool_name`` once; see spec section 3.

        Raises :class:`TurnError` (exact spec text) outside an open turn, appending nothing;
        :class:`AuditAppendError` when either audit event cannot be made durable. Otherwise
        returns exactly one :class:`Outcome` after both ``approval/asked`` and
        ``approval/decided`` are durable.

        Cancellation: the caller's cancellation before the decision withdraws the question; its
        ``approval/decided`` (``cancelled``) is still appended, shielded and bounded by
        ``settle_grace``, and then :class:`trio.Cancelled` propagates. Once the decision is made
        its ``approval/decided`` is appended shielded (same bound) and the decision returned;
        the cancellation is then delivered at the caller's next checkpoint.
        """
        if not isinstance(req, ApprovalRequest):
            raise TypeError(
                f"req must be an ApprovalRequest, got {type(req).__name__}: "
                "build one with ApprovalRequest(agent=..., tool_name=...)"
            )
        self._check_agent(req.agent, "req.agent")
        session = req.agent.session
        request_id = new_id()
        asked = ApprovalAsked(
            id=request_id, tool_name=req.tool_name, call_id=req.call_id, reason=req.reason
        )

        def ask(state: ApprovalState) -> Event:
            if not state.turn_open:
                raise TurnError(OUTSIDE_TURN)
            return asked

        flight = session._admit(request_id)
        try:
            try:
                # The decided append below is this request's schedule point.
                await session._append(ask, schedule=False)
                outcome, remembered, by_policy = await self._decide(req, session, flight)
            except trio.Cancelled:
                with trio.CancelScope(shield=True), trio.move_on_after(self.settle_grace):
                    await self._record_cancelled(session, request_id)
                raise
            decided = ApprovalDecided(
                id=request_id,
                outcome=outcome,
                remembered=remembered,
                policy=Policy.NEVER if by_policy else None,
            )
            # Invariant: once the race is decided, the log records that decision — a caller
            # cancelled from here on gets Cancelled at its next checkpoint, after the return.
            await session._append(lambda _state: decided, internal=True, shielded=True)
            return Decision(
                id=request_id, outcome=outcome, remembered=remembered, by_policy=by_policy
            )
        finally:
            session._settle(request_id)

    async def _decide(
        self, req: ApprovalRequest, session: Session, flight: Flight
    ) -> tuple[Outcome, bool, bool]:
        """Steps 3.1–3.5: (outcome, remembered, decided by the never policy). Never raises
        anything but the caller's own :class:`trio.Cancelled`."""
        signal = req.signal
        if flight.cause is None and is_aborted(signal):
            flight.withdraw(Withdrawal.ABORTED, "before the question was put")
        if flight.cause is not None:
            await trio.lowlevel.checkpoint()
            return _settled_by(flight.cause), False, False
        if self.effective_policy(session) is Policy.NEVER:
            await trio.lowlevel.checkpoint()
            return Outcome.REJECTED, False, True
        if self.is_granted(req.agent, req.tool_name):
            await trio.lowlevel.checkpoint()
            return Outcome.ALLOWED_ONCE, True, False
        chain = self._chain_for(req)
        outcome = Outcome.UNAVAILABLE
        if isinstance(signal, trio.Event):
            # A bare trio.Event has no callbacks: one watcher task per question withdraws the
            # flight when it fires.
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
        self, session: Session, request_id: str
    ) -> None:
        decided = ApprovalDecided(id=request_id, outcome=Outcome.CANCELLED)

        def settle(state: ApprovalState) -> Event | None:
            # The asked append is FIFO before us; if it never landed there is nothing to pair.
            return decided if request_id in state.pending else None

        try:
            await session._append(settle, internal=True)
        except (SessionClosedError, TurnError):
            log.warning(
                "question %s of session %s left unpaired for recovery", request_id, session.id
            )

    # -- policy (spec 5) ------------------------------------------------------------------

    def effective_policy(self, session: Session) -> Policy:
        """The last ``approval/policy`` of *session*, else the deployment default."""
        override = session.state.policy
        return self.policy if override is None else override

    async def set_approval_policy(self, session: Session, policy: Policy | str) -> None:
        """Durably record *policy* for *session* (validated; no notice; outside a turn is fine).

        Cancellation: the event may still land.
        """
        value = parse_policy(policy)
        self._check_session(session, "session")
        event = ApprovalPolicy(policy=value)
        await session._append(lambda _state: event)

    async def set_policy(self, agent: Agent, policy: Policy | str) -> bool:
        """Switch *agent*'s session live. Returns whether the effective policy changed.

        Unchanged: no event, no notice. Changed: ``approval/policy`` is appended and a switch
        notice is queued for the agent's next model step (:meth:`Agent.take_notices`).
        Cancellation: the event may still land, and then the notice is not queued.
        """
        value = parse_policy(policy)
        self._check_agent(agent, "agent")
        previous: list[Policy] = []

        def switch(state: ApprovalState) -> Event | None:
            current = self.policy if state.policy is None else state.policy
            if current is value:
                return None
            previous.append(current)
            return ApprovalPolicy(policy=value)

        event = await agent.session._append(switch)
        if event is None:
            return False
        agent._queue_switch(previous[0], value)
        return True

    def approval_context(self, agent: Agent | None) -> str:
        """The ``approval:policy`` runtime-context text for *agent* now ('' without an agent)."""
        if agent is None:
            return ""
        return policy_context(self.effective_policy(agent.session))

    def approval_context_update(self, agent: Agent | None) -> str | None:
        """The ``approval:policy`` text to append to *agent*'s runtime context, if any.

        Returns the text on the first call for an agent and after each effective change;
        ``None`` while unchanged. An agent-less assembly contributes ``''`` (once).
        """
        if agent is None:
            return ""
        policy = self.effective_policy(agent.session)
        if agent._context_policy is policy:
            return None
        agent._context_policy = policy
        return policy_context(policy)

    def delegation_context_update(self, agent: Agent) -> str | None:
        """The delegation statement for a ``pin-never`` child's first snapshot, else ``None``."""
        session = agent.session
        if not session.delegated or self.delegation is not Delegation.PIN_NEVER:
            return None
        if agent._context_delegated:
            return None
        agent._context_delegated = True
        return DELEGATION_STATEMENT

    # -- grants (spec 6) ------------------------------------------------------------------

    async def grant(self, session: Session, tool_name: str) -> bool:
        """Remember *tool_name* for *session* (and its live descendants). Idempotent.

        Returns whether an ``approval/grant`` was appended (False: it was already granted).
        Allowed outside a turn. Cancellation: the grant may still land.
        """
        tool = _check_tool(tool_name)
        self._check_session(session, "session")
        event = ApprovalGrant(tool_name=tool)

        def add(state: ApprovalState) -> Event | None:
            return None if tool in state.grants else event

        return await session._append(add) is not None

    def is_granted(self, agent: Agent, tool_name: str) -> bool:
        """Whether *agent*'s session or a live ancestor holds a grant for *tool_name*."""
        if not isinstance(agent, Agent):
            raise TypeError(
                f"agent must be an Agent, got {type(agent).__name__}: pass session.agent"
            )
        tool = _check_tool(tool_name)
        session: Session | None = agent.session
        if tool in agent.session.state.grants:
            return True
        session = agent.session.parent
        while session is not None and session.is_open:
            if tool in session.state.grants:
                return True
            session = session.parent
        return False

    # -- shutdown -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop opening sessions, close every session (in parallel), then end the nursery.

        Cancellation: shielded and bounded by ``settle_grace`` per step.
        """
        self._closing = True
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as closers:
                for session in list(self._sessions.values()):
                    closers.start_soon(session.aclose)
            await trio.lowlevel.checkpoint()
        # Last, with no checkpoint after it: open_broker calls this in a `finally` inside the
        # root nursery, where a checkpoint would raise Cancelled and replace (swallow) the
        # exception the block is leaving with.
        self._nursery.cancel_scope.cancel(reason="broker closed")


async def _watch_event(event: trio.Event, flight: Flight) -> None:
    await event.wait()
    flight.withdraw(Withdrawal.ABORTED, "the trio.Event was set")


def _settled_by(cause: Withdrawal) -> Outcome:
    return Outcome.UNAVAILABLE if cause is Withdrawal.ANSWERER_LOST else Outcome.CANCELLED


@asynccontextmanager
async def open_broker(
    *,
    policy: Policy | str = Policy.ASK,
    store: EventStore | str | os.PathLike[str] | None = None,
    delegation: Delegation | str = Delegation.PIN_NEVER,
    settle_grace: float = 5.0,
) -> AsyncIterator[Broker]:
    """Run an approval service for the duration of the block.

    Synopsis::

        async with open_broker(policy="ask") as broker:
            async with broker.open_session() as session, session.turn():
                outcome = await broker.request(
                    ApprovalRequest(agent=session.agent, tool_name="bash")
                )   # Outcome.UNAVAILABLE: no answerer, fail closed

    Settings are validated before anything starts: an unknown *policy* raises the spec's
    ``approval policy must be one of "ask" or "never"``. *store* is the event log: a path opens
    the durable SQLite store there (recovering it if needed; owned and closed by the broker);
    ``None`` a fresh :class:`MemoryStore` (owned; for tests); a store object stays yours.

    Cancellation: on exit (also when cancelled) every session is closed in the documented
    order, shielded and bounded by *settle_grace*, then the root nursery is cancelled.
    """
    default = parse_policy(policy)
    mode = _parse_delegation(delegation)
    grace = _check_grace(settle_grace)
    async with contextlib.AsyncExitStack() as owned:
        the_store: EventStore
        if store is None:
            the_store = MemoryStore()
            owned.push_async_callback(_close_shielded, the_store)
        elif isinstance(store, str | os.PathLike):
            the_store = await owned.enter_async_context(open_sqlite_store(store))
        else:
            the_store = store
        async with trio.open_nursery() as nursery:
            broker = Broker(nursery, the_store, default, mode, grace)
            try:
                yield broker
            finally:
                await broker.aclose()


async def _close_shielded(store: EventStore) -> None:
    with trio.CancelScope(shield=True):
        await store.aclose()


async def serve_broker(
    *,
    policy: Policy | str = Policy.ASK,
    store: EventStore | str | os.PathLike[str] | None = None,
    delegation: Delegation | str = Delegation.PIN_NEVER,
    settle_grace: float = 5.0,
    task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``broker = await nursery.start(serve_broker)``: the service as a task.

    Runs until cancelled; then shuts down as :func:`open_broker` does.
    """
    async with open_broker(
        policy=policy, store=store, delegation=delegation, settle_grace=settle_grace
    ) as broker:
        task_status.started(broker)
        await trio.sleep_forever()
