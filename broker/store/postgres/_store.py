"""The PostgreSQL event store (not built yet: :func:`open_postgres_store` says so)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from .._protocol import StoreOpenError
from .._url import redact_dsn

if TYPE_CHECKING:
    from .._protocol import EventStore

__all__ = ["open_postgres_store"]


@asynccontextmanager
async def open_postgres_store(dsn: str) -> AsyncIterator[EventStore]:
    """Open the PostgreSQL store at *dsn* for the block.

    Raises :class:`~broker.store.StoreOpenError`: this broker has no PostgreSQL store yet.
    Cancellation: a plain checkpoint; nothing is opened.
    """
    await trio.lowlevel.checkpoint()
    raise StoreOpenError(
        f"store {redact_dsn(dsn)!r}: the postgresql store is not available in this version "
        "of broker (broker.store.postgres has no PostgresStore yet): pass a SQLite file path"
    )
    yield  # pragma: no cover - makes this an async generator
