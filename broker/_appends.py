"""The one append path of a session: sequence, submit, wait for durability, resync after a failure.

A task that appends *sequences* its events itself — precondition, audit rules, projection
fold, hand-off to the store (``store.submit``) — with no await in between, so the order of the
log is the order of these synchronous steps; then it awaits only durability. There is no inbox
and no actor hop between the appending task and the store's writer (decision 0014).

:class:`SessionLog` is that path for one session, with a small interface: :meth:`~SessionLog.append`
(the whole of it), or its halves for a caller that must do something between them —
:meth:`~SessionLog.ready` (admission, room, a fresh head), :meth:`~SessionLog.sequence_now`
(build, check, fold, submit) and :meth:`~SessionLog.durable` (wait). It knows nothing of
questions, turns or answerers; its owner gives it two callbacks: the admission check and what
to do when the store fences the session.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs
import trio

from ._audit_rules import check
from ._errors import AuditAppendError, AuditInvariantError
from ._events import Event
from ._projection import ApprovalState, fold
from .store import SessionFencedError, StoreError

if TYPE_CHECKING:
    from ._events import ApprovalDecided
    from ._host import SessionHost
    from .store import Durability

__all__ = [
    "Appendable",
    "Builder",
    "Lifecycle",
    "LogOwner",
    "SessionLog",
    "Submitted",
    "if_pending",
]

#: A conditional append: sees the projection as of its place in the log and returns the event,
#: None (nothing to append), or raises a :class:`BrokerError` precondition.
Builder = Callable[[ApprovalState], "Event | None"]
#: What an append takes: a builder, or an event appended as it is (still audit-checked).
Appendable = Builder | Event


class Lifecycle(enum.Enum):
    """Where a session is in its life; what its log admits follows from it."""

    OPEN = "open"
    CLOSING = "closing"
    CLOSED = "closed"
    CRASHED = "crashed"


#: One submission handed to the store: its first event (it names the submission in errors),
#: the ticket that says when all of it is durable, and the log's generation when it was handed
#: over. A plain tuple: one is made per append.
Submitted = tuple["Event", "Durability", int]


class LogOwner(Protocol):
    """What the log needs of the session that owns it (``Session`` implements it)."""

    def closed_error(self, action: str, parameter: str = "session") -> Exception:
        """The error for *action* on the session, which no longer takes appends."""
        ...

    def fenced(self, exc: SessionFencedError) -> None:
        """Another process owns the session now: fail closed and end, never write again."""
        ...


def if_pending(decided: ApprovalDecided) -> Builder:
    """A builder that appends *decided* only while its question is still pending."""

    def build(state: ApprovalState) -> Event | None:
        return decided if decided.id in state.pending else None

    return build


@attrs.define(eq=False, repr=False)
class SessionLog:
    """The order of one session's log and its projection, and the path that appends to it.

    ``status`` is the session's lifecycle, which its *owner* sets: appends are taken while it
    is open, and ``internal`` ones (a pending question's decision, a turn end) while it closes;
    otherwise the owner's ``closed_error`` is raised. The owner's ``fenced`` ends the session
    when another process took it over.
    """

    session_id: str
    host: SessionHost
    _owner: LogOwner
    # The projection folded from every event sequenced so far (given on resume).
    state: ApprovalState = attrs.field(factory=ApprovalState)
    # Bumped when a submitted event failed to become durable: the projection ran ahead of the
    # log, so the next append first re-reads the head from the store (_resync). A failure
    # reported for an older generation was already accounted for.
    _generation: int = attrs.field(default=0, init=False)
    _stale: bool = attrs.field(default=False, init=False)
    _resynced: trio.Event | None = attrs.field(default=None, init=False)
    status: Lifecycle = attrs.field(default=Lifecycle.OPEN, init=False)

    async def append(
        self,
        build: Appendable,
        *,
        internal: bool = False,
        schedule: bool = True,
        shielded: bool = False,
    ) -> Event | None:
        """Sequence one append (an event, or a conditional one: a builder), hand it to the
        store, wait until it is durable.

        ``schedule=False`` lets a caller that yields later anyway skip the scheduling pass when
        the store acknowledged at once. Cancellation: checked before sequencing (then nothing is
        appended); once sequenced the event may still land. With ``shielded`` the caller's
        cancellation cannot stop it, and every wait is bounded by the host's ``settle_grace``:
        past it :class:`AuditAppendError` is raised.
        """
        # ready() does nothing for a shielded append to an open, fresh, uncongested log: its
        # coroutine is skipped then (every decision's append).
        busy = self.status is not Lifecycle.OPEN or self._stale or self.host.store.congested
        if busy or not shielded:
            await self.ready(internal, shielded)
        try:
            submitted = self._sequence((build,))  # sequence_now, inline
        except Exception:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise
        if submitted is None:
            if shielded:
                await trio.lowlevel.cancel_shielded_checkpoint()
            else:
                await trio.lowlevel.checkpoint()
            return None
        ticket = submitted[1]
        if ticket.done and ticket.error is None:  # durable's first case, inline
            if schedule or shielded:
                await trio.lowlevel.cancel_shielded_checkpoint()
            return submitted[0]  # noqa: ASYNC910 (schedule=False: the caller yields later)
        return await self.durable(submitted, schedule=schedule, shielded=shielded)

    async def ready(self, internal: bool, shielded: bool) -> None:  # noqa: ASYNC910
        """Admission, the caller's cancellation (unless *shielded*), room in the store and a
        fresh head: what must hold before sequencing. Checkpoints only when it waits.
        Cancellation: unless *shielded*, raises before anything is sequenced."""
        if self.status is not Lifecycle.OPEN:
            self._check_admitted(internal)
        if not shielded:
            await trio.lowlevel.checkpoint_if_cancelled()
        if self._stale or self.host.store.congested:
            await self._make_ready(shielded)
            self._check_admitted(internal)

    def _check_admitted(self, internal: bool) -> None:
        status = self.status
        if status is not Lifecycle.OPEN and not (internal and status is Lifecycle.CLOSING):
            raise self._owner.closed_error("append to")

    async def sequence_now(self, *builds: Appendable) -> Submitted | None:
        """Build, check and fold events and hand them to the store as ONE submission, without
        an await: the log's order is the order of these calls. Each builder sees the projection
        after the events built before it; a builder returning None adds nothing. None when no
        event was built. Raises a build's precondition, :class:`AuditInvariantError`, or
        :class:`AuditAppendError` when the store refused the submission (then nothing of it was
        sequenced); a refusal leaves through a schedule point (house rule 3). Cancellation:
        none is delivered; the caller awaits :meth:`durable` next, which checkpoints."""
        try:
            return self._sequence(builds)  # noqa: ASYNC910 (see the docstring)
        except Exception:
            await trio.lowlevel.cancel_shielded_checkpoint()
            raise

    def _sequence(self, builds: tuple[Appendable, ...]) -> Submitted | None:
        before = state = self.state
        events: list[Event] = []
        for build in builds:
            event = build if isinstance(build, Event) else build(state)
            if event is None:
                continue
            broken = check(state, event)
            if broken is not None:
                # Invariant: nothing that breaks an audit rule is ever handed to the store.
                rule, detail = broken
                raise AuditInvariantError(
                    f"session {self.session_id} refused {event.TYPE}: rule {rule}: {detail}"
                )
            state = fold(state, event)
            events.append(event)
        if not events:
            return None
        generation = self._generation
        try:
            ticket = self.host.store.submit(self.session_id, before.events, events, state)
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
        self.state = state
        return (events[0], ticket, generation)

    async def durable(self, submitted: Submitted, *, schedule: bool, shielded: bool) -> Event:
        """Wait until a sequenced submission is durable and return its first event.

        Raises :class:`AuditAppendError` when it failed. Cancellation: as :meth:`append`.
        """
        event, ticket, generation = submitted
        if ticket.done and ticket.error is None:
            if schedule or shielded:
                # A schedule point that cannot lose the acknowledged result.
                await trio.lowlevel.cancel_shielded_checkpoint()
            return event  # noqa: ASYNC910 (schedule=False: the caller yields later)
        try:
            if shielded:
                if not await self.host.shielded_waits.wait(ticket):
                    raise AuditAppendError(
                        f"could not append to session {self.session_id} within settle_grace "
                        f"({self.host.settle_grace:g}s); the question is left for recovery"
                    )
                if ticket.error is not None:
                    raise ticket.error
            else:
                await ticket.wait()
        except StoreError as exc:
            self._failed(generation, exc)
            raise self._append_error(event, exc) from exc
        return event

    def _append_error(self, event: Event, exc: BaseException) -> AuditAppendError:
        """The error of an append of *event* that failed with *exc*."""
        return AuditAppendError(
            f"could not append {event.TYPE} to session {self.session_id}: {exc}"
        )

    def _failed(self, generation: int, exc: Exception) -> None:
        """A submitted event did not become durable: the projection is ahead of the log."""
        if isinstance(exc, SessionFencedError):
            # Another process owns the session now: fail closed and end, never write again.
            self._owner.fenced(exc)
            return
        if generation == self._generation:
            self._generation += 1
            self._stale = True

    # Called only when the store is congested or the log stale: it then awaits one of them.
    async def _make_ready(self, shielded: bool) -> None:  # noqa: ASYNC910
        """Wait for room in the store and, after a failed write, re-read the head."""
        with trio.CancelScope(shield=shielded) as scope:  # noqa: ASYNC912 (see above)
            if shielded:
                scope.deadline = trio.current_time() + self.host.settle_grace
            store = self.host.store
            while store.congested:
                await store.wait_for_room()
            if self._stale:
                await self._resync()
        if scope.cancelled_caught:
            raise AuditAppendError(
                f"could not append to session {self.session_id} within settle_grace "
                f"({self.host.settle_grace:g}s): its store stayed congested or unreadable"
            )

    async def _resync(self) -> None:
        """Roll the projection back to the store's acknowledged head (one task does it)."""
        if self._resynced is not None:
            await self._resynced.wait()
            return
        done = self._resynced = trio.Event()
        try:
            head = await self.host.store.head(self.session_id)
        except StoreError as exc:
            raise AuditAppendError(
                f"could not re-read session {self.session_id} after a failed append: {exc}"
            ) from exc
        else:
            self.state = head.state
            self._stale = False
        finally:
            self._resynced = None
            done.set()
