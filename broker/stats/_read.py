"""Reading a store's log for :func:`~broker.stats.collect`: a read-only snapshot, any store.

Synopsis::

    stats = read_stats("logs/sessions.sqlite", since_ms=now_ms - 86_400_000)  # blocking
    html = await stats_page("logs/sessions.sqlite")                  # in a worker thread

The store is opened read-only (:func:`broker.store.open_reader`: a SQLite file, ``sqlite:///``
or ``postgresql://``), as ``broker log show`` does: nothing is written and a broker may be
writing it meanwhile.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import attrs
import trio

from .._codec import EventDecodeError, decode_event
from ..store import LogToolError, StoreReader, open_reader
from ._collect import LoggedEvent, Stats, collect
from ._html import render_html

__all__ = ["logged_events", "read_stats", "reader_stats", "stats_page"]


def logged_events(reader: StoreReader) -> Iterator[LoggedEvent]:
    """Every event of every session of *reader*, session by session in creation order, each
    session's in seq order. Raises :class:`~broker.store.LogToolError` for a row that is not a
    valid event."""
    for info in reader.sessions():
        for row in reader.rows(info.session_id):
            try:
                event = decode_event(row.line)
            except EventDecodeError as exc:
                raise LogToolError(
                    f"{reader.where}: session {info.session_id!r} seq {row.seq} is not a valid "
                    f"event ({exc}): run 'broker log verify' on it"
                ) from exc
            yield LoggedEvent(session_id=row.session_id, seq=row.seq, ts_ms=row.ts_ms, event=event)


def reader_stats(reader: StoreReader, *, since_ms: int | None = None) -> Stats:
    """The :class:`Stats` of an open read-only snapshot *reader* (blocking: a thread or a
    CLI), events stored at or after *since_ms* (None: all)."""
    stats = collect(logged_events(reader), since_ms=since_ms)
    return attrs.evolve(stats, store=reader.where)


def read_stats(store: str | os.PathLike[str], *, since_ms: int | None = None) -> Stats:
    """The :class:`Stats` of the store *store* names (a path, ``sqlite:///…`` or
    ``postgresql://…``), read-only and blocking. Raises
    :class:`~broker.store.StoreOpenError` when it cannot be opened,
    :class:`~broker.store.StoreUrlError` for a URL of another kind and
    :class:`~broker.store.LogToolError` for a row that is not a valid event."""
    with open_reader(store) as reader:
        return reader_stats(reader, since_ms=since_ms)


def _page(store: str | os.PathLike[str], since_ms: int | None) -> str:
    return render_html(read_stats(store, since_ms=since_ms))


async def stats_page(
    store: str | os.PathLike[str],
    *,
    since_ms: int | None = None,
    limiter: trio.CapacityLimiter | None = None,
) -> str:
    """The self-contained HTML page of the store *store* names (what ``broker stats --html``
    writes), read and rendered in a worker thread (one of *limiter*'s tokens: the web inbox
    passes the one its other reads take). Raises as :func:`read_stats`.

    Cancellation: the read in progress is waited for (a snapshot read; it is not
    interrupted), then ``Cancelled`` is raised and the page is dropped."""
    return await trio.to_thread.run_sync(_page, store, since_ms, limiter=limiter)
