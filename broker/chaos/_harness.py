"""The chaos harness: seeded faults against a live broker, then the invariants checked.

Synopsis::

    report = run_chaos(ChaosConfig(seed=7, asks=2000, sessions=32))
    assert report.ok, report.violations

Runs on trio's :class:`~trio.testing.MockClock` with autojump (virtual time: fast, and the
timing of every fault is reproducible from the seed; the order in which trio runs tasks of one
scheduler pass may still vary). The store is the in-memory store behind a fault injector.

``run_chaos(config, store=URL)`` runs the same plan against a durable store (a SQLite file or a
PostgreSQL database, see :func:`~broker.store.open_store`) behind the same fault injector. Its
writer thread and server connection need a real clock, so that run does: its schedule is
compressed (every planned delay times :data:`REAL_TIME_SCALE`) and the asks get
:data:`REAL_QUIET` seconds to finish before the teardown. The sessions are new ones (fresh
ids), so runs sharing a database never meet; after the run their stored rows are verified as
``broker log verify`` does (hash chains, turn order and enclosure, pairing, checkpoints).
"""

from __future__ import annotations

import collections
import contextlib
import random
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING

import attrs
import trio
import trio.testing
from trio_util import AsyncValue

from .._broker import open_broker
from .._errors import AuditAppendError, SessionClosedError, TurnError
from .._events import ApprovalAsked, ApprovalDecided
from .._request import ApprovalRequest
from .._signal import AbortSignal
from .._vocabulary import Outcome
from ..store import (
    MemoryStore,
    PostgresUrl,
    VerifyError,
    open_reader,
    open_store,
    parse_store_url,
    verify_reader,
)
from ._checks import check_logs, never_reached
from ._faults import FaultyStore
from ._instrument import Watch
from ._plan import TOOLS, AskPlan, Behaviour, ChaosConfig, StoreFault, make_plans

if TYPE_CHECKING:
    from .._answerers import AnswererHandle, AnswerNext
    from .._broker import Broker
    from .._session import Session
    from ..store import EventRow, EventStore, SessionInfo, StoredCheckpoint, StoreReader

__all__ = ["ChaosReport", "run_chaos"]

# How many scheduler passes a withdrawn question may take to settle (its decided handed to the
# store; on the in-memory store that is when it is durable too).
ABORT_LAG_BOUND = 1
# On a durable store the asked is committed before the question is put: the asker wakes from
# the commit (one pass) and meets an abort at its question's first checkpoint (another).
PUT_PASSES = 2
_QUIET = 30.0  # virtual seconds the asks get to finish on their own before teardown
_TEARDOWN = 30.0  # virtual seconds the teardown gets to settle everything
#: On a real clock (a durable store): every planned delay is multiplied by this (the asks of
#: 2000 planned over 40 virtual seconds start within 4 real ones).
REAL_TIME_SCALE = 0.1
#: On a real clock: seconds the asks get to finish on their own before the teardown (the
#: answerers that hang wait this long); the teardown still gets ``_TEARDOWN``.
REAL_QUIET = 2.0


@attrs.frozen
class _Timing:
    """How the plan's delays map to the clock the run uses."""

    scale: float
    quiet: float
    teardown: float


_VIRTUAL = _Timing(scale=1.0, quiet=_QUIET, teardown=_TEARDOWN)
_REAL = _Timing(scale=REAL_TIME_SCALE, quiet=REAL_QUIET, teardown=_TEARDOWN)


@attrs.frozen(kw_only=True)
class ChaosReport:
    """The figures of a run and every violated invariant (``ok`` when there is none)."""

    config: ChaosConfig
    asked: int
    outcomes: dict[str, int]
    raised: dict[str, int]
    faults: dict[str, int]
    recovered: int
    abort_lags: tuple[int, ...]
    settled_by_teardown: int
    violations: tuple[str, ...]
    #: The durable store the run wrote to (its URL without a password), None for in-memory.
    store: str | None = None
    #: What verifying the run's stored sessions checked (None for in-memory).
    verified: str | None = None

    @property
    def ok(self) -> bool:
        return not self.violations

    def lines(self) -> list[str]:
        """A human-readable summary."""
        lags = sorted(self.abort_lags)
        bound = f"{ABORT_LAG_BOUND}"
        if self.store is not None:
            bound += f", {ABORT_LAG_BOUND + PUT_PASSES} from its asked's commit"
        lag = (
            f"p50 {lags[len(lags) // 2]}, max {lags[-1]} scheduling passes "
            f"(bound {bound}; {len(lags)} withdrawn mid-question)"
            if lags
            else "no question was withdrawn mid-question"
        )
        c = self.config
        return [
            f"chaos: seed {c.seed}, {c.asks} asks over {c.sessions} sessions, "
            f"fault rate {c.fault_rate:g}",
            "outcomes (decided): "
            + ", ".join(f"{k} {v}" for k, v in self.outcomes.items())
            + f"; asked {self.asked}",
            "raised to callers: "
            + (", ".join(f"{k} {v}" for k, v in self.raised.items()) or "none"),
            "faults: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
            f"crash tails closed by recovery: {self.recovered}; "
            f"settled by teardown: {self.settled_by_teardown}",
            f"abort to settled: {lag}",
            *self._store_lines(),
            f"violations: {len(self.violations)}",
            *[f"  - {v}" for v in self.violations[:20]],
        ]

    def _store_lines(self) -> list[str]:
        if self.store is None:
            return []
        return [
            f"store: {self.store} (real clock, delays x{REAL_TIME_SCALE:g})",
            f"stored log: {self.verified or 'not verified'}",
        ]


def run_chaos(config: ChaosConfig, *, store: str | None = None) -> ChaosReport:
    """Run *config* to completion; never raises for a violation.

    Without *store*: on a virtual clock, in memory. With *store* (a file path,
    ``sqlite:///PATH`` or ``postgresql://…``): on the real clock against that durable store,
    in new sessions, whose stored rows are then verified. Raises
    :class:`~broker.store.StoreUrlError` (a :class:`ValueError`) for a *store* of another kind
    and :class:`~broker.store.StoreError` when it cannot be opened, before anything runs.
    """
    if store is None:
        clock = trio.testing.MockClock(autojump_threshold=0)
        report: ChaosReport = trio.run(_run_in_memory, config, clock=clock)
        return report
    where = parse_store_url(store, parameter="--store")
    shown = str(where) if isinstance(where, PostgresUrl) else where.path
    report, stored = trio.run(_run_on_store, config, store)
    violations = list(report.violations)
    verified = _verify_stored(store, stored, violations)
    return attrs.evolve(report, store=shown, verified=verified, violations=tuple(violations))


def _verify_stored(store: str, stored: dict[str, int], violations: list[str]) -> str | None:
    """Verify the run's sessions in *store* as ``broker log verify --allow-pending`` does (an
    ask whose decided append was failed on purpose stays pending: nothing reopened the
    session to recover it); a violation, or rows other than the ones the run read back, is
    appended to *violations*. Blocking (read-only). Returns the summary, or None."""
    try:
        with open_reader(store) as reader:
            summary = verify_reader(_Subset(reader, frozenset(stored)), allow_pending=True)
    except VerifyError as exc:
        violations.append(f"the stored log does not verify: {exc}")
        return None
    expected = sum(stored.values())
    if summary.sessions != len(stored) or summary.events != expected:
        violations.append(
            f"the store holds {summary.sessions} sessions and {summary.events} events of the "
            f"run, but it read back {len(stored)} sessions and {expected} events"
        )
    return summary.summary().removeprefix("ok: ")


@attrs.frozen
class _Subset:
    """A store reader that shows only the sessions *ids* (runs may share a database)."""

    reader: StoreReader
    ids: frozenset[str]

    @property
    def where(self) -> str:
        return self.reader.where

    def sessions(self) -> list[SessionInfo]:
        return [info for info in self.reader.sessions() if info.session_id in self.ids]

    def session(self, session_id: str) -> SessionInfo | None:
        return self.reader.session(session_id) if session_id in self.ids else None

    def rows(self, session_id: str) -> Iterator[EventRow]:
        return self.reader.rows(session_id)

    def linked_rows(self, session_id: str) -> Iterator[EventRow]:
        return self.reader.linked_rows(session_id)

    def orphan_session_ids(self) -> list[str]:
        return [sid for sid in self.reader.orphan_session_ids() if sid in self.ids]

    def broken_links(self) -> list[tuple[str, int, str]]:
        return [link for link in self.reader.broken_links() if link[0] in self.ids]

    def checkpoints(self) -> list[StoredCheckpoint]:
        return [cp for cp in self.reader.checkpoints() if cp.session_id in self.ids]


@attrs.define(eq=False)
class _Run:
    config: ChaosConfig
    plans: list[AskPlan]
    store: FaultyStore
    watch: Watch
    timing: _Timing
    by_call: dict[str, AskPlan] = attrs.field(init=False)
    answered_allow: set[str] = attrs.field(factory=set)
    invocations: list[tuple[str, str]] = attrs.field(factory=list)
    abort_pass: dict[str, int] = attrs.field(factory=dict)
    decided_pass: dict[str, int] = attrs.field(factory=dict)
    asked_handed: dict[str, int] = attrs.field(factory=dict)
    asked_landed: dict[str, int] = attrs.field(factory=dict)
    decided_outcome: dict[str, Outcome] = attrs.field(factory=dict)
    raised: collections.Counter[str] = attrs.field(factory=collections.Counter)
    faults: collections.Counter[str] = attrs.field(factory=collections.Counter)
    # Asks spawned (queued on the limiter or running) and not finished, by call id.
    unfinished: set[str] = attrs.field(factory=set)
    # How many of them there are, as a value tasks can wait on (0: nothing in flight).
    outstanding: AsyncValue = attrs.field(factory=lambda: AsyncValue(0))
    finished_before_teardown: set[str] = attrs.field(factory=set)
    handles: dict[str, AnswererHandle] = attrs.field(factory=dict)
    violations: list[str] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.by_call = {plan.call_id: plan for plan in self.plans}

    def on_handed(self, event: ApprovalAsked | ApprovalDecided) -> None:
        """An ``asked`` or ``decided`` was handed to the store (on the in-memory store that is
        when it is durable too)."""
        if isinstance(event, ApprovalAsked):
            if event.call_id is not None:
                self.asked_handed.setdefault(event.call_id, self.watch.passes)
            return
        call = self.store.call_of.get(event.id)
        # A recovered decision closes an ask whose own decided could not be appended (leaving
        # its turn does that); it is not the asking task settling, so it has no abort lag.
        if call is not None and not event.recovered:
            self.decided_pass.setdefault(call, self.watch.passes)

    def on_landed(self, event: ApprovalAsked | ApprovalDecided) -> None:
        """An ``asked`` or ``decided`` is durable."""
        if isinstance(event, ApprovalAsked):
            if event.call_id is not None:
                self.asked_landed.setdefault(event.call_id, self.watch.passes)
            return
        call = self.store.call_of.get(event.id)
        if call is not None and not event.recovered:
            self.decided_outcome[call] = event.outcome

    def delay(self, planned: float) -> float:
        """*planned* seconds on the run's clock."""
        return planned * self.timing.scale

    # -- answerers ----------------------------------------------------------------------------

    async def gate(self, req: ApprovalRequest, next_: AnswerNext) -> Outcome:
        """First in every chain: records that a question reached the answerers."""
        self.invocations.append((req.agent.session.id, req.call_id or ""))
        return await next_()

    def answerer(self, req: ApprovalRequest, next_: AnswerNext) -> Awaitable[Outcome]:
        """The session's terminal answerer; a plain callable so it can also fail synchronously."""
        plan = self.by_call[req.call_id or ""]
        if plan.behaviour is Behaviour.RAISE_SYNC:
            raise RuntimeError("answerer failed before returning an awaitable")
        return self._answer(plan, next_)

    async def _answer(self, plan: AskPlan, next_: AnswerNext) -> Outcome:
        behaviour = plan.behaviour
        await trio.sleep(self.delay(plan.answer_delay) if behaviour is Behaviour.SLOW else 0)
        if behaviour in (Behaviour.ALLOW, Behaviour.SLOW):
            self.answered_allow.add(plan.call_id)  # no checkpoint between this and the return
            return Outcome.ALLOWED_ONCE
        if behaviour is Behaviour.REJECT:
            return Outcome.REJECTED
        if behaviour is Behaviour.CANCEL:
            return Outcome.CANCELLED
        if behaviour is Behaviour.RAISE:
            raise RuntimeError("answerer failed")
        if behaviour is Behaviour.GARBAGE:
            return "yes, sure"  # type: ignore[return-value]
        if behaviour is Behaviour.DELEGATE:
            return await next_()
        await trio.sleep_forever()  # HANG: until withdrawn, torn down, or the session closes
        raise AssertionError("unreachable")

    # -- one ask --------------------------------------------------------------------------------

    async def ask(self, broker: Broker, session: Session, plan: AskPlan) -> None:
        call = plan.call_id
        signal = AbortSignal()
        async with trio.open_nursery() as helpers:
            if plan.abort_at == 0.0:
                signal.abort("aborted before asking")
                self.faults["abort-before"] += 1
            elif plan.abort_at is not None:
                helpers.start_soon(self._abort_later, signal, call, plan.abort_at)
            if plan.teardown_at is not None:
                helpers.start_soon(self._teardown_later, session, plan.teardown_at)
            request = ApprovalRequest(
                agent=session.agent, tool_name=plan.tool, call_id=call, signal=signal
            )
            with trio.CancelScope() as caller:  # noqa: ASYNC912 (request() always checkpoints)
                if plan.cancel_at is not None:
                    caller.deadline = trio.current_time() + self.delay(plan.cancel_at)
                try:
                    await broker.request(request)
                except AuditAppendError:
                    self.raised["audit-append-error"] += 1
                except SessionClosedError:
                    self.raised["session-closed"] += 1
                except TurnError:
                    self.raised["outside-turn"] += 1
            if caller.cancelled_caught:
                self.raised["caller-cancelled"] += 1
            helpers.cancel_scope.cancel(reason="ask settled")

    def started(self, call: str) -> None:
        self.unfinished.add(call)
        self.outstanding.value = len(self.unfinished)

    def finished(self, call: str) -> None:
        self.unfinished.discard(call)
        self.outstanding.value = len(self.unfinished)

    async def _abort_later(self, signal: AbortSignal, call: str, delay: float) -> None:
        await trio.sleep(self.delay(delay))
        if call in self.unfinished:
            self.faults["abort-mid-question"] += 1
            self.abort_pass[call] = self.watch.passes
            signal.abort("chaos")

    async def _teardown_later(self, session: Session, delay: float) -> None:
        await trio.sleep(self.delay(delay))
        handle = self.handles.get(session.id)
        if handle is None or not session.is_open:
            return
        self.faults["answerer-torn-down"] += 1
        handle.close(reason="chaos teardown")
        with contextlib.suppress(SessionClosedError):
            self.handles[session.id] = await session.start_answerer(self.answerer)

    # -- racing policy switches and grants ------------------------------------------------------

    async def meddle(self, broker: Broker, sessions: list[Session], free: list[Session]) -> None:
        rng = random.Random(self.config.seed ^ 0x5EED)
        span = max(1.0, self.config.asks / 50)
        while True:
            await trio.sleep(self.delay(rng.uniform(0.0, span / 20)))
            try:
                if free and rng.random() < 0.5:
                    target = rng.choice(free)
                    if await broker.set_policy(target.agent, rng.choice(["ask", "never"])):
                        self.faults["policy-switch"] += 1
                else:
                    if await broker.grant(rng.choice(sessions), rng.choice(TOOLS)):
                        self.faults["grant"] += 1
            except SessionClosedError:
                return


async def _run_in_memory(config: ChaosConfig) -> ChaosReport:
    report, _ = await _run(config, MemoryStore(), _VIRTUAL)
    return report


async def _run_on_store(config: ChaosConfig, url: str) -> tuple[ChaosReport, dict[str, int]]:
    # Opened before the run's instrument is installed: the store's own tasks live on.
    async with open_store(url, parameter="--store") as inner:
        return await _run(config, inner, _REAL)


async def _run(
    config: ChaosConfig, inner: EventStore, timing: _Timing
) -> tuple[ChaosReport, dict[str, int]]:
    """The run on *inner*; also how many events each session's log holds, as read back."""
    plans = make_plans(config)
    watch = Watch()
    store = FaultyStore(
        inner,
        fail_asked={p.call_id for p in plans if p.store_fault is StoreFault.ASKED},
        fail_decided={p.call_id for p in plans if p.store_fault is StoreFault.DECIDED},
    )
    run = _Run(config=config, plans=plans, store=store, watch=watch, timing=timing)
    store.on_handed = run.on_handed
    store.on_landed = run.on_landed
    for plan in plans:
        if plan.behaviour is not Behaviour.ALLOW:
            run.faults[f"answerer-{plan.behaviour.value}"] += 1
        if plan.store_fault is not StoreFault.NONE:
            run.faults[f"planned-store-{plan.store_fault.value}"] += 1
    trio.lowlevel.add_instrument(watch)
    session_ids: list[str] = []
    never: set[str] = set()
    settled_by_teardown = 0
    try:
        async with open_broker(store=store) as broker:
            sessions = [await broker.start_session() for _ in range(config.sessions)]
            session_ids = [s.id for s in sessions]
            for index, session in enumerate(sessions):
                if index % 5 == 4:  # pinned to never for the whole run
                    await broker.set_approval_policy(session, "never")
                    never.add(session.id)
            free = [s for s in sessions if s.id not in never]
            stop = trio.Event()
            async with broker.answerer(run.gate, prepend=True), trio.open_nursery() as nursery:
                for session in sessions:
                    run.handles[session.id] = await session.start_answerer(run.answerer)
                    nursery.start_soon(_hold_turns, run, session, stop, len(run.handles))
                nursery.start_soon(run.meddle, broker, sessions, free)
                async with trio.open_nursery() as asks:
                    limiter = trio.CapacityLimiter(config.concurrency)
                    start = trio.current_time()
                    for plan in sorted(plans, key=lambda p: p.start):
                        await trio.sleep_until(start + run.delay(plan.start))
                        run.started(plan.call_id)
                        asks.start_soon(
                            _limited, limiter, run, broker, sessions[plan.session], plan
                        )
                    with trio.move_on_after(timing.quiet):
                        await run.outstanding.wait_value(0)
                    run.finished_before_teardown = {p.call_id for p in plans} - run.unfinished
                    pending = set(run.unfinished)
                    # Teardown in the documented order settles whatever still hangs.
                    async with trio.open_nursery() as closers:
                        for session in sessions:
                            closers.start_soon(session.aclose)
                    with trio.move_on_after(timing.teardown):
                        await run.outstanding.wait_value(0)
                    settled_by_teardown = len(pending - run.unfinished)
                    for call in sorted(run.unfinished):
                        run.violations.append(f"{call} was still waiting after the teardown")
                    asks.cancel_scope.cancel(reason="chaos run over")
                stop.set()
                nursery.cancel_scope.cancel(reason="chaos run over")
    finally:
        trio.lowlevel.remove_instrument(watch)
    for task in watch.alive:
        run.violations.append(f"task {task.name} was still running after the broker closed")
    logs = {sid: await inner.read(sid) for sid in session_ids}
    facts = check_logs(
        logs,
        answered_allow=run.answered_allow,
        failed_ids=store.failed_ids,
        violations=run.violations,
    )
    never_reached(run.invocations, never, run.violations)
    run.faults["injected-store-failure"] = store.injected
    run.faults["injected-store-decided-alone"] = store.orphaning
    lags = []
    for call, at in run.abort_pass.items():
        settled = run.decided_pass.get(call)
        if settled is None or run.decided_outcome.get(call) is not Outcome.CANCELLED:
            continue  # decided before the abort landed, or its audit append was failed
        bound = ABORT_LAG_BOUND
        while_put = ""
        put = run.asked_landed.get(call, settled)
        if run.asked_handed.get(call, put) < put:
            # Its asked went to a durable store on its own, and the question is put (the abort
            # can withdraw it) only once that is committed: settled before is not the abort's
            # doing (the caller's cancellation, its turn's end); after, the lag counts from the
            # later of the abort and the commit, plus the passes the asker needs to wake from
            # the commit and meet the abort. Never on the in-memory store (handed is durable).
            if put > settled:
                continue
            if at <= put + 1:  # before the asker woke from the commit and listened
                while_put = " (it came within a pass of its asked's commit)"
            at, bound = max(at, put), ABORT_LAG_BOUND + PUT_PASSES
        lag = settled - at
        lags.append(lag)
        if lag > bound:
            run.violations.append(
                f"{call} settled {lag} scheduling passes after its abort (bound {bound})"
                + while_put
            )
    report = ChaosReport(
        config=config,
        asked=facts.asked,
        outcomes=facts.outcomes,
        raised=dict(run.raised),
        faults=dict(run.faults),
        recovered=facts.recovered,
        abort_lags=tuple(lags),
        settled_by_teardown=settled_by_teardown,
        violations=tuple(run.violations),
    )
    return report, {sid: len(events) for sid, events in logs.items()}


async def _hold_turns(run: _Run, session: Session, stop: trio.Event, index: int) -> None:
    """Hold a turn open on *session*; with faults on, end it at random moments and reopen.

    Ending a turn while its questions are pending is a fault of its own: each pending question
    must settle ``cancelled`` inside the turn before ``turn/end`` (checked from the logs, by
    the same rules as ``broker log verify``). Asks landing between two turns raise the spec's
    out-of-turn ``TurnError``.
    """
    rng = random.Random((run.config.seed << 8) ^ index)
    span = max(1.0, run.config.asks / 50)
    await trio.lowlevel.checkpoint()
    while not stop.is_set():
        async with session.turn():
            if rng.random() >= run.config.fault_rate:
                await stop.wait()
                return
            with trio.move_on_after(run.delay(rng.uniform(0.0, span / 4))):
                await stop.wait()
            if session.pending:
                run.faults["turn-ended-while-pending"] += 1


async def _limited(
    limiter: trio.CapacityLimiter, run: _Run, broker: Broker, session: Session, plan: AskPlan
) -> None:
    try:
        async with limiter:
            await run.ask(broker, session, plan)
    finally:
        run.finished(plan.call_id)
