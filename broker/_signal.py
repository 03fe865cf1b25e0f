"""Abort signals: the caller's way to withdraw a question (contract §1)."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import trio

__all__ = ["AbortSignal", "Signal", "is_aborted"]


@attrs.define(eq=False)
class AbortSignal:
    """A one-shot flag the caller fires with :meth:`abort` to withdraw a question.

    Synopsis::

        signal = AbortSignal()
        nursery.start_soon(ask_user, ApprovalRequest(..., signal=signal))
        ...
        signal.abort("the user closed the tab")   # the request settles ``cancelled``

    Unlike a bare :class:`trio.Event`, a request waiting on an ``AbortSignal`` is cancelled
    synchronously from :meth:`abort` (no watcher task), so a withdrawn question settles in the
    same scheduling pass. Call :meth:`abort` from the trio thread only.
    """

    _event: trio.Event = attrs.field(factory=trio.Event, init=False)
    _listeners: dict[object, Callable[[], None]] = attrs.field(factory=dict, init=False)
    reason: str | None = attrs.field(default=None, init=False)

    @property
    def aborted(self) -> bool:
        """Whether :meth:`abort` has been called."""
        return self._event.is_set()

    def abort(self, reason: str | None = None) -> None:
        """Fire the signal (idempotent; the first reason is kept). Never blocks."""
        if self._event.is_set():
            return
        self.reason = reason
        self._event.set()
        listeners = list(self._listeners.values())
        self._listeners.clear()
        for listener in listeners:
            listener()

    async def wait(self) -> None:
        """Wait until the signal fires. Cancellation: just stops waiting."""
        await self._event.wait()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call *listener* once when the signal fires — at once, before returning, if it fired
        already (a subscriber that came late must not miss it); returns the unsubscribe
        function."""
        if self._event.is_set():
            listener()
            return _nothing
        key = object()
        self._listeners[key] = listener

        def unsubscribe() -> None:
            self._listeners.pop(key, None)

        return unsubscribe


def _nothing() -> None:
    """The unsubscribe function of a listener that was called at once."""


Signal = AbortSignal | trio.Event


def is_aborted(signal: Signal | None) -> bool:
    """Whether *signal* (an :class:`AbortSignal`, a :class:`trio.Event` or ``None``) has fired."""
    if signal is None:
        return False
    if isinstance(signal, AbortSignal):
        return signal.aborted
    return signal.is_set()
