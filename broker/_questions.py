"""The request algorithm (contract §3): one session's questions, from admission to settlement.

:meth:`Questions.ask` reads as the spec's steps: admit the question (its :class:`Flight`),
put ``approval/asked``, decide (3.1–3.3 without an await, else the answerer waterfall inside the
flight's scope), append ``approval/decided``, return. The appends go through the session's
:class:`~broker._appends.SessionLog`; the session is reached only through :class:`Asker`, what
the algorithm needs of it, so this module does not import the session module.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from ._agent import Agent
from ._answerers import AnswererHandle, run_waterfall
from ._appends import Appendable, Builder, Lifecycle, SessionLog, if_pending
from ._arguments import arguments_digest
from ._collapse import collapse_single
from ._errors import SessionClosedError, TurnError
from ._events import ApprovalAsked, ApprovalDecided, ApprovalRevoke, Event, maker
from ._flight import Flight, Withdrawal
from ._projection import ApprovalState, Grant
from ._request import ASKING, ApprovalRequest, Asking
from ._signal import is_aborted
from ._texts import OUTSIDE_TURN
from ._vocabulary import Outcome, Policy, Source
from .rules import Rule, RuleDecision, RuleSet
from .telemetry import SWITCH as TELEMETRY
from .telemetry import QuestionTrace, observe_question

__all__ = ["Asker", "Decision", "Questions"]

log = logging.getLogger("broker.session")

# Question ids: UUID4 strings cut from a buffered pool of OS randomness. ``str(uuid.uuid4())``
# makes one ``urandom`` system call per id, a visible part of an in-memory ask; reading 4 KiB
# at a time and setting the version/variant bits ourselves gives the same ids (RFC 4122
# version 4, 122 random bits from the OS CSPRNG) at a fraction of the cost. The pool is kept
# as hex: an id is cut from it as text, its version digit written as "4" and its variant digit
# (the top two bits of byte 8 set to 10) mapped from the random one.
# The pool is per thread: brokers run by trio in several threads of one process never cut the
# same id from a pool they share.
_POOL_BYTES = 4096
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


class _Pool(threading.local):
    text = ""
    offset = 2 * _POOL_BYTES


_pool = _Pool()


def _reset_after_fork() -> None:
    # A forked child must not hand out the ids its parent will hand out.
    _pool.text, _pool.offset = "", 2 * _POOL_BYTES


os.register_at_fork(after_in_child=_reset_after_fork)


def new_id() -> str:
    """A fresh question id: a UUID4 string."""
    pool = _pool
    text, start = pool.text, pool.offset
    if start >= len(text):
        text = pool.text = os.urandom(_POOL_BYTES).hex()
        start = 0
    pool.offset = start + 32
    h = text[start : start + 32]
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"


@attrs.frozen(kw_only=True)
class Decision:
    """What :meth:`Broker.request_decision` returns; ``request()`` returns ``outcome`` alone.

    ``id`` is the audit pair's id; ``remembered`` marks a remembered grant or an allow rule;
    ``by_policy`` a rejection by the ``never`` policy (no answerer was consulted);
    ``answered_by`` who answered, when the deciding answerer said so (:class:`Answer`);
    ``source`` what decided (as logged); ``rule`` the rule that decided, when one did;
    ``arguments_digest`` the digest of the arguments the question carried (:meth:`covers`).
    """

    id: str
    outcome: Outcome
    remembered: bool = False
    by_policy: bool = False
    answered_by: str | None = None
    source: Source | None = None
    rule: Rule | None = None
    arguments_digest: str | None = None
    #: What the person who answered said with it (their :class:`Answer`'s ``message``).
    message: str | None = None
    #: Every answer people gave to it on the answer board, as ``approval/decided`` records
    #: them (who, how authenticated, counted or refused; ``; ``-separated).
    answers: str | None = None

    def covers(self, arguments: object) -> bool:
        """Whether this decision allows running with exactly *arguments*: it is
        ``allowed-once`` and was asked with arguments whose digest is theirs. Call it right
        before running; False means run nothing (the arguments changed since the approval,
        or the question carried none)."""
        if self.outcome is not Outcome.ALLOWED_ONCE or self.arguments_digest is None:
            return False
        try:
            return arguments_digest(arguments) == self.arguments_digest
        except (TypeError, ValueError):
            return False


@attrs.frozen
class _Settled:
    """What steps 3.1–3.3 decided, before any answerer."""

    outcome: Outcome
    source: Source
    remembered: bool = False
    rule: Rule | None = None
    grant: str | None = None


_CAUSES = {
    Withdrawal.ABORTED: Source.ABORT,
    Withdrawal.SESSION_CLOSING: Source.SESSION_CLOSING,
    Withdrawal.TURN_ENDING: Source.TURN_ENDING,
    Withdrawal.ANSWERER_LOST: Source.ANSWERER_LOST,
}


class Asker(Protocol):
    """What the request algorithm needs of the session it asks for (``Session`` implements it)."""

    @property
    def id(self) -> str: ...
    @property
    def agent(self) -> Agent: ...
    @property
    def effective_policy(self) -> Policy: ...
    @property
    def rules(self) -> RuleSet: ...
    def is_granted(self, tool_name: str) -> bool: ...
    def grant_covering(
        self, tool_name: str, arguments: Mapping[str, Any] | None, clock: Callable[[], int]
    ) -> tuple[str | None, tuple[Grant, ...]]: ...
    def answerer_chain(self) -> list[AnswererHandle]: ...
    def require_open(self, parameter: str = "session", action: str = "use") -> None: ...


@attrs.define(eq=False, repr=False)
class Questions:
    """The questions of one session between admission and settlement, and the algorithm that
    asks them. ``turn_ending`` is set by the session while a turn is being left: its questions
    settle and new ones are refused."""

    _session: Asker
    _log: SessionLog
    # Questions past admission and not yet settled, by request id; made on the first question
    # (an idle session should cost as little memory as possible).
    _flights: dict[str, Flight] | None = attrs.field(default=None, init=False)
    # Created when first needed: an idle session should cost as little memory as possible.
    _settled: trio.Event | None = attrs.field(default=None, init=False)
    turn_ending: bool = attrs.field(default=False, init=False)
    # Grants the last decision found expired, recorded with its question's events.
    _expired: tuple[Grant, ...] = attrs.field(default=(), init=False)

    def __len__(self) -> int:
        return 0 if self._flights is None else len(self._flights)

    def ids(self) -> set[str]:
        """The ids of the questions in flight."""
        return set() if self._flights is None else set(self._flights)

    async def ask(self, req: ApprovalRequest) -> Decision:
        """Decide whether the session's agent may run ``req.tool_name`` once (contract §3).

        ``req.agent`` must be the session's agent (exact identity). Raises :class:`TurnError`
        (exact spec text) outside an open turn, appending nothing; :class:`AuditAppendError`
        when either audit event cannot be made durable. Otherwise returns the
        :class:`Decision` after both ``approval/asked`` and ``approval/decided`` are durable.

        Cancellation: the caller's cancellation before the decision withdraws the question; its
        ``approval/decided`` (``cancelled``) is still appended, shielded and bounded by
        ``settle_grace``, and then :class:`trio.Cancelled` propagates. Once the decision is made
        its ``approval/decided`` is appended shielded (same bound) and the decision returned;
        the cancellation is then delivered at the caller's next checkpoint. A question that
        steps 3.1–3.3 decide (policy ``never``, a grant, an abort before it was put) is decided
        before any await: its ``decided`` goes to the store with ``asked``, in one submission
        awaited shielded, so a cancellation then gets the decision, not ``cancelled``.

        With :mod:`broker.telemetry` on, the question is a span and counts in its metrics.
        """
        if TELEMETRY.off:  # the whole cost of telemetry while it is off
            decision = await self._ask(req, None, True)
        else:
            decision = await self._observed(req)
        assert isinstance(decision, Decision)  # asked for in full
        return decision

    async def outcome(self, req: ApprovalRequest) -> Outcome:
        """:meth:`ask`, returning only the outcome (what ``broker.request`` returns): the same
        algorithm, appends and cancellation, without making the :class:`Decision`."""
        if TELEMETRY.off:
            result = await self._ask(req, None, False)
        else:
            result = await self._observed(req)
        return result if isinstance(result, Outcome) else result.outcome

    async def _observed(self, req: ApprovalRequest) -> Decision | Outcome:
        trace = observe_question(req, self._session.id)  # None: the first question found it off
        if trace is None:
            return await self._ask(req, None, True)
        return await trace.observe(self._decision(req, trace))

    async def _decision(self, req: ApprovalRequest, trace: QuestionTrace) -> Decision:
        decision = await self._ask(req, trace, True)
        assert isinstance(decision, Decision)  # asked for in full
        return decision

    async def _ask(
        self, req: ApprovalRequest, trace: QuestionTrace | None, full: bool
    ) -> Decision | Outcome:
        """The algorithm; returns the :class:`Decision` when *full*, else its outcome alone."""
        session = self._session
        if req.agent is not session.agent:
            raise ValueError(
                f"req.agent must be the agent of session {session.id}: ask through the session "
                "the agent belongs to (or broker.request, which finds it)"
            )
        request_id = new_id()
        # Made when the waterfall runs (its answerers read it): a question decided before
        # any answerer does not need it.
        question: Asking | None = None
        asked = _asked(request_id, req.tool_name, req.call_id, req.reason, req.arguments_digest)

        def put(state: ApprovalState) -> Event:
            if not state.turn_open:
                raise TurnError(OUTSIDE_TURN)
            return asked

        flight = self._admit(request_id)
        settle_grace = self._log.host.settle_grace
        session_log = self._log
        try:
            try:
                await session_log.ready(internal=False, shielded=False)
                # Steps 3.1-3.3 need no await: decided here, with nothing between them and
                # sequencing asked (which changes neither the policy nor the grants they read).
                decided_now = self._decide_now(req, flight)
                if type(decided_now) is _Settled:
                    if decided_now.source is Source.GRANT:
                        decided_now = await self._unless_revoked(req, flight, decided_now)
                    if decided_now is not None:
                        return await self._put_decided(put, request_id, decided_now, req, full)
                question = _asking(req, request_id, [], (), 1)
                if isinstance(decided_now, Rule):  # an ask rule: who alone may answer, how many
                    question.approvers = decided_now.approvers
                    question.quorum = decided_now.quorum
                asked_submission = await session_log.sequence_now(*self._expiries(), put)
                assert asked_submission is not None  # put always builds
                ticket = asked_submission[1]
                if not ticket.done or ticket.error is not None:  # else durable() returns at once
                    await session_log.durable(asked_submission, schedule=False, shielded=False)
                # The waterfall's context: req.question_id reads it (a context variable set
                # directly, not through a context manager: this runs on every question).
                token = ASKING.set(question)
                if trace is not None:
                    trace.waiting()  # the child span: the time answerers take
                try:
                    outcome = await self._decide(req, flight)
                finally:
                    ASKING.reset(token)
                    if trace is not None:
                        trace.waited()
            except trio.Cancelled:
                with trio.CancelScope(shield=True), trio.move_on_after(settle_grace):
                    await self._record_cancelled(request_id)
                    if question is not None and question.hooks:
                        await question.settled(Outcome.CANCELLED)
                raise
            answered = flight.answered
            said = answered is not None and answered[0] is outcome and flight.cause is None
            answered_by = answered[1] if said and answered is not None else None
            message = answered[2] if said and answered is not None else None
            answers = answered[3] if said and answered is not None else None
            source, answerer = _source_of(flight, outcome)
            decided = _decided(
                request_id,
                outcome,
                False,  # remembered
                None,  # policy
                False,  # recovered
                answered_by,
                source,
                None,  # rule_layer
                None,  # rule_file
                None,  # rule_index
                None,  # grant
                answerer,
                message,
                answers,
            )
            # Invariant: once the race is decided, the log records that decision — a caller
            # cancelled from here on gets Cancelled at its next checkpoint, after the return.
            await session_log.append(decided, internal=True, shielded=True)
            assert question is not None  # made before the waterfall ran
            if question.hooks:
                with trio.CancelScope(shield=True), trio.move_on_after(settle_grace):
                    await question.settled(outcome)
            if not full:
                return outcome
            return _decision(
                request_id,
                outcome,
                False,  # remembered
                False,  # by_policy
                answered_by,
                source,
                None,  # rule
                req.arguments_digest,
                message,
                answers,
            )
        finally:
            self._settle(request_id)

    async def _put_decided(
        self, put: Builder, request_id: str, settled: _Settled, req: ApprovalRequest, full: bool
    ) -> Decision | Outcome:
        """Append ``asked`` and the ``decided`` that steps 3.1–3.3 made, as ONE submission (one
        transaction: both land or neither), and wait once, shielded and bounded by
        ``settle_grace``: the decision was made before any await, so no cancellation can come
        "before the decision", and the log never holds one of the pair without the other. If
        the submission fails, the request raises the error, as for a failed ``asked``.
        Cancellation: cannot interrupt the wait; it is delivered at the caller's next
        checkpoint, after the decision is durable.
        """
        by_policy = settled.source is Source.POLICY
        rule = settled.rule
        origin = rule.origin if rule is not None else None
        decided = _decided(
            request_id,
            settled.outcome,
            settled.remembered,
            Policy.NEVER if by_policy else None,
            False,  # recovered
            None,  # answered_by
            settled.source,
            origin.layer.value if origin is not None else None,  # rule_layer
            origin.file if origin is not None else None,  # rule_file
            origin.index if origin is not None else None,  # rule_index
            settled.grant,
            None,  # answerer
            None,  # message
            None,  # answers
        )
        session_log = self._log
        submitted = await session_log.sequence_now(*self._expiries(), put, decided)
        assert submitted is not None  # put always builds
        ticket = submitted[1]
        if ticket.done and ticket.error is None:  # durable()'s first case, inline
            await trio.lowlevel.cancel_shielded_checkpoint()
        else:
            await session_log.durable(submitted, schedule=True, shielded=True)
        if not full:
            return settled.outcome
        return _decision(
            request_id,
            settled.outcome,
            settled.remembered,
            by_policy,
            None,  # answered_by
            settled.source,
            rule,
            req.arguments_digest,
            None,  # message
            None,  # answers
        )

    def _decide_now(self, req: ApprovalRequest, flight: Flight) -> _Settled | Rule | None:
        """Steps 3.1–3.3, which consult no answerer — abort, the ``never`` policy, then the
        rules and grants (deny beats ask beats allow; a grant is an allow) — or, when the
        waterfall must decide (:meth:`_decide`), the ask rule that sent it there (its
        approvers and quorum apply) or None."""
        signal = req.signal
        if flight.cause is None and signal is not None and is_aborted(signal):
            flight.withdraw(Withdrawal.ABORTED, "before the question was put")
        if flight.cause is not None:
            return _WITHDRAWN[flight.cause]
        session = self._session
        if session.effective_policy is Policy.NEVER:
            return _BY_POLICY
        rules = session.rules
        if rules.rules:
            verdict = rules.decide(req.tool_name, req.arguments)
            decision = verdict.decision
            if decision is RuleDecision.DENY:
                return _Settled(Outcome.REJECTED, Source.RULE, rule=verdict.rule)
            if decision is RuleDecision.ASK:
                return verdict.rule  # an ask rule beats any allow, a grant included
            if decision is RuleDecision.ALLOW:
                return _Settled(
                    Outcome.ALLOWED_ONCE, Source.RULE, remembered=True, rule=verdict.rule
                )
        grant, expired = session.grant_covering(req.tool_name, req.arguments, self._log.host.now_ms)
        if expired:
            self._expired = expired
        if grant is not None:
            return _Settled(Outcome.ALLOWED_ONCE, Source.GRANT, remembered=True, grant=grant)
        return None

    async def _unless_revoked(
        self, req: ApprovalRequest, flight: Flight, settled: _Settled
    ) -> _Settled | None:
        """*settled* (a grant allowed the call) unless that grant was revoked from another
        process: then its revocation goes to this session's log and the question is decided
        again (another grant, or the answerers). One read of the store's board per question
        a grant decides. Cancellation: before the question is put; nothing is written."""
        host = self._log.host
        current: _Settled | None = settled
        while current is not None and current.source is Source.GRANT:
            grant_id = current.grant
            if grant_id is None or not grant_id.startswith("g-"):
                break  # the seed's grant of a whole tool: revoked only by this process
            check = host.revoked_elsewhere(grant_id)
            if check is None:
                break
            revocation = await check
            if revocation is None:
                break
            await self._log.append(_revoked(grant_id, revocation.by))
            again = self._decide_now(req, flight)
            current = again if type(again) is _Settled else None
        return current  # noqa: ASYNC910 (no read needed: the caller's submission awaits next)

    def _expiries(self) -> tuple[Appendable, ...]:
        """The expiry of each grant the last decision found expired, once each (a builder: a
        grant revoked meanwhile is not expired again)."""
        expired = self._expired
        if not expired:  # the usual case: nothing to make
            return ()
        self._expired = ()
        return tuple(_revoked(g.id, None, expired=True) for g in expired)

    async def _decide(self, req: ApprovalRequest, flight: Flight) -> Outcome:
        """Steps 3.4–3.5, after :meth:`_decide_now` found no answer: the waterfall inside the
        flight's scope. Never raises anything but the caller's own :class:`trio.Cancelled`."""
        signal = req.signal
        chain = self._session.answerer_chain()
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
            return _settled_by(flight.cause)
        return outcome

    async def _record_cancelled(  # noqa: ASYNC910 (runs shielded, after a checkpoint)
        self, request_id: str
    ) -> None:
        decided = ApprovalDecided(id=request_id, outcome=Outcome.CANCELLED, source=Source.CALLER)
        try:
            # The asked append is FIFO before us; if it never landed there is nothing to pair.
            await self._log.append(if_pending(decided), internal=True)
        except (SessionClosedError, TurnError):
            log.warning(
                "question %s of session %s left unpaired for recovery",
                request_id,
                self._session.id,
            )

    # -- flights ----------------------------------------------------------------------------

    def _admit(self, request_id: str) -> Flight:
        if self._log.status is not Lifecycle.OPEN:
            self._session.require_open("req.agent", "ask in")
        if self.turn_ending:
            raise TurnError(OUTSIDE_TURN)
        flights = self._flights
        if flights is None:
            flights = self._flights = {}
        flight = flights[request_id] = Flight()
        return flight

    def _settle(self, request_id: str) -> None:
        flights = self._flights
        assert flights is not None  # admitted first
        flights.pop(request_id, None)
        if not flights and self._settled is not None:
            self._settled.set()
            self._settled = None

    def withdraw_all(self, cause: Withdrawal, detail: str) -> None:
        """Withdraw every question in flight (each settles by *cause*). Never blocks."""
        for flight in list(self._flights.values()) if self._flights else ():
            flight.withdraw(cause, detail)

    async def wait_settled(self) -> None:  # noqa: ASYNC910 (teardown; callers checkpoint)
        """Wait until no question is in flight. Cancellation: just stops waiting (callers
        bound the wait)."""
        if self._flights:
            if self._settled is None:
                self._settled = trio.Event()
            await self._settled.wait()


async def _watch_event(event: trio.Event, flight: Flight) -> None:
    await event.wait()
    flight.withdraw(Withdrawal.ABORTED, "the trio.Event was set")


def _revoked(grant_id: str, by: str | None, *, expired: bool = False) -> Builder:
    """``approval/revoke`` of *grant_id*, unless this session no longer holds it."""

    def build(state: ApprovalState) -> Event | None:
        live = any(g.id == grant_id for g in state.granted)
        return ApprovalRevoke(id=grant_id, by=by, expired=expired) if live else None

    return build


def _source_of(flight: Flight, outcome: Outcome) -> tuple[Source, str | None]:
    """What decided a question the waterfall ran for, and which answerer (if one did)."""
    if flight.cause is not None:
        return _CAUSES[flight.cause], None
    decider = flight.decider
    if decider is None or decider[1] is not outcome:
        return Source.NO_ANSWERER, None  # the chain's end (a step that yielded no decider)
    return decider[2], decider[0]


def _settled_by(cause: Withdrawal) -> Outcome:
    return Outcome.UNAVAILABLE if cause is Withdrawal.ANSWERER_LOST else Outcome.CANCELLED


# What steps 3.1-3.3 decide the same way every time, made once: the policy ``never``, and a
# question withdrawn before it was put (by cause).
_BY_POLICY = _Settled(Outcome.REJECTED, Source.POLICY)
_WITHDRAWN = {cause: _Settled(_settled_by(cause), _CAUSES[cause]) for cause in Withdrawal}

# The question's events and decision, made positionally with every field (broker._events.maker):
# each is made once a question.
_asked = maker(ApprovalAsked, "id tool_name call_id reason arguments_digest")
# Asking(request=..., id=...): no hooks yet, no approvers, a quorum of one.
_asking = maker(Asking, "request id hooks approvers quorum")
_decided = maker(
    ApprovalDecided,
    "id outcome remembered policy recovered answered_by source rule_layer rule_file rule_index "
    "grant answerer message answers",
)
_decision = maker(
    Decision,
    "id outcome remembered by_policy answered_by source rule arguments_digest message answers",
)
