"""A store wrapper that fails chosen audit appends and watches every decision land."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import attrs

from .._events import ApprovalAsked, ApprovalDecided
from ..store import ForwardingStore, StoreError, Ticket

if TYPE_CHECKING:
    from .._events import Event
    from .._projection import ApprovalState
    from ..store import Durability

__all__ = ["FaultyStore"]


@attrs.define(eq=False)
class FaultyStore(ForwardingStore):
    """Wraps *inner*; an append carrying the ``asked`` of a call in ``fail_asked`` (or the
    ``decided`` of a call in ``fail_decided``) fails whole, once, like a full disk would: its
    ticket fails and nothing of it reaches the inner store.

    Every event id of a failed batch is remembered (``failed_ids``): a batch may carry other
    questions' events too, and those are failed with it. ``orphaning`` counts the planned
    ``decided`` failures whose ``asked`` had landed before (a question decided without an
    answerer submits both in one batch, which then fails whole and leaves nothing to recover).
    ``on_handed`` sees each ``asked`` and ``decided`` handed to the inner store, ``on_landed``
    each one made durable (on the in-memory store, in the same step).
    """

    fail_asked: set[str] = attrs.field(factory=set)
    fail_decided: set[str] = attrs.field(factory=set)
    on_handed: Callable[[ApprovalAsked | ApprovalDecided], None] | None = None
    on_landed: Callable[[ApprovalAsked | ApprovalDecided], None] | None = None
    call_of: dict[str, str] = attrs.field(factory=dict, init=False)
    failed_ids: set[str] = attrs.field(factory=set, init=False)
    injected: int = attrs.field(default=0, init=False)
    orphaning: int = attrs.field(default=0, init=False)

    def _check(self, events: Sequence[Event]) -> None:
        fail = False
        for event in events:
            if isinstance(event, ApprovalAsked) and event.call_id is not None:
                self.call_of[event.id] = event.call_id
                if event.call_id in self.fail_asked:
                    self.fail_asked.discard(event.call_id)
                    fail = True
            elif isinstance(event, ApprovalDecided):
                call = self.call_of.get(event.id)
                if call is not None and call in self.fail_decided:
                    self.fail_decided.discard(call)
                    fail = True
                    if not any(isinstance(e, ApprovalAsked) and e.id == event.id for e in events):
                        self.orphaning += 1
        if fail:
            self.injected += 1
            for event in events:
                if isinstance(event, ApprovalAsked | ApprovalDecided):
                    self.failed_ids.add(event.id)
            raise StoreError("injected fault: database or disk is full")

    def _handed(self, events: Sequence[Event]) -> None:
        if self.on_handed is not None:
            for event in events:
                if isinstance(event, ApprovalAsked | ApprovalDecided):
                    self.on_handed(event)

    def _landed(self, events: Sequence[Event]) -> None:
        if self.on_landed is not None:
            for event in events:
                if isinstance(event, ApprovalAsked | ApprovalDecided):
                    self.on_landed(event)

    def submit(
        self, session_id: str, seq: int, events: Sequence[Event], state: ApprovalState
    ) -> Durability:
        """Fail the ticket if planned (nothing reaches the inner store), else submit."""
        try:
            self._check(events)
        except StoreError as exc:
            failed = Ticket()
            failed.fail(exc)
            return failed
        ticket = self.inner.submit(session_id, seq, events, state)
        self._handed(events)
        if ticket.done:
            self._landed(events)
            return ticket
        return _Watched(ticket, lambda: self._landed(events))

    async def append(self, session_id: str, events: Sequence[Event]) -> None:
        """Fail if planned, else append to the inner store. Cancellation: as the inner store."""
        self._check(events)
        self._handed(events)
        await self.inner.append(session_id, events)
        self._landed(events)


@attrs.define(eq=False)
class _Watched:
    """The inner store's ticket, reporting its events once they are durable."""

    inner: Durability
    landed: Callable[[], None]

    def __attrs_post_init__(self) -> None:
        self.inner.add_done_callback(self._report)

    @property
    def done(self) -> bool:
        return self.inner.done

    @property
    def error(self) -> BaseException | None:
        return self.inner.error

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Called once resolved; the events are reported before."""
        self.inner.add_done_callback(fn)

    def _report(self) -> None:
        if self.inner.error is None:
            landed, self.landed = self.landed, _nothing
            landed()

    async def wait(self) -> None:
        """As the inner ticket. Cancellation: just stops waiting."""
        await self.inner.wait()


def _nothing() -> None:
    pass
