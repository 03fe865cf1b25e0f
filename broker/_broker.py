"""The approval service: :func:`open_broker`, :func:`serve_broker` and :class:`Broker`."""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import logging
import os
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from contextlib import asynccontextmanager
from typing import Any, ClassVar, TypeVar

import attrs
import trio

from ._agent import Agent
from ._answerers import AnswererHandle, AnswerFn, insert_handle
from ._appends import Lifecycle
from ._bounded_waits import BoundedWaits
from ._closing import wait_ended_or_stuck
from ._collapse import collapse_single
from ._context import APPROVAL_DELEGATION, APPROVAL_POLICY
from ._errors import BrokerClosedError, ResumeError
from ._factory_made import FactoryMade
from ._grants import GrantScope, always_offer, always_proposal, new_grant
from ._projection import Grant
from ._questions import Decision
from ._remote import RemoteAnswerer
from ._request import ApprovalRequest
from ._resume import check_resume_id, take_for_resume
from ._session import Session, log_stuck
from ._texts import DELEGATION_STATEMENT, policy_context
from ._vocabulary import Delegation, Outcome, Policy, parse_policy
from .rules import Rule, RuleSet, remember_in_file
from .store import (
    AnswerBoard,
    Answered,
    EventStore,
    GrantRevocation,
    HasAnswerBoard,
    MemoryBoard,
    MemoryStore,
    PendingQuestion,
    RemoteAnswer,
    answer_question,
    check_answer,
    open_store,
    parse_store_url,
)

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


_F = TypeVar("_F", bound=Callable[..., Any])
#: How many tasks release the quiet sessions of a close in the store, side by side: a durable
#: store's writer takes each round of them as one group.
_RELEASERS = 64


def _agent_keyword_deprecated(method: _F) -> _F:
    """Keep the old spelling ``method(agent=...)`` for one release: the first parameter was
    renamed ``session`` (it takes a session or an agent). Warns ``DeprecationWarning``."""

    def moved(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if "agent" not in kwargs:
            return args
        warnings.warn(
            f"Broker.{method.__name__}(agent=...) is deprecated and goes in the next release: "
            f"pass the agent (or its session) first, broker.{method.__name__}(agent, ...)",
            DeprecationWarning,
            stacklevel=3,
        )
        return (kwargs.pop("agent"), *args)

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def call_async(self: Broker, *args: Any, **kwargs: Any) -> Any:
            return await method(self, *moved(args, kwargs), **kwargs)

        return call_async  # type: ignore[return-value]

    @functools.wraps(method)
    def call(self: Broker, *args: Any, **kwargs: Any) -> Any:
        return method(self, *moved(args, kwargs), **kwargs)

    return call  # type: ignore[return-value]


@attrs.define(eq=False, repr=False)
class Broker(metaclass=FactoryMade):
    """The approval service. Obtain one from :func:`open_broker` or :func:`serve_broker`
    (``Broker(...)`` raises :class:`TypeError` saying so).

    Owns: the root nursery in which every session actor runs; the session registry (every
    session whose actor may run, from before its first await); the deployment settings; the
    unscoped answerers; and, when it created it, the event store. It hosts sessions
    (:class:`~broker._host.SessionHost`); each session owns its own questions.

    Teardown order (:meth:`aclose`, run by ``open_broker``'s exit and ``serve_broker``'s
    cancellation): stop opening sessions → close every registered session concurrently (each in
    the session's order), again for any that registered meanwhile → halt any actor still
    running → cancel the root nursery → close the store if the broker created it.
    """

    FACTORY: ClassVar[str] = "open_broker() or serve_broker()"

    _nursery: trio.Nursery
    store: EventStore
    policy: Policy
    delegation: Delegation
    settle_grace: float
    #: Host interface: the deployment's rules, read by every question (immutable; replace
    #: the whole set with :meth:`set_rules`).
    rules: RuleSet = attrs.field(factory=RuleSet)
    #: The project rules file an answer "always, for the project" appends its rule to (None:
    #: that scope is not offered); set by ``open_broker(project_rules=...)``.
    project_rules: str | None = None
    _sessions: dict[str, Session] = attrs.field(factory=dict, init=False)
    #: Host interface: the answerers that see every question, in registration order (an
    #: attribute, read on every question; written only by :meth:`register_answerer`).
    unscoped_answerers: list[AnswererHandle] = attrs.field(factory=list, init=False)
    _order: Iterator[int] = attrs.field(factory=lambda: itertools.count(1), init=False)
    _closing: bool = attrs.field(default=False, init=False)
    #: Sessions ended so far (:attr:`SessionHost.sessions_ended`): the progress of a close.
    sessions_ended: int = attrs.field(default=0, init=False)
    # The answer board (see the board property), made on first use.
    _board: AnswerBoard | None = attrs.field(default=None, init=False)
    # Ids being resumed (between the open check and registration).
    _resuming: set[str] = attrs.field(factory=set, init=False)
    #: Host interface: the bounded shielded waits (``settle_grace``) of every session; its
    #: timer runs in the root nursery. An attribute: read on every durable decision.
    shielded_waits: BoundedWaits = attrs.field(init=False)
    # Wall-clock seconds at trio's time zero: now_ms() is trio's clock on the wall clock.
    _epoch: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self.shielded_waits = BoundedWaits(grace=self.settle_grace)
        self._epoch = time.time() - trio.current_time()

    def revoked_elsewhere(self, grant_id: str) -> Awaitable[GrantRevocation | None] | None:
        """Host interface: the store's board says whether *grant_id* was revoked from another
        process; None on a store no other process shares (then :meth:`revoke` is the only
        way, and it records the revocation in the log at once)."""
        if not isinstance(self.store, HasAnswerBoard):
            return None
        return self.board.grant_revocation(grant_id)

    def now_ms(self) -> int:
        """Host interface: wall-clock ms since the epoch, advanced by trio's clock (a test's
        ``autojump_clock`` moves it). What grants' expiries are judged by."""
        return int((trio.current_time() + self._epoch) * 1000)

    def __repr__(self) -> str:
        return f"<Broker policy={self.policy} sessions={len(self._sessions)}>"

    # -- sessions -------------------------------------------------------------------------

    @property
    def sessions(self) -> tuple[Session, ...]:
        """The sessions currently open (or closing), in opening order."""
        return tuple(self._sessions.values())

    async def start_session(
        self,
        parent: Session | None = None,
        *,
        resume: str | None = None,
        session_id: str | None = None,
    ) -> Session:
        """Open a session whose actor lives in the broker's nursery until it is closed.

        ``session_id`` names a new session (a UUID string, e.g. ``uuid5`` of an outside
        agent's own session id, so a service maps that agent's sessions onto the log) instead
        of a fresh ``uuid4``; the store refuses an id it holds already (resume that one).

        ``resume=SESSION_ID`` reopens a session the store holds instead of minting a new one:
        the same id and parent link, its policy override, grants and delegation pin restored
        from the store's projection (checkpoint plus tail), no turn open, new events continuing
        its log (and its hash chain). It raises :class:`ResumeError`, appending nothing, for an
        id the store does not hold, a session already open in this broker, or one whose log
        still has an open turn or undecided questions (it was not closed cleanly and has not
        been recovered). Its parent, if open in this broker, is linked as ``session.parent``
        (grants then flow from it); ``session.parent_id`` always names it.

        Close it with :meth:`Session.aclose`, or let the broker close it at shutdown.
        Cancellation: if cancelled before the actor started, no session is open (the store may
        have recorded a new session's id).
        """
        if self._closing:
            raise BrokerClosedError(
                "broker is shutting down: cannot open a session; open a new broker"
            )
        if resume is not None:
            if parent is not None:
                raise ValueError(
                    "parent must not be given with resume: a resumed session keeps the parent "
                    "its store records; pass resume=ID alone"
                )
            return await self._resume(resume)
        if parent is not None:
            self._check_session(parent, "parent")
        if session_id is not None:
            session_id = _check_new_id(session_id)
            if session_id in self._sessions or session_id in self._resuming:
                raise ValueError(
                    f"session_id {session_id!r} is open in this broker already: use its Session"
                )
        new_id = session_id if session_id is not None else str(uuid.uuid4())
        session = Session._create(id=new_id, parent=parent, host=self)
        return await self._launch(session, create=True)

    async def _launch(self, session: Session, *, create: bool) -> Session:
        """Register *session* (synchronously, so shutdown sees it), then start its actor.

        Invariant: every session whose actor may run is in ``_sessions`` from before its first
        await, so :meth:`aclose` closes it — an actor the broker does not know would keep the
        root nursery open forever (its log loop is shielded).
        """
        self._sessions[session.id] = session
        try:
            if create:
                parent_id = session.parent.id if session.parent is not None else None
                await self.store.create_session(session.id, parent_id)
            await self._nursery.start(session.run_actor)
        except RuntimeError as exc:
            self._unregister(session)
            if self._closing:  # the root nursery has closed to new tasks
                raise BrokerClosedError(
                    "broker is shutting down: cannot open a session; open a new broker"
                ) from exc
            raise
        except BaseException:
            self._unregister(session)
            raise
        if self._closing:
            # The broker began shutting down while this session started: close it here.
            await session.aclose()
            raise BrokerClosedError(
                "broker is shutting down: cannot open a session; open a new broker"
            )
        return session

    async def _resume(self, resume: object) -> Session:
        session_id = check_resume_id(resume)
        where = _describe_store(self.store)
        if session_id in self._sessions or session_id in self._resuming:
            raise ResumeError(
                f"session {session_id!r} is already open in this broker: use its Session "
                "object, or close it before resuming it"
            )
        # Invariant: reserved from here to its registration, so two concurrent resumes of one
        # id cannot both open it.
        self._resuming.add(session_id)
        try:
            return await self._resume_reserved(session_id, where)
        finally:
            self._resuming.discard(session_id)

    async def _resume_reserved(self, session_id: str, where: str) -> Session:
        record, state = await take_for_resume(self.store, session_id, where)
        live_parent = self._sessions.get(record.parent_id) if record.parent_id else None
        session = Session._create(
            id=session_id,
            parent=live_parent if live_parent is not None and live_parent.is_open else None,
            host=self,
            delegated=state.delegated,
            parent_id=record.parent_id,
            state=state,
        )
        return await self._launch(session, create=False)

    @asynccontextmanager
    async def open_session(
        self,
        parent: Session | None = None,
        *,
        resume: str | None = None,
        session_id: str | None = None,
    ) -> AsyncIterator[Session]:
        """``async with broker.open_session() as session:`` — closed when the block exits.

        ``resume=SESSION_ID`` reopens a stored session, ``session_id=`` names a new one (see
        :meth:`start_session`). The block's own exception leaves as itself. Cancellation: the
        close at the end is shielded and bounded (see :meth:`Session.aclose`).
        """
        session = await self.start_session(parent, resume=resume, session_id=session_id)
        try:
            yield session
        finally:
            await session.aclose()

    async def delegate(self, parent: Session | Agent) -> Session:
        """Start a delegated child session of *parent*'s session (contract §8.5).

        The parent's effective policy is captured synchronously, before any checkpoint. Under
        ``pin-never`` the child gets ``approval/policy {never, delegation}``; under ``inherit``
        it gets the captured policy with ``source: "delegation"``. Cancellation: a child may be
        left open without its policy event; it is closed with the broker.
        """
        parent_session = self._check_session(parent, "parent")
        captured = parent_session.effective_policy
        seeded = Policy.NEVER if self.delegation is Delegation.PIN_NEVER else captured
        child = await self.start_session(parent_session)
        await child.pin_delegated_policy(seeded)
        return child

    def _unregister(self, session: Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]

    def forget(self, session_id: str) -> None:
        """Host interface: the session *session_id* ended; drop it from the registry (sync)."""
        self._sessions.pop(session_id, None)
        self.sessions_ended += 1

    def _check_session(self, session: object, parameter: str) -> Session:
        """The open session of this broker that *session* names: a ``Session``, or an
        ``Agent`` (its session). Every method that acts on a session takes either."""
        found = self._session_of(session, parameter)
        found.require_open(parameter)
        return found

    def _check_agent(self, agent: object, parameter: str) -> Session:
        """The open session of this broker that *agent* belongs to (where only an agent will
        do: a request's ``agent``, an answerer's ``scope``)."""
        if not isinstance(agent, Agent):
            raise TypeError(
                f"{parameter} must be an Agent, got {type(agent).__name__}: pass session.agent"
            )
        return self._check_session(agent.session, parameter)

    def _session_of(self, session: object, parameter: str = "session") -> Session:
        """The ``Session`` *session* names (a session or an agent's), open or not, of this
        broker: what the sync readers use."""
        if isinstance(session, Agent):
            session = session.session
        if not isinstance(session, Session):
            raise TypeError(
                f"{parameter} must be a Session or an Agent, got {type(session).__name__}: "
                "pass a session from broker.start_session(), or its agent"
            )
        if session.host is not self:
            raise ValueError(f"{parameter} belongs to another broker: use a session of this broker")
        return session

    # -- answerers ------------------------------------------------------------------------

    def register_answerer(self, fn: AnswerFn, scope: Agent | None, prepend: bool) -> AnswererHandle:
        """Host interface: register *fn* (in *scope*'s session when given); returns its handle.

        The caller holds the handle's lifetime (``answerer``, ``serve_answerer``,
        ``Session.add_answerer``).
        """
        if not callable(fn):
            raise TypeError(
                f"fn must be an async callable answer(req, next), got {type(fn).__name__}"
            )
        if scope is not None:
            registry = self._check_agent(scope, "scope").answerer_registry
        else:
            registry = self.unscoped_answerers
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
        handle = self.register_answerer(fn, scope, prepend)
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
        handle = self.register_answerer(fn, scope, prepend)
        try:
            task_status.started(handle)
            await handle.wait_closed()
        finally:
            handle.close(reason="the answerer's task ended")

    # -- answers from elsewhere (the answer board) ------------------------------------------

    @property
    def board(self) -> AnswerBoard:
        """The answer board questions wait on for answers from elsewhere: the store's own when
        it has one (shared by every process on that store), else one of this process."""
        if self._board is None:
            self._board = (
                self.store.answer_board() if isinstance(self.store, HasAnswerBoard) else None
            ) or MemoryBoard()
        return self._board

    def remote_answerer(
        self,
        *,
        deadline: float | None = None,
        allow_always: bool = False,
        always_for: float | None = None,
    ) -> RemoteAnswerer:
        """An answerer that waits for an answer given on :attr:`board` (``broker answer``,
        :meth:`answer`, an inbox); register it like any other, usually last. A question
        nobody answers within *deadline* seconds resolves ``unavailable``. With
        *allow_always* its questions offer "always allow" where it can be honoured: a grant on
        the asking session of the rule the question shows (``always_rule``: a command's
        program and subcommand, or the tool itself), then ``allowed-once``; the grant lasts
        *always_for* seconds (None: as long as the session)."""

        async def remember(req: ApprovalRequest, answer: RemoteAnswer) -> object:
            if always_offer(req) is None:  # not offered: nothing to remember
                await trio.lowlevel.checkpoint()
                return None
            command = always_proposal(req)  # None: the tool itself (what was offered)
            if answer.project:
                scope: GrantScope = "project"
                lasts = None
            else:
                scope = "session"
                lasts = always_for if answer.always_for_ms is None else answer.always_for_ms / 1000
            return await self.remember(
                req.agent,
                req.tool_name,
                command=command,
                by=answer.by,
                expires_in=lasts,
                scope=scope,
            )

        return RemoteAnswerer(
            board=self.board,
            deadline=deadline,
            grant=remember if allow_always else None,
            project_rules=self.project_rules if allow_always else None,
        )

    async def answer(
        self,
        question_id: str,
        outcome: Outcome | str,
        *,
        by: str | None = None,
        always: bool = False,
        always_for: float | None = None,
        project: bool = False,
        message: str | None = None,
    ) -> Answered:
        """Answer a question waiting on :attr:`board`: ``allowed-once`` or ``rejected``, as
        *by* (recorded as given by the program itself: ``in-process``).

        Returns what it did (:class:`~broker.store.Answered`): ``decided`` is the question's
        answer once decided; for a question whose rule needs several approvers (``quorum``)
        an allow before the last is recorded and counted (``progress()``: "1 of 2
        approvals, by alice") and ``decided`` is None. The first deciding answer wins;
        :class:`~broker.store.AnswerRefusedError` names what was recorded when the question
        was answered already or is settled (abort, deadline, a local answerer),
        :class:`~broker.store.UnknownQuestionError` an id never put up,
        :class:`~broker.store.NotAnApproverError` *by* not among its approvers (or approving
        twice). The asking broker still decides: a question withdrawn before it read the
        answer settles ``cancelled``. *always* (with ``allowed-once``) also remembers the rule
        the question shows (``always_rule``) on the asking session, where the question offers
        it: for *always_for* seconds (None: the asker's default), or with *project* in the
        project's rules file as well (where the question names one: ``project_rules``).
        *message* is what you say with it: recorded, and given to the agent with the outcome.
        Cancellation: the answer may or may not have been stored.
        """
        value = check_answer(outcome, by)
        return await answer_question(
            self.board,
            question_id,
            value,
            by,
            how="in-process",
            always=always,
            always_for=always_for,
            project=project,
            message=message,
        )

    async def pending(self, session_id: str | None = None) -> list[PendingQuestion]:
        """The questions waiting on :attr:`board` (of *session_id*, if given), oldest first.
        Cancellation: nothing changes."""
        return await self.board.pending(session_id)

    # -- the request algorithm (contract §3): a thin delegate to the session ---------------------

    async def request(self, req: ApprovalRequest) -> Outcome:
        """Decide whether ``req.agent`` may run ``req.tool_name`` once; see contract §3.

        The same as :meth:`request_decision`, returning only the outcome. Cancellation: as
        :meth:`request_decision`.
        """
        return await self._asked_session(req).questions.outcome(req)

    async def request_decision(self, req: ApprovalRequest) -> Decision:
        """Check that ``req.agent`` is an agent of this broker's open sessions, then ask its
        session: :meth:`Questions.ask` (the algorithm, its errors and its cancellation
        semantics)."""
        return await self._asked_session(req).questions.ask(req)

    def _asked_session(self, req: object) -> Session:
        # The usual case in a few type tests (every question passes here); anything else takes
        # the checks below, which raise the exact errors.
        if type(req) is ApprovalRequest:
            session = req.agent.session if type(req.agent) is Agent else None
            if (
                type(session) is Session
                and session.host is self
                and session.log.status is Lifecycle.OPEN
            ):
                return session
        if not isinstance(req, ApprovalRequest):
            raise TypeError(
                f"req must be an ApprovalRequest, got {type(req).__name__}: "
                "build one with ApprovalRequest(agent=..., tool_name=...)"
            )
        return self._check_agent(req.agent, "req.agent")

    # -- policy (contract §5) ------------------------------------------------------------------

    def effective_policy(self, session: Session | Agent) -> Policy:
        """The last ``approval/policy`` of *session* (or an agent's), else the deployment
        default. Sync; the session may be closed."""
        return self._session_of(session).effective_policy

    async def set_approval_policy(self, session: Session | Agent, policy: Policy | str) -> None:
        """Durably record *policy* for *session* (validated; no notice; outside a turn is fine).

        Cancellation: the event may still land.
        """
        value = parse_policy(policy)
        await self._check_session(session, "session").set_approval_policy(value)

    @_agent_keyword_deprecated
    async def set_policy(self, session: Session | Agent, policy: Policy | str) -> bool:
        """Switch *session* (or an agent's) live. Returns whether the effective policy changed.

        Unchanged: no event, no notice. Changed: ``approval/policy`` is appended and a switch
        notice is queued for the agent's next model step (:meth:`Agent.take_notices`).
        Cancellation: the event may still land, and then the notice is not queued.
        """
        value = parse_policy(policy)
        return await self._check_session(session, "session").switch_policy(value)

    def approval_context(self, agent: Agent | None) -> str:
        """The ``approval:policy`` runtime-context text for *agent* now ('' without an agent)."""
        if agent is None:
            return ""
        return policy_context(self.effective_policy(self._session_of(agent)))

    def approval_context_update(self, agent: Agent | None) -> str | None:
        """The ``approval:policy`` text to append to *agent*'s runtime context, if any.

        Returns the text on the first call for an agent and after each effective change;
        ``None`` while unchanged (the agent's :class:`ContextLedger` remembers). An agent-less
        assembly contributes ``''``.
        """
        if agent is None:
            return ""
        return agent.context.offer(APPROVAL_POLICY, self.approval_context(agent))

    def delegation_context_update(self, agent: Agent) -> str | None:
        """The delegation statement for a ``pin-never`` child's first snapshot, else ``None``."""
        if not self._session_of(agent).delegated or self.delegation is not Delegation.PIN_NEVER:
            return None
        return agent.context.offer(APPROVAL_DELEGATION, DELEGATION_STATEMENT)

    # -- grants (contract §6) ------------------------------------------------------------------

    async def grant(self, session: Session | Agent, tool_name: str) -> bool:
        """Remember *tool_name* for *session* (and its live descendants). Idempotent.

        *session* is a ``Session`` of this broker, or its ``Agent``.

        Returns whether an ``approval/grant`` was appended (False: it was already granted).
        Allowed outside a turn. Cancellation: the grant may still land.
        """
        tool = _check_tool(tool_name)
        return await self._check_session(session, "session").grant(tool)

    async def remember(
        self,
        session: Session | Agent,
        tool_name: str,
        *,
        command: str | None = None,
        by: str | None = None,
        expires_in: float | None = None,
        scope: GrantScope = "session",
    ) -> Grant:
        """Grant *tool_name* on *session* (and its live descendants) — only commands that start
        with *command* when given (an allow rule of the session layer), the whole tool when
        not — until *expires_in* seconds pass (None: as long as the session), recorded as
        given *by*. Returns the grant; its id revokes it (:meth:`revoke`). Allowed outside a
        turn.

        With ``scope="project"`` the rule is also appended to :attr:`project_rules` (an allow
        rule of the project layer, loaded back before the file is replaced) and added to
        :attr:`rules`, so every session of this broker, and every later one that loads the
        file, is covered; such a grant has no expiry, and revoking it ends it for *session*
        only (the rule stays in the file until someone removes it). ``ValueError`` when no
        project rules file is set. Cancellation: the file is written to the end; the grant may
        still land.
        """
        target = self._check_session(session, "session")
        if scope not in ("session", "project"):
            raise ValueError(
                f'scope must be "session" or "project", got {scope!r}: "project" also writes '
                "the rule to the project rules file"
            )
        rule_file = None
        if scope == "project":
            if self.project_rules is None:
                raise ValueError(
                    'scope="project" needs a project rules file: open the broker with '
                    "open_broker(project_rules=PATH)"
                )
            if expires_in is not None:
                raise ValueError(
                    'expires_in must be None with scope="project": a rule in a file has no '
                    "end; remember for the session to give one"
                )
            rule_file = self.project_rules
        grant = new_grant(
            tool_name,
            command=command,
            by=by,
            now_ms=self.now_ms(),
            expires_in=expires_in,
            rule_file=rule_file,
        )
        if rule_file is not None:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime((grant.at_ms or 0) / 1000))
            rule = await trio.to_thread.run_sync(
                functools.partial(
                    remember_in_file, rule_file, tool=tool_name, command=command, by=by, at=stamp
                )
            )
            self.rules = self.rules | RuleSet((rule,))
        await target.add_grant(grant)
        return grant

    async def revoke(
        self, session: Session | Agent, grant_id: str, *, by: str | None = None
    ) -> bool:
        """Take back the grant *grant_id* of *session* (for the seed's id-less grant: the
        tool's name): no question decided after this returns is covered by it. Returns
        whether a grant was revoked (False: no such grant, or revoked already). Allowed outside
        a turn. Cancellation: the revocation may still land."""
        return await self._check_session(session, "session").revoke(grant_id, by)

    def grants(self, session: Session | Agent) -> list[Grant]:
        """The grants *session* holds now (not its ancestors'), oldest first; the seed's
        id-less grants are listed with their tool's name as id. Expired grants are listed
        until a question records their expiry (see :meth:`Grant.expired`)."""
        state = self._check_session(session, "session").state
        legacy = [Grant(id=name, tool_name=name) for name in sorted(state.grants)]
        return [*legacy, *state.granted]

    def set_rules(self, rules: RuleSet | Iterable[Rule]) -> None:
        """Replace the deployment's rules; questions decided from now on read the new set
        (one already past its rules is not affected). Sync: never blocks."""
        self.rules = _check_rules(rules)

    @_agent_keyword_deprecated
    def is_granted(self, session: Session | Agent, tool_name: str) -> bool:
        """Whether *session* (or an agent's) or a live ancestor holds a grant for
        *tool_name*. Sync; the session may be closed."""
        return self._session_of(session).is_granted(_check_tool(tool_name))

    # -- shutdown -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop opening sessions, close every session (in parallel), close the answer board's
        connections, then end the nursery. A quiet session (no question in flight, no turn
        open) is halted at once and waited for by one task with all the others like it; the
        rest close one by one (``design/architecture.md``, teardown order).

        Cancellation: shielded and bounded by ``settle_grace`` per step; it never raises
        :class:`trio.Cancelled` itself. Invariant: no checkpoint follows the cancel of the root
        nursery — the task running this may be inside that nursery (the ``open_broker`` block),
        and a ``Cancelled`` raised here would replace the block's own exception and then be
        absorbed by the nursery, so the exception would vanish.
        """
        self._closing = True
        await trio.lowlevel.cancel_shielded_checkpoint()
        with trio.CancelScope(shield=True):  # noqa: ASYNC912 (bounded: each close is)
            closing: set[str] = set()
            # Sessions registered while others close (a start in flight) are closed too.
            while fresh := [s for s in self._sessions.values() if s.id not in closing]:
                closing.update(s.id for s in fresh)
                # A quiet session (no question in flight, no turn open) has nothing to wait
                # for but its actor: all of them are halted here and waited for by one task,
                # so a mass close costs what opening them did. The others close one by one.
                quiet = [s for s in fresh if s.close_at_once()]
                halted = {s.id for s in quiet}
                async with trio.open_nursery() as closers:
                    for session in fresh:
                        if session.id not in halted:
                            closers.start_soon(session.aclose)
                    if quiet:
                        closers.start_soon(self._finish_quiet_closes, quiet)
            # Backstop: an actor still running now would hold the root nursery open forever.
            for session in list(self._sessions.values()):
                session.halt("broker closed")
            if self._board is not None:
                with trio.move_on_after(self.settle_grace):
                    await self._board.aclose()
        self._nursery.cancel_scope.cancel(reason="broker closed")

    async def _finish_quiet_closes(self, quiet: list[Session]) -> None:
        """Wait, in one task, for the actors of *quiet* (each halted by
        :meth:`Session.close_at_once`) to end, naming any that does not (the rule of
        :mod:`broker._closing`), then release them in the store. Cancellation: run shielded by
        :meth:`aclose`; every wait is bounded by ``settle_grace``."""
        running = [s for s in quiet if not s.ended]

        def all_ended() -> bool:
            while running and running[-1].ended:  # each session is looked at until it ends
                running.pop()
            return not running

        if not await wait_ended_or_stuck(self, all_ended, lambda: running[-1].wait_closed()):
            for session in running:
                if not session.ended:
                    log_stuck(session.id)
        ids = iter([s.id for s in quiet])

        async def release() -> None:
            for session_id in ids:  # shared: each id is released by one of the tasks
                with trio.move_on_after(self.settle_grace):
                    await self.store.release(session_id)
            await trio.lowlevel.checkpoint()  # a task that found the ids taken

        async with trio.open_nursery() as releasers:
            for _ in range(min(_RELEASERS, len(quiet))):
                releasers.start_soon(release)


def _check_new_id(session_id: object) -> str:
    if isinstance(session_id, str):
        try:
            return str(uuid.UUID(session_id))
        except ValueError:
            pass
    raise ValueError(
        f"session_id must be a UUID string, got {session_id!r}: derive one, e.g. "
        "str(uuid.uuid5(namespace, your_agent_session_id))"
    )


def _check_project_rules(path: object) -> str | None:
    if path is None:
        return None
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise TypeError(
            f"project_rules must be a path (str or os.PathLike) or None, got {path!r}: name "
            "the project's rules file, e.g. '.broker/rules.toml'"
        )
    return os.fspath(path)


def _check_rules(rules: object) -> RuleSet:
    if rules is None:
        return RuleSet()
    if isinstance(rules, RuleSet):
        return rules
    if isinstance(rules, Rule):
        rules = (rules,)
    items: tuple[object, ...] | None = (
        tuple(rules) if isinstance(rules, list | tuple | set | frozenset) else None
    )
    if items is None or not all(isinstance(r, Rule) for r in items):
        raise TypeError(
            f"rules must be a RuleSet or an iterable of Rule, got {type(rules).__name__}: "
            "load them with broker.rules.load_rules(path, layer)"
        )
    return RuleSet(r for r in items if isinstance(r, Rule))


def _describe_store(store: EventStore) -> str:
    where = getattr(store, "where", None)  # a durable store's own words: "store file '…'"
    return where if isinstance(where, str) else f"the store {store!r}"


@asynccontextmanager
async def open_broker(
    *,
    policy: Policy | str = Policy.ASK,
    store: EventStore | str | os.PathLike[str] | None = None,
    delegation: Delegation | str = Delegation.PIN_NEVER,
    settle_grace: float = 5.0,
    rules: RuleSet | Iterable[Rule] | None = None,
    project_rules: str | os.PathLike[str] | None = None,
) -> AsyncIterator[Broker]:
    """Run an approval service for the duration of the block.

    Synopsis::

        async with open_broker(policy="ask") as broker:
            async with broker.open_session() as session, session.turn():
                outcome = await broker.request(
                    ApprovalRequest(agent=session.agent, tool_name="bash")
                )   # Outcome.UNAVAILABLE: no answerer, fail closed

    Settings are validated before anything starts: an unknown *policy* raises the spec's
    ``approval policy must be one of "ask" or "never"``. *store* is the event log: a file path
    or ``sqlite:///PATH`` opens the durable SQLite store there, ``postgresql://…`` (or
    ``postgres://…``) the PostgreSQL store (either recovered if needed; owned and closed by the
    broker; anything else raises :class:`~broker.store.StoreUrlError`, a :class:`ValueError`
    naming the accepted forms); ``None`` a fresh :class:`MemoryStore` (owned; for tests); a
    store object stays yours. *rules* (:mod:`broker.rules`) decide questions before any
    answerer: a ``deny`` rule rejects, an ``allow`` rule allows (``remembered``), an ``ask``
    rule or none goes on to the answerers.

    Cancellation: on exit (also when cancelled) every session is closed in the documented
    order, shielded and bounded by *settle_grace*, then the root nursery is cancelled.
    """
    default = parse_policy(policy)
    mode = _parse_delegation(delegation)
    grace = _check_grace(settle_grace)
    rule_set = _check_rules(rules)
    project_file = _check_project_rules(project_rules)
    if isinstance(store, str | os.PathLike):
        parse_store_url(store)  # a bad URL is refused before anything starts
    with collapse_single():
        async with _run_broker(default, store, mode, grace) as broker:
            broker.rules = rule_set
            broker.project_rules = project_file
            yield broker


@asynccontextmanager
async def _run_broker(
    default: Policy,
    store: EventStore | str | os.PathLike[str] | None,
    mode: Delegation,
    grace: float,
) -> AsyncIterator[Broker]:
    async with contextlib.AsyncExitStack() as owned:
        the_store: EventStore
        if store is None:
            the_store = MemoryStore()
            owned.push_async_callback(_close_shielded, the_store)
        elif isinstance(store, str | os.PathLike):
            the_store = await owned.enter_async_context(open_store(store))
        else:
            the_store = store
        async with trio.open_nursery() as nursery:
            broker = Broker._create(nursery, the_store, default, mode, grace)
            await nursery.start(broker.shielded_waits.run_timer)
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
    rules: RuleSet | Iterable[Rule] | None = None,
    project_rules: str | os.PathLike[str] | None = None,
    task_status: trio.TaskStatus[Broker] = trio.TASK_STATUS_IGNORED,
) -> None:
    """``broker = await nursery.start(serve_broker)``: the service as a task.

    Runs until cancelled; then shuts down as :func:`open_broker` does.
    """
    async with open_broker(
        policy=policy,
        store=store,
        delegation=delegation,
        settle_grace=settle_grace,
        rules=rules,
        project_rules=project_rules,
    ) as broker:
        task_status.started(broker)
        await trio.sleep_forever()
