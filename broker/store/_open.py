"""Open the durable store a URL names: :func:`open_store`.

Synopsis::

    async with open_store("sessions.sqlite") as store: ...            # SQLite, as before
    async with open_store("sqlite:///var/broker/sessions.sqlite") as store: ...
    async with open_store("postgresql://broker@db/broker") as store: ...
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ._url import PostgresUrl, parse_store_url
from .postgres import open_postgres_store
from .sqlite import open_sqlite_store

if TYPE_CHECKING:
    from ._protocol import EventStore

__all__ = ["open_store"]


@asynccontextmanager
async def open_store(
    url: str | os.PathLike[str], *, parameter: str = "store"
) -> AsyncIterator[EventStore]:
    """Open the store *url* names for the block, with its defaults: a file path or
    ``sqlite:///PATH`` → :func:`~broker.store.open_sqlite_store`; ``postgresql://…`` or
    ``postgres://…`` → :func:`~broker.store.open_postgres_store`.

    Raises :class:`~broker.store.StoreUrlError` (a :class:`ValueError` naming *parameter* and
    the accepted forms) for anything else, before anything is opened.
    Cancellation: as the store's opener (opening is not interruptible; the store is closed on
    every exit).
    """
    where = parse_store_url(url, parameter=parameter)
    if isinstance(where, PostgresUrl):
        async with open_postgres_store(where.dsn) as postgres:
            yield postgres
        return
    async with open_sqlite_store(where.path) as sqlite:
        yield sqlite
