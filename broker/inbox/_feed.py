"""The live list every open page watches: one poller over the board, fanned out to the pages.

Synopsis::

    feed = Feed(board)
    await nursery.start(feed.run_poller)              # the one task that polls board.pending()
    async with feed.subscribe() as (first, changes):
        send(first)                            # a Snapshot event: everything pending now
        async for event in changes:            # Change events, encoded once for every page
            send(event)

One task polls :meth:`AnswerBoard.pending` every ``interval`` seconds while at least one page
listens (nothing runs while nobody does), compares the ids with the last poll and, when
something changed, encodes one ``change`` event — the questions put up, and for each question
gone what it settled as (:meth:`AnswerBoard.status`) — and hands it to every page. The browser
never polls per question, so hundreds of pending questions cost one query per interval.

Bounded everywhere: a page's queue holds ``queue_size`` events; a page that does not keep up
(its queue is full: a slow or stalled client) is dropped — its stream is cancelled, and the
browser's EventSource reconnects and starts over from a fresh snapshot — never buffered
without end. At most ``max_subscribers`` pages listen at once (:class:`FeedBusyError` past
that), and a snapshot carries at most ``limit`` questions (with the total).

Containment: a poll that fails with a :class:`~broker.store.StoreError` or an ``OSError`` (the
store file went away, a lock timed out) is logged and retried on the next interval; the pages
keep the list they have. Anything else propagates and ends the inbox.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import attrs
import trio

from ..store import StoreError
from ._wire import Change, Gone, Snapshot, dumps, shown, shown_name

if TYPE_CHECKING:
    from ..store import AnswerBoard, PendingQuestion

__all__ = ["Feed", "FeedBusyError", "sse"]

_log = logging.getLogger("broker.inbox")


class FeedBusyError(Exception):
    """As many pages listen as the feed allows; the caller answers 503."""


def sse(event: str, data: bytes) -> bytes:
    """One Server-Sent Events message (*data* is one line of JSON: no newline to split)."""
    return b"event: " + event.encode() + b"\ndata: " + data + b"\n\n"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@attrs.define(eq=False)
class _Listener:
    # Invariant: ``send`` is in Feed._listeners exactly while the page's stream may read it.
    send: trio.MemorySendChannel[bytes]
    scope: trio.CancelScope


@attrs.define(eq=False)
class Feed:
    """The pending list of *board*, polled by one task and shared by every page (module doc)."""

    board: AnswerBoard
    interval: float = 0.1
    queue_size: int = 64
    max_subscribers: int = 64
    limit: int = 2000
    # Invariant: the ids and questions pending at the last successful poll, oldest first.
    _current: dict[str, PendingQuestion] = attrs.field(factory=dict, init=False)
    _listeners: list[_Listener] = attrs.field(factory=list, init=False)
    # Pages waiting for their first snapshot: they keep the poller awake too.
    _joining: int = attrs.field(default=0, init=False)
    _wake: trio.Event = attrs.field(factory=trio.Event, init=False)
    # Replaced after every poll (successful or not): waiting on it waits for the next one.
    _polled: trio.Event = attrs.field(factory=trio.Event, init=False)

    async def run_poller(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Poll the board while any page listens, forever.

        Cancellation: stops between polls or in one (a poll changes nothing); the pages' own
        streams end with the server's nursery.
        """
        task_status.started()
        while True:
            if not (self._listeners or self._joining):
                self._wake = trio.Event()
                await self._wake.wait()
            await self.poll_once()
            await trio.sleep(self.interval)

    async def poll_once(self) -> None:
        """Read the board once and tell every page what changed. Cancellation: changes
        nothing (the next poll compares with the last complete one)."""
        await trio.lowlevel.checkpoint()
        try:
            questions = await self.board.pending()
        except (StoreError, OSError) as exc:
            _log.warning("broker inbox: reading the pending questions failed: %s", exc)
            self._mark_polled()
            return
        # A question a rule gives to named approvers is not broadcast: every page sees the
        # feed, and only those approvers may see it (they list it from /api/pending).
        fresh = {question.id: question for question in questions if not question.approvers}
        added = [shown(q) for qid, q in fresh.items() if qid not in self._current]
        gone_ids = [qid for qid in self._current if qid not in fresh]
        gone = [await self._gone(qid) for qid in gone_ids]
        self._current = fresh
        if added or gone:
            self._broadcast(
                sse(
                    "change",
                    dumps(Change(added=added, gone=gone, total=len(fresh), now_ms=_now_ms())),
                )
            )
        self._mark_polled()

    async def _gone(self, question_id: str) -> Gone:
        await trio.lowlevel.checkpoint()
        try:
            status = await self.board.status(question_id)
        except (StoreError, OSError) as exc:
            _log.warning("broker inbox: reading question %s failed: %s", question_id, exc)
            status = None
        if status is None or status.settled is None:
            return Gone(id=question_id)
        by = status.answer.by if status.answer is not None else None
        return Gone(
            id=question_id,
            outcome=status.settled.value,
            by=None if by is None else shown_name(by),
        )

    def _mark_polled(self) -> None:
        polled, self._polled = self._polled, trio.Event()
        polled.set()

    def _broadcast(self, message: bytes) -> None:
        kept = []
        for listener in self._listeners:
            try:
                listener.send.send_nowait(message)
            except trio.WouldBlock:
                # A page that does not keep up is dropped, not buffered for: its browser
                # reconnects and starts from a fresh snapshot.
                listener.scope.cancel(reason="broker inbox: the page did not keep up")
                listener.send.close()
                continue
            kept.append(listener)
        self._listeners = kept

    def snapshot(self) -> bytes:
        """The ``snapshot`` event of the last poll (at most ``limit`` questions)."""
        questions = [shown(q) for q in list(self._current.values())[: self.limit]]
        return sse(
            "snapshot",
            dumps(Snapshot(questions=questions, total=len(self._current), now_ms=_now_ms())),
        )

    @asynccontextmanager
    async def subscribe(
        self, scope: trio.CancelScope
    ) -> AsyncIterator[tuple[bytes, trio.MemoryReceiveChannel[bytes]]]:
        """Listen: yields the snapshot of a fresh poll and the page's queue of changes.

        *scope* is the page's stream: the feed cancels it when the page does not keep up.
        Raises :class:`FeedBusyError` when ``max_subscribers`` pages listen already.
        Cancellation: while waiting for the fresh poll, stops waiting; the page never joined.
        """
        if len(self._listeners) + self._joining >= self.max_subscribers:
            await trio.lowlevel.checkpoint()
            raise FeedBusyError(
                f"{self.max_subscribers} pages are open on this inbox already: close one"
            )
        self._joining += 1
        self._wake.set()
        try:
            await self._polled.wait()
        finally:
            self._joining -= 1
        send, receive = trio.open_memory_channel[bytes](self.queue_size)
        # No checkpoint between the snapshot and joining: no change falls between the two.
        first = self.snapshot()
        listener = _Listener(send=send, scope=scope)
        self._listeners.append(listener)
        try:
            with receive:
                yield first, receive
        finally:
            if listener in self._listeners:
                self._listeners.remove(listener)
            send.close()
